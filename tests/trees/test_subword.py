"""Word -> subword tree projection (synattn.trees.subword; Deguchi et al. 2019 slides 12-14, docs/methods.md §2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from synattn.trees.relations import head_targets, tree_distance
from synattn.trees.subword import first_piece_index, last_piece_index, project_to_subwords, word_index_of_pieces


@st.composite
def trees_with_pieces(draw, max_n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """A random tree (any shape, one or more roots) and 1-4 pieces per word."""
    n = draw(st.integers(1, max_n))
    order = draw(st.permutations(range(n)))
    roots = draw(st.one_of(st.just(1), st.integers(1, n)))
    heads = [0] * n
    for k, word in enumerate(order):
        heads[word] = 0 if k < roots else order[draw(st.integers(0, k - 1))] + 1
    pieces = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    return np.array(heads), np.array(pieces)


def test_hand_worked_root_word_in_three_pieces():
    # words: w1 = p1 p2, w2 = p3 p4 p5 (root), w3 = p6; w1 -> w2, w3 -> w2
    heads, pieces = [2, 0, 2], [2, 3, 1]
    # p1 -> p2 (next), p2 -> p3 (first piece of w2), p3 -> p4, p4 -> p5, p5 -> ROOT, p6 -> p3
    assert project_to_subwords(heads, pieces).tolist() == [2, 3, 4, 5, 0, 3]
    assert word_index_of_pieces(pieces).tolist() == [0, 0, 1, 1, 1, 2]
    assert first_piece_index(pieces).tolist() == [0, 2, 5]
    # the root word's final piece (p5, index 4) targets itself
    assert head_targets(project_to_subwords(heads, pieces)).tolist() == [1, 2, 3, 4, 4, 2]


def test_hand_worked_heads_to_the_left():
    # words: w1 = p1 (root), w2 = p2 p3, w3 = p4 p5 p6; w2 -> w1, w3 -> w2
    heads, pieces = [0, 1, 2], [1, 2, 3]
    # p1 -> ROOT, p2 -> p3, p3 -> p1, p4 -> p5, p5 -> p6, p6 -> p2 (first piece of w2)
    assert project_to_subwords(heads, pieces).tolist() == [0, 3, 1, 5, 6, 2]
    assert head_targets(project_to_subwords(heads, pieces)).tolist() == [0, 2, 0, 4, 5, 1]


def test_hand_worked_two_root_words():
    heads, pieces = [0, 0], [2, 2]  # both final pieces hang from ROOT
    assert project_to_subwords(heads, pieces).tolist() == [2, 0, 4, 0]


def reference_projection(heads: np.ndarray, pieces: np.ndarray) -> list[int]:
    """Piece by piece, straight from the rule of Deguchi et al. 2019."""
    first, start = [], 0
    for p in pieces:
        first.append(start)
        start += p
    out = []
    for word, p in enumerate(pieces):
        for k in range(p):
            if k < p - 1:
                out.append(first[word] + k + 2)  # next piece, 1-based
            else:
                out.append(0 if heads[word] == 0 else first[heads[word] - 1] + 1)
    return out


@settings(max_examples=150, deadline=None)
@given(trees_with_pieces())
def test_projection_is_a_valid_tree_with_the_same_roots(tree):
    heads, pieces = tree
    sub = project_to_subwords(heads, pieces)
    m = int(pieces.sum())
    assert sub.tolist() == reference_projection(heads, pieces)
    assert len(sub) == m and ((sub >= 0) & (sub <= m)).all()
    for piece in range(m):  # one path to ROOT from every piece, without repeating a piece
        seen, k = set(), piece
        while sub[k] != 0:
            assert k not in seen
            seen.add(k)
            k = sub[k] - 1
    assert (sub == 0).sum() == (heads == 0).sum()
    assert tree_distance(sub).shape == (m, m)  # relation functions accept the subword tree
    words, first = word_index_of_pieces(pieces), first_piece_index(pieces)
    assert (np.bincount(words, minlength=len(pieces)) == pieces).all()
    assert (words[first] == np.arange(len(pieces))).all()
    targets = head_targets(sub)
    final = first + pieces - 1
    roots = heads == 0
    assert (targets[final[roots]] == final[roots]).all()  # a root word's final piece: itself


@settings(max_examples=100, deadline=None)
@given(trees_with_pieces())
def test_one_piece_per_word_gives_back_the_heads(tree):
    heads, _ = tree
    assert project_to_subwords(heads, np.ones(len(heads), dtype=int)).tolist() == heads.tolist()


def test_bad_input_raises():
    with pytest.raises(ValueError, match="at least 1"):
        project_to_subwords([0, 1], [1, 0])
    with pytest.raises(ValueError, match="one per word"):
        project_to_subwords([0, 1, 1], [1, 2])
    with pytest.raises(ValueError, match="expected 0"):
        project_to_subwords([0, 3], [1, 1])


def test_last_piece_index_is_the_last_position_of_each_word():
    rng = np.random.default_rng(0)
    for _ in range(50):
        pieces = rng.integers(1, 4, size=rng.integers(1, 8))
        word = word_index_of_pieces(pieces)
        expected = [max(i for i, w in enumerate(word) if w == k) for k in range(len(pieces))]
        assert last_piece_index(word).tolist() == expected
        assert np.array_equal(last_piece_index(word), first_piece_index(pieces) + pieces - 1)
    assert last_piece_index([]).tolist() == []
