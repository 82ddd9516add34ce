"""CoNLL-U reading/writing and dependency-tree validation (synattn.trees.dependency, conllu_io)."""

from __future__ import annotations

import io
import logging
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from synattn.errors import InputError, TreebankError
from synattn.trees.conllu_io import read_conllu, read_conllu_with_report, to_conllu, write_conllu
from synattn.trees.dependency import DependencyTree, head_problem, is_projective_heads, validate_heads

# line numbers:  1 newdoc, 2 sent_id, 3 text, 4 "I", 5 "2-3", 6 "do", 7 "n't", 8 "know",
# 9 "4.1", 10 ".", 11 blank, 12 free comment, 13 "Hi", 14 "there", 15 blank
SAMPLE = (
    "# newdoc id = doc1\n"
    "# sent_id = s1\n"
    "# text = I don't know.\n"
    "1\tI\tI\tPRON\tPRP\tCase=Nom|Number=Sing\t4\tnsubj\t4:nsubj\t_\n"
    "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "2\tdo\tdo\tAUX\tVBP\tMood=Ind\t4\taux\t4:aux\t_\n"
    "3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t4:advmod\t_\n"
    "4\tknow\tknow\tVERB\tVB\tVerbForm=Inf\t0\troot\t0:root\tSpaceAfter=No\n"
    "4.1\tknew\tknow\tVERB\tVBD\t_\t_\t_\t4:conj\t_\n"
    "5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t4:punct\t_\n"
    "\n"
    "# a free comment\n"
    "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n"
    "2\tthere\tthere\tADV\tRB\t_\t1\tadvmod\t_\t_\n"
    "\n"
)


def _read(text: str | bytes, name: str = "sample.conllu", **kwargs):
    data = io.BytesIO(text.encode("utf-8") if isinstance(text, str) else text)
    return read_conllu_with_report(data, name=name, **kwargs)


def _replace_line(text: str, line: int, new: str) -> str:
    lines = text.split("\n")
    lines[line - 1] = new
    return "\n".join(lines)


# --- reference implementations (slow, obviously correct) -----------------------------------

def _reference_problem(heads: list[int]) -> str | None:
    """'range', 'cycle' or None, by following every word's head pointers n steps."""
    n = len(heads)
    if any(not 0 <= h <= n for h in heads):
        return "range"
    for w in range(1, n + 1):
        x = w
        for _ in range(n):
            x = heads[x - 1] if x != 0 else 0
        if x != 0:
            return "cycle"
    return None


def _reference_cycle(heads: list[int]) -> set[int]:
    """Words (1-based) on the cycle reached from the smallest word that never reaches ROOT."""
    n = len(heads)

    def reaches_root(w: int) -> bool:
        for _ in range(n + 1):
            if w == 0:
                return True
            w = heads[w - 1]
        return w == 0

    w = min(v for v in range(1, n + 1) if not reaches_root(v))
    seen: list[int] = []
    while w not in seen:
        seen.append(w)
        w = heads[w - 1]
    return set(seen[seen.index(w):])


def _reference_projective(heads: list[int]) -> bool:
    """Every word strictly between a head and its dependent descends from that head."""
    def ancestors(w: int) -> set[int]:
        out = set()
        while w != 0:
            w = heads[w - 1]
            out.add(w)
        return out

    for d, h in enumerate(heads, start=1):
        for k in range(min(h, d) + 1, max(h, d)):
            if h not in ancestors(k):
                return False
    return True


@st.composite
def random_trees(draw, max_words: int = 10) -> list[int]:
    """Any dependency tree (multiple roots, non-projective allowed) as a 1-based heads list."""
    n = draw(st.integers(1, max_words))
    order = draw(st.permutations(range(1, n + 1)))
    heads = [0] * n
    for k, w in enumerate(order):
        heads[w - 1] = draw(st.sampled_from([0] + list(order[:k])))
    return heads


# --- dependency.py -------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1, 9), min_size=1, max_size=8))
def test_validate_heads_matches_pointer_following(heads):
    n = len(heads)
    heads = [h if h <= n + 1 else h % (n + 2) for h in heads]
    expected = _reference_problem(heads)
    problem = head_problem(np.array(heads))
    if expected is None:
        assert problem is None
    elif expected == "range":
        first_bad = next(i for i, h in enumerate(heads) if not 0 <= h <= n)
        assert problem == (first_bad, f"head {heads[first_bad]} of word {first_bad + 1} "
                                      f"is out of range 0..{n}")
    else:
        index, cause = problem
        named = [int(x) for x in re.search(r"cycle in heads: ([\d >-]+)", cause).group(1)
                 .split(" -> ")]
        assert named[0] == named[-1] and set(named) == _reference_cycle(heads)
        assert index == min(named) - 1
        assert ("no root" in cause) == (0 not in heads)


def test_validate_heads_names_words_and_empty():
    assert validate_heads([2, 1], ["a", "b"]) == \
        "no root (no word has head 0); cycle in heads: 1 -> 2 -> 1 ('a', 'b')"
    assert validate_heads([0, 3, 2]) == "cycle in heads: 2 -> 3 -> 2"
    assert validate_heads([]) == "sentence has no words"
    assert validate_heads([0, 1]) is None


def test_validate_heads_of_a_batch_says_so():
    """A [2, 2] array of heads was "sentence has no words"."""
    assert validate_heads([[0, 1], [1, 0]]) == \
        "heads must be one list of the words' heads, got an array of shape (2, 2)"


@pytest.mark.parametrize("heads", [[2, 1, 0], [0, 5], [2, 1]])
def test_projectivity_of_no_tree_is_an_error(heads):
    """is_projective_heads([2, 1, 0]) (a cycle) returned True."""
    with pytest.raises(InputError, match="is_projective_heads: not a tree"):
        is_projective_heads(heads)


@settings(max_examples=200, deadline=None)
@given(random_trees())
def test_is_projective_matches_definition(heads):
    assert validate_heads(heads) is None
    assert is_projective_heads(np.array(heads)) == _reference_projective(heads)


@pytest.mark.parametrize("n", range(1, 40))
def test_chains_of_every_length_are_trees(n):
    chain = np.arange(n)  # word 1 is the root, word k hangs from word k - 1
    assert validate_heads(chain) is None
    looped = chain.copy()
    looped[0] = n  # the root hangs from the last word: one cycle through all words
    assert validate_heads(looped) == \
        "no root (no word has head 0); cycle in heads: " + \
        " -> ".join(str(w) for w in [1, *range(n, 0, -1)])


def test_dependency_tree_basics():
    t = DependencyTree(["a", "b", "c"], np.array([2, 0, 2]))
    assert len(t) == 3 and t.deprels == ["_"] * 3 and t.upos == ["_"] * 3
    assert t.roots().tolist() == [1]
    assert t.is_projective()
    assert DependencyTree(["a", "b", "c"], [3, 0, 0]).roots().tolist() == [1, 2]
    assert not DependencyTree(["a", "b", "c"], [3, 0, 0]).is_projective()
    with pytest.raises(InputError, match="deprels has 1 entries for 3 words"):
        DependencyTree(["a", "b", "c"], [2, 0, 2], deprels=["x"])
    with pytest.raises(InputError, match="cycle"):
        DependencyTree(["a", "b"], [2, 1])
    with pytest.raises(InputError, match="heads must be integers"):
        DependencyTree(["a"], [0.5])


def _descendants(heads: list[int], word: int) -> set[int]:
    """1-based words below ``word`` (itself included), by following heads upward from each."""
    out = set()
    for w in range(1, len(heads) + 1):
        v = w
        while v:
            if v == word:
                out.add(w)
                break
            v = heads[v - 1]
    return out


@settings(max_examples=200, deadline=None)
@given(random_trees(), st.data())
def test_keep_words_keeps_every_kept_words_descendants(heads, data):
    keep = data.draw(st.lists(st.booleans(), min_size=len(heads), max_size=len(heads)))
    keep[data.draw(st.integers(0, len(heads) - 1))] = True
    tree = DependencyTree([f"w{i}" for i in range(len(heads))], np.array(heads),
                          upos=[f"T{i}" for i in range(len(heads))])
    kept = tree.keep_words(keep)
    old = [i + 1 for i, k in enumerate(keep) if k]  # old 1-based id of each kept word
    assert kept.words == [f"w{i - 1}" for i in old] and kept.upos == [f"T{i - 1}" for i in old]
    for new_id, old_id in enumerate(old, start=1):
        below = {old[d - 1] for d in _descendants(kept.heads.tolist(), new_id)}
        assert below == _descendants(heads, old_id) & set(old)


def test_keep_words_by_hand():
    t = DependencyTree(["the", "cat", "sleeps", ",", "well", "."], np.array([2, 3, 0, 5, 3, 3]),
                       deprels=["det", "nsubj", "root", "punct", "advmod", "punct"], sent_id="s1",
                       metadata={"misc": ["_"] * 5 + ["SpaceAfter=No"], "multiword_tokens": [(1, 2, "x", "_")]})
    kept = t.keep_words([True, True, True, False, True, False])
    assert kept.heads.tolist() == [2, 3, 0, 3] and kept.deprels == ["det", "nsubj", "root", "advmod"]
    assert kept.metadata == {"misc": ["_"] * 4} and kept.sent_id == "s1"
    # a dropped head: its dependents climb to the nearest kept ancestor, or become roots
    assert t.keep_words([True, False, True, True, True, True]).heads.tolist() == [2, 0, 4, 2, 2]
    assert t.keep_words([True, True, False, False, True, False]).heads.tolist() == [2, 0, 0]
    with pytest.raises(InputError, match="no word kept"):
        t.keep_words([False] * 6)
    with pytest.raises(InputError, match="keep has shape"):
        t.keep_words([True] * 5)


# --- reading -------------------------------------------------------------------------------

def test_read_sample():
    trees, report = _read(SAMPLE)
    assert report.n_read == 2 and report.n_skipped == 0
    first, second = trees
    assert first.words == ["I", "do", "n't", "know", "."]
    assert first.heads.tolist() == [4, 4, 4, 0, 4]
    assert first.deprels == ["nsubj", "aux", "advmod", "root", "punct"]
    assert first.upos == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert first.xpos == ["PRP", "VBP", "RB", "VB", "."]
    assert (first.sent_id, first.text) == ("s1", "I don't know.")
    assert first.metadata["multiword_tokens"] == [(2, 3, "don't", "_")]
    assert first.metadata["empty_nodes"] == [(4, SAMPLE.split("\n")[8])]
    assert first.metadata["comments"][0] == ("newdoc id", "doc1")
    assert first.metadata["feats"][0] == "Case=Nom|Number=Sing"
    assert second.sent_id is None and second.words == ["Hi", "there"]
    assert second.metadata["comments"] == [("a free comment", None)]


def test_exact_round_trip_through_path_and_files(tmp_path):
    trees = read_conllu(io.StringIO(SAMPLE))
    path = tmp_path / "out.conllu"
    write_conllu(trees, path)
    assert path.read_text(encoding="utf-8") == SAMPLE
    binary = io.BytesIO()
    write_conllu(trees, binary)
    assert binary.getvalue().decode("utf-8") == SAMPLE
    assert read_conllu(path) == trees
    # windows line endings and a BOM read the same
    assert read_conllu(io.BytesIO(b"\xef\xbb\xbf" + SAMPLE.replace("\n", "\r\n").encode())) \
        == trees


@settings(max_examples=100, deadline=None)
@given(random_trees(), st.data())
def test_random_trees_round_trip(heads, data):
    n = len(heads)
    word = st.text(st.characters(blacklist_categories=["Cc", "Cs", "Zs", "Zl", "Zp"]),
                   min_size=1, max_size=5)
    tree = DependencyTree(
        words=data.draw(st.lists(word, min_size=n, max_size=n)),
        heads=np.array(heads),
        deprels=data.draw(st.lists(st.sampled_from(["nsubj", "obj", "root", "acl:relcl"]),
                                   min_size=n, max_size=n)),
        upos=data.draw(st.lists(st.sampled_from(["NOUN", "VERB", "_"]), min_size=n, max_size=n)),
        sent_id=data.draw(st.none() | st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True)),
    )
    back = read_conllu(io.StringIO(to_conllu(tree)))
    assert len(back) == 1
    (got,) = back
    assert got.words == tree.words and got.heads.tolist() == heads
    assert (got.deprels, got.upos, got.xpos) == (tree.deprels, tree.upos, tree.xpos)
    assert got.sent_id == tree.sent_id
    assert to_conllu(got) == to_conllu(tree)


def test_write_rejects_tabs_in_fields():
    with pytest.raises(InputError, match="FORM of word 1"):
        to_conllu(DependencyTree(["a\tb"], [0]))
    with pytest.raises(InputError, match="FORM of word 2 is blank"):
        to_conllu(DependencyTree(["a", " "], [0, 1]))


# (line to replace, its new content, expected error line, sentence, cause pattern)
_BROKEN = [
    (7, "3\tn't\tnot\tPART\tRB\t_\t9\tadvmod\t4:advmod\t_", 7, "s1",
     "head 9 of word 3 is out of range 0..5"),
    (7, "3\tn't\tnot\tPART\tRB\t_\tx\tadvmod\t4:advmod\t_", 7, "s1", "HEAD 'x' is not an integer"),
    (7, "3\tn't\tnot\tPART\tRB\t_\t-2\tadvmod\t4:advmod\t_", 7, "s1", "HEAD -2 is out of range"),
    (8, "4\tknow\tknow\tVERB\tVB\tVerbForm=Inf\t1\troot\t0:root\t_", 4, "s1",
     r"no root .*cycle in heads: 1 -> 4 -> 1 \('I', 'know'\)"),
    (13, "1\tHi\thi\tINTJ\tUH\t_\t2\troot\t_\t_", 13, "2", r"cycle in heads: 1 -> 2 -> 1"),
    (13, "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_", 13, "2",
     "expected 10 tab-separated columns, found 9"),
    (13, "1 Hi hi INTJ UH _ 0 root _ _", 13, "2", "found 1"),
    (14, "3\tthere\tthere\tADV\tRB\t_\t1\tadvmod\t_\t_", 14, "2",
     "word ID 3 out of order: expected 2"),
    (14, "a\tthere\tthere\tADV\tRB\t_\t1\tadvmod\t_\t_", 14, "2", "invalid ID 'a'"),
    (14, "2\t\tthere\tADV\tRB\t_\t1\tadvmod\t_\t_", 14, "2", "empty column FORM"),
    (14, "# late comment", 14, "2", "comment line after the token lines"),
    (5, "3-4\tdon't\t_\t_\t_\t_\t_\t_\t_\t_", 5, "s1", "multiword token 3-4 out of place"),
    (5, "2-7\tdon't\t_\t_\t_\t_\t_\t_\t_\t_", 5, "s1", "ends after the last word 5"),
    (9, "3.1\tknew\tknow\tVERB\tVBD\t_\t_\t_\t4:conj\t_", 9, "s1", "empty node 3.1 out of place"),
    (3, "# sent_id = again", 3, "s1", "second '# sent_id' comment"),
    (14, "2\tthere\tthere\tADV\tRB\t_\t1\tadv\rmod\t_\t_", 14, "2", "carriage return"),
]


@pytest.mark.parametrize("line,new,error_line,sent,cause", _BROKEN)
def test_errors_name_file_line_and_sentence(line, new, error_line, sent, cause):
    with pytest.raises(TreebankError) as info:
        _read(_replace_line(SAMPLE, line, new))
    error = info.value
    assert (error.path, error.line, error.sent_id) == ("sample.conllu", error_line, sent)
    assert str(error).startswith(f"sample.conllu:{error_line} (sentence {sent}): ")
    assert re.search(cause, error.cause), error.cause


def test_sentence_without_words():
    with pytest.raises(TreebankError, match="sample.conllu:1 .*sentence has no words"):
        _read("# sent_id = x\n\n" + SAMPLE)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_file_without_any_word_line_is_not_conllu(on_error):
    """A Markdown or text file given by mistake is named as such, not by its first block."""
    for text in ("# synattn\n\nSome text.\n", "# sent_id = x\n\n", "just words\tand one tab\n"):
        with pytest.raises(TreebankError, match="sample.conllu:1: not CoNLL-U: no line has the 10 tab-separated"):
            _read(text, on_error=on_error)
    assert _read("\n\n")[0] == []  # an empty file is no error here (commands say it is empty)


def test_skip_reports_and_warns(caplog):
    broken = _replace_line(SAMPLE, 7, "3\tn't\tnot\tPART\tRB\t_\t9\tadvmod\t4:advmod\t_")
    with caplog.at_level(logging.WARNING):
        trees, report = _read(broken, on_error="skip")
    assert [t.words for t in trees] == [["Hi", "there"]]
    assert (report.n_read, report.n_skipped) == (1, 1)
    assert report.skipped[0].line == 7 and "out of range" in report.skipped[0].cause
    assert "skipped 1" in report.summary()
    assert any("skipped 1 malformed sentences of 2" in r.getMessage() for r in caplog.records)
    assert read_conllu(io.StringIO(broken), on_error="skip") == trees
    with pytest.raises(InputError, match="on_error"):
        _read(SAMPLE, on_error="ignore")


def test_bytes_that_are_not_utf8():
    data = SAMPLE.encode("utf-8").replace(b"there", b"th\xffere")
    with pytest.raises(TreebankError) as info:
        _read(data)
    assert info.value.line == 14 and "byte 0xff at column 5 is not valid UTF-8" in str(info.value)
    trees, report = _read(data, on_error="skip")
    assert [t.sent_id for t in trees] == ["s1"] and report.skipped[0].line == 14


def test_missing_file(tmp_path):
    with pytest.raises(TreebankError, match="cannot read file"):
        read_conllu(tmp_path / "missing.conllu")


# --- fuzzing: only TreebankError escapes, and it names file and line ---------------------

_LINES = SAMPLE.encode("utf-8").split(b"\n")


@st.composite
def mutated_files(draw) -> bytes:
    lines = list(_LINES)
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(lines) - 1))
        columns = lines[k].split(b"\t")
        kind = draw(st.sampled_from(["drop_column", "garbage_field", "truncate", "bytes",
                                     "delete_line", "duplicate_line", "swap_lines"]))
        if kind == "drop_column":
            del columns[draw(st.integers(0, len(columns) - 1))]
            lines[k] = b"\t".join(columns)
        elif kind == "garbage_field":
            columns[draw(st.integers(0, len(columns) - 1))] = draw(
                st.sampled_from([b"", b"_", b"-1", b"99", b"0", b"1.5", b"2-1", b"x", b"#",
                                 b"1 2", "ş".encode(), b"__import__('os')"]))
            lines[k] = b"\t".join(columns)
        elif kind == "truncate":
            lines[k] = lines[k][:draw(st.integers(0, len(lines[k])))]
        elif kind == "bytes":
            at = draw(st.integers(0, len(lines[k])))
            lines[k] = lines[k][:at] + draw(st.binary(min_size=1, max_size=4)) + lines[k][at:]
        elif kind == "delete_line":
            del lines[k]
        elif kind == "duplicate_line":
            lines.insert(k, lines[k])
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[k], lines[j] = lines[j], lines[k]
    return b"\n".join(lines)


@settings(max_examples=200, deadline=None)
@given(mutated_files())
def test_fuzzed_files_raise_only_treebank_errors(data):
    n_lines = data.count(b"\n") + 1
    try:
        trees = read_conllu(io.BytesIO(data), name="fuzz.conllu")
    except TreebankError as e:
        assert str(e).startswith(f"fuzz.conllu:{e.line} ")
        assert 1 <= e.line <= n_lines
        return
    for tree in trees:
        assert validate_heads(tree.heads) is None
    assert read_conllu(io.StringIO("".join(to_conllu(t) for t in trees))) == trees


# --- a real gold treebank ----------------------------------------------------------------

def test_turkish_web_treebank_dev_split():
    pytest.importorskip("turkish_treebanks")
    from synattn.trees.turkish import load_turkish_treebank, turkish_treebank_paths

    path = turkish_treebank_paths()["web"]
    sent_ids = re.findall(r"^# sent_id = (.*)$", path.read_text(encoding="utf-8"), re.M)
    dev = load_turkish_treebank("web", "dev")
    assert [t.sent_id for t in dev] == sent_ids[8::10]
    assert all(validate_heads(t.heads) is None and len(t) > 0 for t in dev)
    assert any(not t.is_projective() for t in dev)
    with pytest.raises(InputError, match="unknown split"):
        load_turkish_treebank("web", "validation")
