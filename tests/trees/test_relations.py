"""Tree distance, traversal labels, syntax hints and head targets (synattn.trees.relations).

Checked against hand-worked figures of docs/methods.md §1, against the BFS reference of
``synattn.trees._reference`` (itself checked here by hand examples and by Floyd-Warshall), and by
properties: symmetry, path grammar, reversal, vocabulary round trip, batched == per sentence.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.trees._reference import reference_labels, reference_relations
from synattn.trees.relations import (
    FAR,
    batch_distance_labels,
    batch_relation_labels,
    batch_syntax_hints,
    batch_traversal_labels,
    batch_tree_distance,
    distance_labels,
    distance_vocab,
    head_targets,
    syntax_hints,
    traversal_labels,
    traversal_paths,
    traversal_vocab,
    tree_distance,
)

# "I think this is a good idea ." : think = ROOT, I -> think, this -> is, is -> think,
# a -> idea, good -> idea, idea -> is, "." -> ROOT (two root words).
SEED_HEADS = np.array([2, 0, 4, 2, 7, 7, 4, 0])
IS, A_, PERIOD = 3, 4, 7


@st.composite
def any_trees(draw, max_n: int = 12) -> np.ndarray:
    """Any tree (projective or not, one or more roots): words attach in a random order to a
    random earlier-placed word, the first ``roots`` ones to ROOT."""
    n = draw(st.integers(1, max_n))
    order = draw(st.permutations(range(n)))
    roots = draw(st.one_of(st.just(1), st.integers(1, n)))
    heads = [0] * n
    for k, word in enumerate(order):
        heads[word] = 0 if k < roots else order[draw(st.integers(0, k - 1))] + 1
    return np.array(heads, dtype=np.int64)


@st.composite
def projective_trees(draw, max_n: int = 12) -> np.ndarray:
    """A projective tree: each span picks its head word, the parts left and right of it are cut
    into consecutive dependent spans; the sentence is cut into one or more root spans."""
    n = draw(st.integers(1, max_n))
    heads = [0] * n

    def cut(lo: int, hi: int, head: int) -> None:
        while lo < hi:
            end = draw(st.integers(lo + 1, hi))
            span(lo, end, head)
            lo = end

    def span(lo: int, hi: int, head: int) -> None:
        root = draw(st.integers(lo, hi - 1))
        heads[root] = head
        cut(lo, root, root + 1)
        cut(root + 1, hi, root + 1)

    cut(0, n, 0)
    return np.array(heads, dtype=np.int64)


trees = st.one_of(any_trees(), projective_trees())


def floyd_warshall(heads: np.ndarray) -> np.ndarray:
    """All-pairs edge counts over the words and an artificial ROOT (independent of BFS)."""
    n = len(heads)
    dist = np.full((n + 1, n + 1), 10**6)
    np.fill_diagonal(dist, 0)
    for word, head in enumerate(heads, start=1):
        dist[word, head] = dist[head, word] = 1
    for k in range(n + 1):
        dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
    return dist[1:, 1:]


def split_path(path: str) -> tuple[int, int]:
    """(a, b) of a path: U^a D^b, or a = 1, b = len for a sibling path L/R D^c."""
    if path[:1] in ("L", "R"):
        return 1, len(path)
    return path.count("U"), path.count("D")


def pad(batch: list[np.ndarray], extra: int, fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(h) for h in batch])
    heads = np.full((len(batch), lengths.max() + extra), fill, dtype=np.int64)
    for row, h in enumerate(batch):
        heads[row, :len(h)] = h
    return heads, lengths


# ------------------------------------------------------------------------------ docs/methods.md §1 figures


def test_seed_figure_distances_from_is():
    assert tree_distance(SEED_HEADS)[IS].tolist() == [2, 1, 1, 0, 2, 2, 1, 3]


def test_seed_figure_traversal_from_is():
    assert traversal_paths(SEED_HEADS)[IS] == ["L", "U", "D", "", "DD", "DD", "D", "UUD"]


def test_seed_tree_other_rows_by_hand():
    paths = traversal_paths(SEED_HEADS)
    assert paths[A_] == ["UUUD", "UUU", "UUD", "UU", "", "R", "U", "UUUUD"]
    # "." and "think" are root words, hence siblings under ROOT; "think" stands left of "."
    assert paths[PERIOD] == ["LD", "L", "LDD", "LD", "LDDD", "LDDD", "LDD", ""]
    assert paths[1][PERIOD] == "R"
    assert tree_distance(SEED_HEADS)[PERIOD].tolist() == [3, 2, 4, 3, 5, 5, 4, 0]
    # max_distance 2: labels 0, 1, 2 and the overflow index 3
    assert distance_labels(SEED_HEADS, max_distance=2)[PERIOD].tolist() == [3, 2, 3, 3, 3, 3, 3, 0]


def test_seed_tree_reference_agrees_by_hand():
    dist, paths = reference_relations(SEED_HEADS)
    assert dist[IS].tolist() == [2, 1, 1, 0, 2, 2, 1, 3]
    assert paths[IS] == ["L", "U", "D", "", "DD", "DD", "D", "UUD"]
    assert paths[PERIOD] == ["LD", "L", "LDD", "LD", "LDDD", "LDDD", "LDD", ""]


def test_seed_hints_and_head_targets_by_hand():
    # t = 1 predicts "this": its ancestors are "is" (position 3) and "think" (position 1 <= 1)
    assert syntax_hints(SEED_HEADS).tolist() == [0, 1, 1, 3, 3, 3, 6, 7]
    assert head_targets(SEED_HEADS).tolist() == [1, 1, 3, 1, 6, 6, 3, 7]


def test_non_projective_sibling_side_by_hand():
    # ROOT -> w1; w1 -> w3, w1 -> w4; w3 -> w5; w4 -> w2 (arc w4 -> w2 crosses w1 -> w3)
    heads = np.array([0, 4, 1, 1, 3])
    paths = traversal_paths(heads)
    assert paths[3][4] == "LD"  # w4 -> w5 passes through w3, left of w4, although w5 is right
    assert paths[2][1] == "RD"  # w3 -> w2 passes through w4, right of w3, although w2 is left
    assert paths[1][4] == "UUDD"


# ------------------------------------------------------------------------------ vocabularies


def test_distance_vocab():
    assert distance_vocab(3) == ["0", "1", "2", "3", FAR]
    assert distance_vocab() == [str(k) for k in range(9)] + [FAR]


def test_traversal_vocab_small_by_hand():
    assert traversal_vocab(2) == ["", "U", "D", "L", "R", "UU", "DD", "LD", "RD", FAR]


@pytest.mark.parametrize("max_traversal", [0, 1, 3, 4, 6])
def test_traversal_vocab_is_every_reachable_path(max_traversal):
    vocab = traversal_vocab(max_traversal)
    assert vocab[0] == "" and vocab[-1] == FAR and len(set(vocab)) == len(vocab)
    lengths = [len(v) for v in vocab[:-1]]
    assert lengths == sorted(lengths)
    strings = [""]
    for _ in range(max_traversal):  # every string over U, D, L, R up to max_traversal
        strings += [s + c for s in strings if len(s) == len(strings[-1]) for c in "UDLR"]
    reachable = {s for s in strings
                 if re.fullmatch(r"U*D*|[LR]D*", s) and not re.fullmatch(r"UD+", s)}
    assert set(vocab[:-1]) == reachable


# ------------------------------------------------------------------------- against the reference


@settings(max_examples=150, deadline=None)
@given(trees)
def test_distance_matches_reference_and_floyd_warshall(heads):
    dist = tree_distance(heads)
    ref_dist, _ = reference_relations(heads)
    np.testing.assert_array_equal(dist, ref_dist)
    np.testing.assert_array_equal(dist, floyd_warshall(heads))


@settings(max_examples=150, deadline=None)
@given(trees)
def test_traversal_paths_match_reference(heads):
    assert traversal_paths(heads) == reference_relations(heads)[1]


@settings(max_examples=100, deadline=None)
@given(trees, st.integers(0, 9), st.integers(0, 6))
def test_labels_match_reference(heads, max_distance, max_traversal):
    ref_dist, ref_trav = reference_labels(heads, max_distance, max_traversal)
    np.testing.assert_array_equal(distance_labels(heads, max_distance), ref_dist)
    np.testing.assert_array_equal(traversal_labels(heads, max_traversal), ref_trav)


# ------------------------------------------------------------------------------ properties


@settings(max_examples=150, deadline=None)
@given(trees)
def test_distance_properties(heads):
    n = len(heads)
    dist = tree_distance(heads)
    np.testing.assert_array_equal(dist, dist.T)
    assert (np.diag(dist) == 0).all() and (dist[~np.eye(n, dtype=bool)] > 0).all()
    for word, head in enumerate(heads):
        if head:
            assert dist[word, head - 1] == 1
    roots = np.flatnonzero(heads == 0)
    assert (dist[np.ix_(roots, roots)] == 2 * (1 - np.eye(len(roots), dtype=int))).all()


@settings(max_examples=150, deadline=None)
@given(trees)
def test_paths_grammar_length_and_reversal(heads):
    n = len(heads)
    paths, dist = traversal_paths(heads), tree_distance(heads)
    for i in range(n):
        for j in range(n):
            p = paths[i][j]
            assert (p == "") == (i == j)
            assert re.fullmatch(r"U*D*|[LR]D*", p) and not re.fullmatch(r"UD+", p)
            a, b = split_path(p)
            assert a + b == dist[i, j]
            assert split_path(paths[j][i]) == (b, a)  # U^a D^b reverses to U^b D^a
            if p in ("L", "R"):  # plain siblings: the reverse is the other side
                assert paths[j][i] == {"L": "R", "R": "L"}[p]
            if p.startswith("U") and "D" not in p:  # j is an ancestor of i: climb a heads
                k = i
                for _ in range(a):
                    k = heads[k] - 1
                assert k == j
            if p[:1] in ("L", "R"):  # climb from j to the sibling s of i that the path passes
                s = j
                while heads[s] != heads[i]:
                    s = heads[s] - 1
                assert s != i and (s < i) == (p[0] == "L")


@settings(max_examples=100, deadline=None)
@given(trees, st.integers(0, 9), st.integers(0, 6))
def test_vocab_round_trip(heads, max_distance, max_traversal):
    paths, dist = traversal_paths(heads), tree_distance(heads)
    d_vocab, t_vocab = distance_vocab(max_distance), traversal_vocab(max_traversal)
    d_labels = distance_labels(heads, max_distance)
    t_labels = traversal_labels(heads, max_traversal)
    assert d_labels.dtype == np.int8 and t_labels.dtype == np.int8
    for i in range(len(heads)):
        for j in range(len(heads)):
            expect_d = str(dist[i, j]) if dist[i, j] <= max_distance else FAR
            expect_t = paths[i][j] if len(paths[i][j]) <= max_traversal else FAR
            assert d_vocab[d_labels[i, j]] == expect_d
            assert t_vocab[t_labels[i, j]] == expect_t


# ------------------------------------------------------------------------------ batched


@settings(max_examples=80, deadline=None)
@given(st.lists(trees, min_size=1, max_size=5), st.integers(0, 3), st.sampled_from([0, 1, 5]),
       st.integers(0, 6), st.integers(0, 5))
def test_batched_equals_per_sentence(batch, extra, fill, max_distance, max_traversal):
    heads, lengths = pad(batch, extra, fill)  # padding values are ignored, whatever they are
    width = heads.shape[1]
    dist = batch_tree_distance(heads, lengths)
    d_labels, t_labels = batch_relation_labels(heads, lengths, max_distance, max_traversal)
    hints = batch_syntax_hints(heads, lengths)
    assert dist.shape == d_labels.shape == t_labels.shape == (len(batch), width, width)
    np.testing.assert_array_equal(d_labels, batch_distance_labels(heads, lengths, max_distance))
    np.testing.assert_array_equal(t_labels, batch_traversal_labels(heads, lengths, max_traversal))
    far_d = len(distance_vocab(max_distance)) - 1
    far_t = len(traversal_vocab(max_traversal)) - 1
    for row, h in enumerate(batch):
        n = len(h)
        np.testing.assert_array_equal(dist[row, :n, :n], tree_distance(h))
        np.testing.assert_array_equal(d_labels[row, :n, :n], distance_labels(h, max_distance))
        np.testing.assert_array_equal(t_labels[row, :n, :n], traversal_labels(h, max_traversal))
        np.testing.assert_array_equal(hints[row, :n], syntax_hints(h))
        assert (hints[row, n:] == np.arange(n, width)).all()
        padding = np.ones((width, width), dtype=bool)
        padding[:n, :n] = False
        assert (dist[row][padding] == -1).all()
        assert (d_labels[row][padding] == far_d).all() and (t_labels[row][padding] == far_t).all()


@pytest.mark.parametrize("max_labels", [0, 1, 4])
def test_padding_of_flat_trees_gets_overflow_labels(max_labels):
    heads, lengths = pad([np.array([0, 0]), np.array([0])], extra=1)  # depth 1 words, padding
    d_labels, t_labels = batch_relation_labels(heads, lengths, max_labels, max_labels)
    far_d, far_t = len(distance_vocab(max_labels)) - 1, len(traversal_vocab(max_labels)) - 1
    for row, n in enumerate(lengths):
        assert (d_labels[row, n:] == far_d).all() and (d_labels[row, :, n:] == far_d).all()
        assert (t_labels[row, n:] == far_t).all() and (t_labels[row, :, n:] == far_t).all()
        assert (np.diag(d_labels[row])[:n] == 0).all() and (np.diag(t_labels[row])[:n] == 0).all()


def test_batched_accepts_torch_and_returns_torch():
    heads, lengths = pad([SEED_HEADS, np.array([0, 1, 1])], extra=1)
    d_np, t_np = batch_relation_labels(heads, lengths)
    d_pt, t_pt = batch_relation_labels(torch.from_numpy(heads), torch.from_numpy(lengths))
    assert isinstance(d_pt, torch.Tensor) and isinstance(t_pt, torch.Tensor)
    np.testing.assert_array_equal(d_pt.numpy(), d_np)
    np.testing.assert_array_equal(t_pt.numpy(), t_np)
    dist = batch_tree_distance(torch.from_numpy(heads), torch.from_numpy(lengths))
    assert isinstance(dist, torch.Tensor) and dist[0, IS].tolist()[:8] == [2, 1, 1, 0, 2, 2, 1, 3]
    assert syntax_hints(torch.tensor(SEED_HEADS)).tolist() == [0, 1, 1, 3, 3, 3, 6, 7]
    assert isinstance(head_targets(torch.tensor(SEED_HEADS)), torch.Tensor)


def test_empty_inputs():
    assert tree_distance(np.zeros(0, dtype=np.int64)).shape == (0, 0)
    assert traversal_paths([]) == []
    assert batch_relation_labels(np.zeros((2, 0), dtype=np.int64))[0].shape == (2, 0, 0)
    heads, lengths = pad([np.array([0])], extra=2)
    lengths[0] = 0  # an empty sentence in a padded batch
    assert (batch_traversal_labels(heads, lengths) == len(traversal_vocab()) - 1).all()


# ------------------------------------------------------------------------------ hints and targets


def reference_hints(heads: np.ndarray) -> list[int]:
    n, hints = len(heads), []
    for t in range(n):
        hint, k = t, t + 1  # climb from word t + 1 to the first ancestor at a position <= t
        while t + 1 < n and heads[k] != 0:
            k = heads[k] - 1
            if k <= t:
                hint = k
                break
        hints.append(hint)
    return hints


@settings(max_examples=150, deadline=None)
@given(trees)
def test_hints_match_reference_and_are_ancestors(heads):
    hints = syntax_hints(heads)
    assert hints.tolist() == reference_hints(heads)
    dist, paths = tree_distance(heads), traversal_paths(heads)
    for t, hint in enumerate(hints):
        assert hint <= t
        if hint != t:  # an ancestor of word t + 1, and no nearer ancestor stands at <= t
            assert re.fullmatch(r"U+", paths[t + 1][hint])
            nearer = [k for k in range(t + 1) if re.fullmatch(r"U+", paths[t + 1][k])
                      and dist[t + 1, k] < dist[t + 1, hint]]
            assert nearer == []


@settings(max_examples=100, deadline=None)
@given(trees)
def test_head_targets(heads):
    targets = head_targets(heads)
    expected = [h - 1 if h else i for i, h in enumerate(heads)]
    assert targets.tolist() == expected
    heads_batch, _ = pad([heads, heads[:1] * 0], extra=2)  # padding (head 0) targets itself
    np.testing.assert_array_equal(head_targets(heads_batch)[0, :len(heads)], targets)
    assert head_targets(heads_batch)[1].tolist() == list(range(heads_batch.shape[1]))


# ------------------------------------------------------------------------------ long sentences


@settings(max_examples=40, deadline=None)
@given(trees=st.lists(any_trees(max_n=10), min_size=1, max_size=3), clip=st.integers(1, 5))
def test_long_sentence_path_equals_the_matmul_path(trees, clip):
    """Long sentences count common ancestors level by level in O(n²) (stats on one 20,000-word
    sentence took 67 s through the O(n³) ancestor product): the same labels, padded batches too."""
    import synattn.trees._ancestors as ancestors

    n = max(len(t) for t in trees)
    heads = np.stack([np.pad(t, (0, n - len(t))) for t in trees])
    lengths = np.array([len(t) for t in trees])
    want = [np.asarray(x) for x in batch_relation_labels(heads, lengths, clip, clip)]
    want.append(np.asarray(batch_tree_distance(heads, lengths)))
    saved, ancestors.LINEAR_FROM = ancestors.LINEAR_FROM, 1  # every sentence takes the long path
    try:
        got = [np.asarray(x) for x in batch_relation_labels(heads, lengths, clip, clip)]
        got.append(np.asarray(batch_tree_distance(heads, lengths)))
        paths = traversal_paths(trees[0])
    finally:
        ancestors.LINEAR_FROM = saved
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)
    assert paths == traversal_paths(trees[0])
