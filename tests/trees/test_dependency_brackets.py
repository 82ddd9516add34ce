"""Constituent spans from dependency trees (the yields), used to score induced trees on dependency
treebanks: checked against a brute force over descendants and by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from synattn.errors import InputError
from synattn.trees.branching import dependency_spans, right_branching, tree_from_dependency
from synattn.trees.constituency import spans, to_brackets
from synattn.trees.dependency import is_projective_heads
from synattn.trees.induce import score_induced


@st.composite
def trees(draw, max_words=9):
    """Any dependency tree (projective or not, one or several roots): attach words in a random
    order, each to ROOT or to a word attached before it."""
    n = draw(st.integers(1, max_words))
    order = draw(st.permutations(range(n)))
    heads = np.zeros(n, dtype=np.int64)
    for k, word in enumerate(order):
        heads[word] = 0 if k == 0 else draw(st.sampled_from([0] + [order[j] + 1 for j in range(k)]))
    return heads


def yields(heads):
    n = len(heads)
    out = []
    for i in range(n):
        below = {i}
        changed = True
        while changed:
            changed = False
            for j in range(n):
                if j not in below and heads[j] - 1 in below:
                    below.add(j)
                    changed = True
        out.append(below)
    return out


@settings(max_examples=300, deadline=None)
@given(trees())
def test_spans_are_the_contiguous_yields_of_projective_trees(heads):
    every = yields(heads)
    contiguous = all(max(y) - min(y) + 1 == len(y) for y in every)
    if not contiguous:
        assert not is_projective_heads(heads)
        with pytest.raises(InputError, match="not projective"):
            dependency_spans(heads)
        return
    expected = {(min(y), max(y) + 1) for y in every if len(y) >= 2}
    assert dependency_spans(heads) == expected


def test_by_hand():
    # "the cat saw a very big dog ." : saw -> cat -> the; saw -> dog -> a, big -> very; saw -> .
    words = "the cat saw a very big dog .".split()
    heads = [2, 3, 0, 7, 6, 7, 3, 3]
    assert dependency_spans(heads) == {(0, 2), (3, 7), (4, 6), (0, 8)}
    tree = tree_from_dependency(words, heads, [w == "." for w in words])
    assert to_brackets(tree) == "(X (X the cat) saw (X a (X very big) dog) (. .))"
    # scoring drops the punctuation and the whole-sentence span: gold spans (0,2) (3,7) (4,6)
    pred = right_branching(words)
    scores = score_induced([pred], [tree])
    # right-branching over 7 words without "." has spans (i, 7), i = 1..5 -> (3,7) matches 1 of 3 gold
    assert scores["right-branching"].f1 == pytest.approx(2 * (1 / 5) * (1 / 3) / (1 / 5 + 1 / 3))
    assert spans(tree) >= {(0, 2), (3, 7), (4, 6)}


def test_several_roots_and_one_word():
    assert dependency_spans([0, 1, 0, 3]) == {(0, 2), (2, 4)}
    assert dependency_spans([0]) == set()
