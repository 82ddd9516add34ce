"""Attention heads as parsers (Clark et al. 2019): word-level attention from pieces, both directions,
per relation, and the fixed-offset baseline, on hand-made attention whose answers are known."""

import numpy as np
import pytest

from synattn.evaluate.probe import ProbeCounts, head_guesses, word_attention

# "the cat sat down": the <- cat <- sat (root) -> down
HEADS = np.array([2, 3, 0, 3])
RELATIONS = ["det", "nsubj", "root", "compound:prt"]


def one_hot_rows(targets, n=4):
    a = np.full((n, n), 0.01)
    for i, j in enumerate(targets):
        a[i, j] = 1.0
    return a / a.sum(-1, keepdims=True)


def test_word_attention_sums_into_a_word_and_averages_out_of_it():
    # pieces: the | ca ##t | sat: pieces of word 1 are 1 and 2
    a = np.array([[0.0, 0.5, 0.5, 0.0],
                  [0.2, 0.0, 0.0, 0.8],
                  [0.6, 0.0, 0.0, 0.4],
                  [0.1, 0.3, 0.6, 0.0]])
    w = word_attention(a, np.array([0, 1, 1, 2]))
    np.testing.assert_allclose(w, [[0.0, 1.0, 0.0], [0.4, 0.0, 0.6], [0.1, 0.9, 0.0]])
    np.testing.assert_allclose(w.sum(-1), 1.0)


def test_each_heads_accuracy_in_both_directions_and_per_relation():
    parent = one_hot_rows([1, 2, 3, 2])  # each word's head (the root "sat" looks at "down": ignored)
    left = one_hot_rows([1, 0, 1, 2])  # the word before (word 0: the next)
    child = one_hot_rows([1, 0, 3, 2])  # cat -> the, sat -> down: each head to one dependent
    attention = np.stack([np.stack([parent, left, child])])  # [L=1, H=3, n, n]
    counts = ProbeCounts((1, 3))
    counts.add(attention, HEADS, RELATIONS)
    out = counts.summary()
    assert out["words"] == 3  # non-root words
    # dependent -> head: "the"->cat, cat->sat, down->sat; the left-looking head gets the->cat and
    # down->sat (cat looks at "the"), the child head the same two
    assert out["parent"] == [[1.0, pytest.approx(2 / 3), pytest.approx(2 / 3)]]
    # head -> dependent: d is right when its head's most-attended word is d. The parent head: cat
    # looks at sat (not "the"), sat at down (right for down, not for cat): 1 of 3; the child head:
    # cat -> the and sat -> down right, sat -> cat wrong: 2 of 3
    assert out["child"][0][0] == pytest.approx(1 / 3)
    assert out["child"][0][2] == pytest.approx(2 / 3)
    assert out["best"] == {"layer": 0, "head": 0, "direction": "parent", "accuracy": 1.0}
    rel = out["relations"]
    assert set(rel) == {"det", "nsubj", "compound"}  # subtypes count with their relation; root excluded
    assert rel["det"]["accuracy"] == 1.0 and rel["det"]["offset"] == 1 and rel["det"]["offset_accuracy"] == 1.0
    assert rel["compound"]["offset"] == -1


def test_the_most_attended_word_is_never_the_word_itself():
    a = np.eye(3) * 0.9 + 0.05
    assert head_guesses(a).tolist() == [1, 0, 0]


def test_counts_add_up_over_sentences():
    counts = ProbeCounts((1, 1))
    perfect = one_hot_rows([1, 2, 3, 2])[None, None]
    counts.add(perfect, HEADS, RELATIONS)
    counts.add(perfect[..., :2, :2], np.array([2, 0]), ["amod", "root"])
    out = counts.summary()
    assert out["words"] == 4 and out["parent"] == [[1.0]]
    assert out["relations"]["amod"]["count"] == 1
