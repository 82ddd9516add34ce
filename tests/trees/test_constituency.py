"""Bracketed trees: parsing, PTB reading, spans, baselines (synattn.trees.constituency)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from synattn.errors import InputError, TreebankError
from synattn.trees.branching import left_branching, random_binary, right_branching, tree_from_spans
from synattn.trees.constituency import (
    Tree,
    drop_leaves,
    leaf_labels,
    leaves,
    parse_brackets,
    read_brackets,
    spans,
    strip_function_tags,
    to_brackets,
)

# two PTB trees (traces, functional tags, co-indices, punctuation), the first over 3 lines
PTB = """( (S (NP-SBJ-1 (DT The) (NN cat))
    (VP (VBD was) (VP (VBN seen) (NP (-NONE- *-1))))
    (. .)) )
( (S (`` ``) (NP-SBJ (PRP We)) (VP (VBP agree) (SBAR (-NONE- 0) (S (-NONE- *T*-2))))
  (, ,) ('' '') (. .)) )
"""


def _read(text: str | bytes, **kwargs) -> list[Tree]:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return read_brackets(io.BytesIO(data), name="trees.mrg", **kwargs)


def test_read_ptb_drops_traces_and_strips_functions():
    first, second = _read(PTB)
    assert to_brackets(first) == \
        "( (S (NP (DT The) (NN cat)) (VP (VBD was) (VP (VBN seen))) (. .)))"
    assert leaves(first) == ["The", "cat", "was", "seen", "."]
    assert leaf_labels(first) == ["DT", "NN", "VBD", "VBN", "."]
    # the SBAR holds only traces, so it goes; VP keeps its verb
    assert to_brackets(second) == \
        "( (S (`` ``) (NP (PRP We)) (VP (VBP agree)) (, ,) ('' '') (. .)))"
    # spans of the first: NP (0,2), VP (2,4), inner VP (3,4) is single-word, S (0,5) whole
    assert spans(first) == {(0, 2), (2, 4)}
    assert spans(first, include_trivial=True) == {(0, 2), (2, 4), (3, 4), (0, 5)}


def test_read_ptb_options():
    raw_first, _ = _read(PTB, drop_traces=False, strip_functions=False)
    assert leaves(raw_first)[-2:] == ["*-1", "."]
    assert "NP-SBJ-1" in to_brackets(raw_first)
    first, second = _read(PTB, drop_punct=True)
    assert leaves(first) == ["The", "cat", "was", "seen"]
    assert leaves(second) == ["We", "agree"]
    assert spans(second, include_trivial=True) == {(0, 1), (1, 2), (0, 2)}
    (only_punct,) = _read("(S (. .))", drop_punct=True)
    assert leaves(only_punct) == [] and spans(only_punct) == set()
    (custom,) = _read("(S (A a) (P !) (B b))", drop_punct=True, punct_tags=["P"])
    assert leaves(custom) == ["a", "b"]


def test_strip_function_tags():
    assert [strip_function_tags(x) for x in ["NP-SBJ-1", "PP-LOC=2", "S", "-NONE-", "-LRB-",
                                             "PRP$"]] == ["NP", "PP", "S", "-NONE-", "-LRB-",
                                                          "PRP$"]


def test_parse_brackets_forms_and_round_trip():
    tree = parse_brackets("(S (NP a b) (VP c (NP d e)))")
    assert leaves(tree) == list("abcde") and leaf_labels(tree) == [""] * 5
    assert spans(tree) == {(0, 2), (2, 5), (3, 5)}
    for text in ["(S (NP (DT the) (NN dog)) (VP (VBZ barks)))", "( a ( b c))", "( (S (X y)))",
                 "(X a (X b c))"]:
        assert to_brackets(parse_brackets(text)) == text
    assert parse_brackets("(A\n  (B b)\n)") == Tree("A", (Tree("B", word="b"),))
    assert parse_brackets("( a b)") != parse_brackets("(a b)")  # label only when it touches "("


@pytest.mark.parametrize("text,line,cause", [
    ("(S (A a)\n(B b)))\n", 2, "')' without a matching '('"),
    ("(S (A a)\n\n(B (C c)\n", 1, "never closed"),
    ("(S (A a))\nword (S (A a))\n", 2, "text 'word' outside brackets"),
    ("(S (A a) ())\n", 1, "empty constituent '()'"),
    ("(S\n (A a)\n (B))\n", 3, "empty constituent '(B)'"),
])
def test_errors_name_file_and_line(text, line, cause):
    with pytest.raises(TreebankError) as info:
        _read(text)
    assert (info.value.path, info.value.line) == ("trees.mrg", line)
    assert cause in info.value.cause
    assert str(info.value).startswith(f"trees.mrg:{line}: ")


def test_bad_bytes_and_parse_one():
    with pytest.raises(TreebankError, match=r"trees.mrg:2: byte 0xff at column 5"):
        _read(b"(S (A a))\n(S (\xff a))\n")
    with pytest.raises(TreebankError, match="expected one tree, found 2"):
        parse_brackets("(A a) (B b)")


def _reference_right_spans(n: int) -> set[tuple[int, int]]:
    # (w0 (w1 (w2 (w3 w4)))) for n = 5: constituents start at 1, 2, 3 and all end at n
    return {(i, n) for i in range(1, n - 1)}


def test_branching_baselines_small_sentence():
    words = ["the", "cat", "sat", "on", "mats"]
    right, left = right_branching(words), left_branching(words)
    assert to_brackets(right) == "(X the (X cat (X sat (X on mats))))"
    assert to_brackets(left) == "(X (X (X (X the cat) sat) on) mats)"
    assert spans(right) == {(1, 5), (2, 5), (3, 5)} == _reference_right_spans(5)
    assert spans(left) == {(0, 2), (0, 3), (0, 4)}
    assert leaves(right) == leaves(left) == words
    assert to_brackets(right_branching(["a"])) == "(X a)"


def _children_counts(tree: Tree) -> list[int]:
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        if not node.is_leaf:
            out.append(len(node.children))
            todo += node.children
    return out


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2**32 - 1))
def test_random_binary_is_binary_and_reproducible(n, seed):
    words = [f"w{i}" for i in range(n)]
    tree = random_binary(words, np.random.default_rng(seed))
    assert leaves(tree) == words
    assert set(_children_counts(tree)) == {2}
    assert len(spans(tree, include_trivial=True)) == n - 1
    assert tree == random_binary(words, np.random.default_rng(seed))


def test_random_binary_covers_all_trees_of_four_words():
    # 4 words have Catalan(3) = 5 binary trees; 400 draws hit every one
    rng = np.random.default_rng(0)
    seen = {to_brackets(random_binary(list("abcd"), rng)) for _ in range(400)}
    assert len(seen) == 5


@st.composite
def laminar_spans(draw, max_words: int = 10) -> tuple[int, set[tuple[int, int]]]:
    """A random tree's spans, made by random recursive splits into 2..3 parts."""
    n = draw(st.integers(1, max_words))
    out, todo = set(), [(0, n)]
    while todo:
        i, j = todo.pop()
        if draw(st.booleans()):
            out.add((i, j))
        if j - i >= 2:
            cuts = sorted(draw(st.sets(st.integers(i + 1, j - 1), min_size=1,
                                       max_size=min(2, j - i - 1))))
            bounds = [i, *cuts, j]
            todo += list(zip(bounds, bounds[1:]))
    return n, out


@settings(max_examples=150, deadline=None)
@given(laminar_spans())
def test_tree_from_spans_round_trip(case):
    n, given_spans = case
    words = [f"w{i}" for i in range(n)]
    tree = tree_from_spans(words, given_spans)
    assert leaves(tree) == words
    assert spans(tree, include_trivial=True) == given_spans | {(0, n)}
    assert spans(tree) == {(i, j) for i, j in given_spans if 1 < j - i < n}
    reread = parse_brackets(to_brackets(tree))
    assert spans(reread) == spans(tree)


def test_tree_from_spans_rejects_crossing_and_range():
    with pytest.raises(InputError, match=r"span \(1, 3\) crosses span \(0, 2\)"):
        tree_from_spans(list("abc"), {(0, 2), (1, 3)})
    with pytest.raises(InputError, match="outside"):
        tree_from_spans(list("abc"), {(2, 5)})
    tagged = tree_from_spans(["a", "b"], set(), leaf_labels=["DT", "NN"])
    assert to_brackets(tagged) == "(X (DT a) (NN b))"


def test_drop_leaves_matches_span_projection():
    # dropping words then taking spans equals mapping spans through the kept positions
    tree = parse_brackets("(S (NP (DT the) (NN cat) (, ,)) (VP (VBD sat) (. .)))")
    keep = [label not in {",", "."} for label in leaf_labels(tree)]
    pruned = drop_leaves(tree, keep)
    assert leaves(pruned) == ["the", "cat", "sat"]
    new_index = np.cumsum([0] + keep)
    projected = {(int(new_index[i]), int(new_index[j]))
                 for i, j in spans(tree, include_trivial=True)}
    assert spans(pruned, include_trivial=True) == {s for s in projected if s[1] > s[0]}
    with pytest.raises(InputError, match="keep has 2 entries for 5 words"):
        drop_leaves(tree, [True, False])


def test_deep_trees_need_no_recursion():
    words = [f"w{i}" for i in range(3000)]
    tree = right_branching(words)
    text = to_brackets(tree)
    assert parse_brackets(text) == tree
    assert len(spans(tree)) == 3000 - 2 and leaves(drop_leaves(tree, [True] * 3000)) == words


# --- fuzzing: only TreebankError escapes, and it names file and line ---------------------

@st.composite
def mutated_bracket_files(draw) -> bytes:
    data = bytearray(PTB.encode("utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["delete", "insert", "truncate"]))
        if kind == "delete":
            del data[at:at + draw(st.integers(1, 5))]
        elif kind == "insert":
            pieces = [b"(", b")", b"()", b"x", b"\n", b" ", b"(-NONE- *)"]
            data[at:at] = draw(st.sampled_from(pieces) | st.binary(min_size=1, max_size=3))
        else:
            del data[at:]
    return bytes(data)


@settings(max_examples=200, deadline=None)
@given(mutated_bracket_files(), st.booleans())
def test_fuzzed_bracket_files_raise_only_treebank_errors(data, drop_punct):
    n_lines = data.count(b"\n") + 1
    try:
        trees = _read(data, drop_punct=drop_punct)
    except TreebankError as e:
        assert str(e).startswith(f"trees.mrg:{e.line}: ")
        assert 1 <= e.line <= n_lines
        return
    for tree in trees:
        words = leaves(tree)
        assert all(i < j <= len(words) for i, j in spans(tree, include_trivial=True))
        if words:
            assert spans(parse_brackets(to_brackets(tree))) == spans(tree)


def test_leaf_trees_are_not_constituents():
    assert spans(parse_brackets("(NN dog)"), include_trivial=True) == set()
    assert spans(parse_brackets("(S (A a) (B b) (C c))"), include_trivial=True) == {(0, 3)}


def test_empty_tree_spans_nothing():
    # every word of "(X (-NONE- *))" is a trace: the tree that remains has no words and no spans
    (tree,) = read_brackets(io.StringIO("(X (-NONE- *))\n"))
    assert leaves(tree) == [] and spans(tree, include_trivial=True) == set()


def test_brackets_in_words_are_written_as_the_penn_treebank_writes_them():
    tree = Tree("S", (Tree("NP", (Tree("", word="the"), Tree("", word="earth"))),
                      Tree("VP", (Tree("", word="(was)"), Tree("X", word="empty")))))
    text = to_brackets(tree)
    assert "-LRB-was-RRB-" in text and leaves(parse_brackets(text)) == ["the", "earth", "-LRB-was-RRB-", "empty"]
