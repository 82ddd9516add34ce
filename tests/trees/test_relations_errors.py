"""Bad input to the tree relations (synattn.trees.relations): cycles, heads out of range, bad shapes
and clips, and sizes refused by memory, each a clear one-line error instead of a loop, zeros or an
exhausted machine."""

from __future__ import annotations

import numpy as np
import pytest

from synattn.trees.relations import (
    batch_relation_labels,
    batch_tree_distance,
    distance_labels,
    head_targets,
    syntax_hints,
    traversal_labels,
    traversal_paths,
    traversal_vocab,
    tree_distance,
)


@pytest.mark.parametrize("heads", [[1], [2, 1], [0, 3, 4, 2], [2, 3, 1, 0]])
@pytest.mark.parametrize("fn", [tree_distance, traversal_paths, traversal_labels, distance_labels,
                                syntax_hints])
def test_cycles_raise_instead_of_looping(heads, fn):
    with pytest.raises(ValueError, match="cycle"):
        fn(np.array(heads))


def test_cycle_in_batch_names_the_sentence():
    heads = np.array([[2, 0, 4, 2, 7, 7, 4, 0], [0, 3, 2, 0, 0, 0, 0, 0]])  # a tree, then a cycle 2 -> 3 -> 2
    lengths = np.array([8, 3])
    with pytest.raises(ValueError, match="sentence 1: the heads contain a cycle"):
        batch_relation_labels(heads, lengths)


@pytest.mark.parametrize("heads", [[0, 3], [-1, 0], [0, 1, 9]])
def test_out_of_range_heads_raise(heads):
    with pytest.raises(ValueError, match="expected 0 \\(ROOT\\)"):
        tree_distance(np.array(heads))


def test_bad_shapes_and_lengths_raise():
    with pytest.raises(ValueError, match="lengths"):
        batch_tree_distance(np.zeros((2, 3), dtype=np.int64), np.array([1, 4]))
    with pytest.raises(ValueError, match="integers"):
        tree_distance(np.array([0.0, 1.0]))
    with pytest.raises(ValueError):
        traversal_vocab(-1)


# --- bad arguments: clear errors, bounds derived from memory ------------------------------------

@pytest.mark.parametrize("fn", [distance_labels, traversal_labels])
def test_negative_clip_is_an_error(fn):
    """distance_labels(h, max_distance=-1) returned zeros."""
    with pytest.raises(ValueError, match=r"max_(distance|traversal) must be a whole number >= 0, got -1"):
        fn([2, 0, 2], -1)
    with pytest.raises(ValueError, match="whole number"):
        fn([2, 0, 2], 2.5)


def test_huge_clip_is_refused_by_memory_naming_the_option():
    """max_distance=10**9 built lookup tables of 10**18 entries (out of memory)."""
    with pytest.raises(ValueError, match=r"max_distance=1000000000 is too large: its tree-relation "
                                         r"label tables would need about .* more than this machine's"):
        distance_labels([2, 0, 2], 10 ** 9)
    with pytest.raises(ValueError, match=r"max_traversal=1000000000 is too large"):
        batch_relation_labels(np.array([[2, 0, 2]]), max_traversal=10 ** 9)


def test_long_sentence_is_refused_by_memory(monkeypatch):
    """stats on one 20,000-word sentence took 6.9 GB (and 67 s): on a machine with less memory than
    its n^2 word pairs need, a one-line error instead."""
    import synattn.limits as limits

    monkeypatch.setattr(limits, "memory_bytes", lambda: 4 * 10 ** 9)
    heads = np.zeros((1, 20_000), dtype=np.int64)
    with pytest.raises(ValueError, match=r"words in a sentence=20000 is too large: the tree relations "
                                         r"of 1 x 20000 x 20000 word pairs"):
        batch_relation_labels(heads)
    assert batch_relation_labels(heads[:, :100])[0].shape == (1, 100, 100)


@pytest.mark.parametrize("heads", ["012", 3, [0.5, 0.0], None])
def test_head_targets_of_no_heads_is_a_clear_error(heads):
    """head_targets("012") raised IndexError."""
    with pytest.raises(ValueError, match=r"heads must be integers \[\.\.\., n\]"):
        head_targets(heads)
