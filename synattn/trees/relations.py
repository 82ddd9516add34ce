"""Tree relations between the words of a dependency tree: distance, traversal path, syntax hints.

A tree is ``heads`` of length n, 1-based, ``heads[i - 1]`` the head of word i and 0 for ROOT
(CoNLL-U). Every root word hangs from one artificial ROOT, so several root words are allowed and
two root words are siblings, 2 edges apart. Relations are between words (0-based i, j), never ROOT.

- Tree distance (docs/methods.md §1, "Tree Distance"; docs/methods.md §1): the number of edges between i and j.
- Tree traversal (docs/methods.md §1, "Tree Traversal Encoding"; docs/methods.md §1): the shortest path from i to
  j as moves U (to the parent) and D (to a child); it always reads U^a D^b. Sibling rule: when
  a == 1 and b >= 1 the leading "UD" becomes "L" if the sibling passed through stands left of i,
  "R" if right, so the labels are {""} ∪ U^a D^b ∪ L D^c ∪ R D^c. Because the sibling rule always
  applies to a == 1, b >= 1, the strings "UD", "UDD", ... never occur and are not in the vocabulary.
- Syntax hint (Sha et al. 2022, BET(SG); docs/methods.md §4): for position t, the nearest ancestor of word t + 1
  at a position <= t, else t itself.
- Dependency-supervision targets (Deguchi et al. 2019; docs/methods.md §2): the head's index, a root word itself.

The batched functions are vectorised over a padded batch. They climb from every word to ROOT at
once (one numpy step per tree level, so loops run over depth, never over word pairs) and build the
ancestor matrix ``A[i, k] = 1`` if k is i, an ancestor of i, or ROOT. With d_i the depth (number of
ancestors counted the same way) the number of common ancestors ``(A Aᵀ)[i, j]`` is the depth of the
lowest common ancestor, so a = d_i - d_lca (steps up), b = d_j - d_lca (steps down) and the
distance is a + b; any ``u a + v b`` for all pairs comes out of one batched matmul whose factors
carry two extra columns for ``u d_i`` and ``v d_j`` (that product is ``O(n³)``: sentences of
1,024 words or more fill ``A Aᵀ`` one tree level at a time instead, in ``O(n²)``: a word's row
is its parent's plus its own column of ``A``). For the sibling rule, j lies below a left
sibling of i exactly when j precedes i in a depth-first walk that visits children left to right.
A small lookup table maps (a, b, left) to the labels.

Example:
    >>> heads = [2, 0, 4, 2, 7, 7, 4, 0]  # I think this is a good idea .
    >>> tree_distance(heads)[3].tolist()  # from "is"
    [2, 1, 1, 0, 2, 2, 1, 3]
    >>> traversal_paths(heads)[3]
    ['L', 'U', 'D', '', 'DD', 'DD', 'D', 'UUD']
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import Any

import numpy as np

from synattn.errors import InputError, UsageError, brief
from synattn.limits import check_memory
from synattn.trees._ancestors import (
    _ancestors,
    _check_heads,
    _climb,
    _from_numpy,
    _label_dtype,
    _pair_form,
    _parents,
    _preorder,
    _prepare,
    _to_numpy,
)

FAR = "<far>"
"""The overflow label shared by every relation beyond the vocabulary (and by padding pairs)."""

MAX_DISTANCE = 8
"""The default tree-distance clip: the largest distance with its own label. The one definition of
every ``max_distance`` default (these functions, the ``tree_dist`` syntax field, the ``relations``
settings of a model config, the Hugging Face aligner, ``synattn stats``)."""

MAX_TRAVERSAL = 4
"""The default traversal clip: the longest traversal path (in characters) with its own label; the one
definition of every ``max_traversal`` default."""

# ----------------------------------------------------------------------------------------------
# tree distance


def distance_vocab(max_distance: int = MAX_DISTANCE) -> list[str]:
    """Labels of the tree distance: ``"0"`` .. ``str(max_distance)``, then ``"<far>"``.

    Label index k < max_distance + 1 means distance k; index max_distance + 1 is the overflow
    label, shared by larger distances and by padding pairs.
    """
    check_label_clips(max_distance, 0)
    return [str(k) for k in range(max_distance + 1)] + [FAR]


TABLE_ENTRY_BYTES = 100
"""Bytes per entry of the lookup tables of :func:`_label_tables` while they are built (index
grids, a path string per entry): a lower bound, measured."""

PAIR_BYTES = 16
"""Bytes per word pair of :func:`batch_relation_labels` (ancestor products, codes, both label
arrays): a lower bound, measured (a 20,000-word sentence took 6.9 GB)."""


def check_label_clips(max_distance: Any, max_traversal: Any,
                      names: tuple[str, str] = ("max_distance", "max_traversal")) -> None:
    """Refuse clipping distances that are not whole numbers >= 0 or whose label tables would not
    fit in memory (:func:`synattn.limits.check_memory`; ``names``: the options as the caller
    spells them, e.g. ``--max-distance`` or ``encoder.max_distance``).

    Raises:
        UsageError: (a ``ValueError``) naming the option.
    """
    for name, value in zip(names, (max_distance, max_traversal)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise UsageError(f"{name} must be a whole number >= 0, got {brief(value)}")
    clip = max(max_distance, max_traversal) + 1
    # the tables (clip + 1)^2 * 2 entries; the traversal vocabulary ~ max_traversal^3 / 3 characters
    need = TABLE_ENTRY_BYTES * 2 * (clip + 1) ** 2 + max_traversal ** 3 / 3
    name, value = (names[0], max_distance) if max_distance >= max_traversal else (names[1], max_traversal)
    check_memory(name, value, need, "its tree-relation label tables")


def batch_tree_distance(heads: Any, lengths: Any = None) -> Any:
    """Tree distance between every two words of every sentence of a padded batch.

    Args:
        heads: ``[batch_size, n]`` 1-based heads (0 = ROOT), padded beyond ``lengths``; a numpy
            array or a torch tensor.
        lengths: ``[batch_size]`` sentence lengths; None means all are n.

    Returns:
        ``[batch_size, n, n]`` int64 distances (same kind as ``heads``): edges between i and j in
        the tree where every root word hangs from one artificial ROOT; -1 where i or j is padding.
    """
    heads_np, lengths_np, device = _prepare(heads, lengths)
    n = heads_np.shape[1]
    ancestors, depth, parent = _ancestors(heads_np)
    dist = _pair_form(ancestors, depth, up=1, down=1, parent=parent).astype(np.int64)  # [B, n, n]
    valid = np.arange(n) < lengths_np[:, None]  # [B, n]
    dist[~(valid[:, :, None] & valid[:, None, :])] = -1
    return _from_numpy(dist, device)


def tree_distance(heads: Any) -> Any:
    """Tree distance between every two words of one sentence (docs/methods.md §1).

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT (several root words allowed).

    Returns:
        ``[n, n]`` int64, symmetric with a zero diagonal; two root words are 2 apart.
    """
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_tree_distance(heads_np[None])[0], device)


def batch_distance_labels(heads: Any, lengths: Any = None, max_distance: int = MAX_DISTANCE) -> Any:
    """Tree distance labels (indices into :func:`distance_vocab`) of a padded batch.

    Args:
        heads: ``[batch_size, n]`` 1-based heads (0 = ROOT), padded beyond ``lengths``.
        lengths: ``[batch_size]`` sentence lengths; None means all are n.
        max_distance: the largest distance with its own label.

    Returns:
        ``[batch_size, n, n]`` int8 (int16 for a large vocabulary): the distance, or the overflow
        index ``max_distance + 1`` beyond it and wherever i or j is padding.
    """
    return batch_relation_labels(heads, lengths, max_distance=max_distance)[0]


def distance_labels(heads: Any, max_distance: int = MAX_DISTANCE) -> Any:
    """Tree distance labels of one sentence: ``[n, n]`` indices into :func:`distance_vocab`."""
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_distance_labels(heads_np[None], None, max_distance)[0], device)


# ----------------------------------------------------------------------------------------------
# tree traversal


def traversal_vocab(max_traversal: int = MAX_TRAVERSAL) -> list[str]:
    """Labels of the tree traversal path, in a fixed order.

    Index 0 is ``""`` (self); then, for lengths 1..max_traversal: U^a D^b by decreasing a (leaving
    out a == 1 with b >= 1, which the sibling rule always rewrites), L D^c, R D^c; last ``"<far>"``.

    Example:
        >>> traversal_vocab(2)
        ['', 'U', 'D', 'L', 'R', 'UU', 'DD', 'LD', 'RD', '<far>']
    """
    check_label_clips(0, max_traversal)
    vocab = [""]
    for length in range(1, max_traversal + 1):
        vocab += ["U" * a + "D" * (length - a) for a in range(length, -1, -1)
                  if not (a == 1 and length > 1)]
        vocab += [side + "D" * (length - 1) for side in "LR"]
    return vocab + [FAR]


@lru_cache(maxsize=16)
def _label_tables(max_distance: int, max_traversal: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Lookup tables from a clipped path (a, b, left) to a distance label and a traversal label.

    The path i -> j goes a steps up and b down; ``left`` says whether j lies left of i in the
    depth-first order (:func:`_preorder`), which decides L / R when a == 1 and b >= 1. a and b are
    clipped to ``clip = max(max_distance, max_traversal) + 1``, beyond every label.

    Returns:
        clip, and two ``[(clip + 1) * (clip + 1) * 2]`` tables indexed by ``(a * (clip + 1) + b) * 2
        + left``: distance labels (indices into :func:`distance_vocab`) and traversal labels
        (indices into :func:`traversal_vocab`), each in the smallest integer dtype that fits.
    """
    check_label_clips(max_distance, max_traversal)
    clip = max(max_distance, max_traversal) + 1
    vocab = traversal_vocab(max_traversal)
    index = {label: k for k, label in enumerate(vocab)}
    a, b, left = np.meshgrid(np.arange(clip + 1), np.arange(clip + 1), [0, 1], indexing="ij")
    distance = np.minimum(a + b, max_distance + 1).ravel()
    paths = [("RL"[lf] + "D" * (b_ - 1)) if a_ == 1 and b_ >= 1 else ("U" * a_ + "D" * b_)
             for a_, b_, lf in zip(a.ravel(), b.ravel(), left.ravel())]
    traversal = np.array([index.get(p, index[FAR]) for p in paths])
    return (clip, distance.astype(_label_dtype(max_distance + 2)),
            traversal.astype(_label_dtype(len(vocab))))


def batch_relation_labels(heads: Any, lengths: Any = None, max_distance: int = MAX_DISTANCE,
                          max_traversal: int = MAX_TRAVERSAL) -> tuple[Any, Any]:
    """Tree distance labels and tree traversal labels of a padded batch, sharing one tree climb.

    Args:
        heads: ``[batch_size, n]`` 1-based heads (0 = ROOT), padded beyond ``lengths``; numpy
            array or torch tensor.
        lengths: ``[batch_size]`` sentence lengths; None means all are n.
        max_distance: the largest distance with its own label.
        max_traversal: the longest traversal path (in characters) with its own label.

    Returns:
        ``(distance, traversal)``, each ``[batch_size, n, n]`` small-int indices into
        :func:`distance_vocab` / :func:`traversal_vocab`; pairs involving padding get the overflow
        label of each. Same kind (numpy / torch, device) as ``heads``.
    """
    heads_np, lengths_np, device = _prepare(heads, lengths)
    n = heads_np.shape[1]
    check_memory("words in a sentence", n, PAIR_BYTES * len(heads_np) * n * n,
                 f"the tree relations of {len(heads_np)} x {n} x {n} word pairs")
    clip, distance_table, traversal_table = _label_tables(max_distance, max_traversal)
    ancestors, depth, parent = _ancestors(heads_np)  # [B, n, n + 3], [B, n], [B, n]
    rank = _preorder(ancestors, depth, parent)  # [B, n]
    # padding gets a depth beyond every clip, so every pair involving it gets overflow labels;
    # real words have a, b < depth <= deepest, so tables extended to a, b <= deepest cover all
    deepest = max(int(depth.max(initial=0)), clip) + 2
    depth = np.where(np.arange(n) < lengths_np[:, None], depth, deepest)  # [B, n]
    code = _pair_form(ancestors, depth, up=2 * (deepest + 1), down=2, parent=parent)  # [B, n, n]
    code += rank[:, None, :] < rank[:, :, None]  # index (a * (deepest + 1) + b) * 2 + left
    code = code.astype(np.intp)
    clipped = np.minimum(np.arange(deepest + 1), clip)  # a, b beyond the clip read its row
    extend = np.ix_(clipped, clipped, np.array([0, 1]))
    distance_table = distance_table.reshape(clip + 1, clip + 1, 2)[extend].ravel()
    traversal_table = traversal_table.reshape(clip + 1, clip + 1, 2)[extend].ravel()
    return (_from_numpy(distance_table.take(code), device),
            _from_numpy(traversal_table.take(code), device))


def batch_traversal_labels(heads: Any, lengths: Any = None, max_traversal: int = MAX_TRAVERSAL) -> Any:
    """Tree traversal labels (indices into :func:`traversal_vocab`) of a padded batch.

    Args:
        heads: ``[batch_size, n]`` 1-based heads (0 = ROOT), padded beyond ``lengths``.
        lengths: ``[batch_size]`` sentence lengths; None means all are n.
        max_traversal: the longest path (in characters) with its own label.

    Returns:
        ``[batch_size, n, n]`` int8 (int16 for a large vocabulary); the overflow index
        ``len(traversal_vocab(max_traversal)) - 1`` for longer paths and padding pairs.
    """
    return batch_relation_labels(heads, lengths, max_traversal=max_traversal)[1]


def traversal_labels(heads: Any, max_traversal: int = MAX_TRAVERSAL) -> Any:
    """Tree traversal labels of one sentence: ``[n, n]`` indices into :func:`traversal_vocab`."""
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_traversal_labels(heads_np[None], None, max_traversal)[0], device)


def traversal_paths(heads: Any) -> list[list[str]]:
    """The traversal path string from every word i to every word j of one sentence, unclipped.

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT.

    Returns:
        n lists of n strings over U, D, L, R; ``""`` on the diagonal (docs/methods.md §1, Fig. "tree
        traversal encodings").
    """
    heads_np, _ = _check_heads(_to_numpy(heads)[0][None], None)
    n = heads_np.shape[1]
    if n == 0:
        return []
    ancestors, depth, parent = _ancestors(heads_np)
    rank = _preorder(ancestors, depth, parent)[0]  # [n]
    a = _pair_form(ancestors, depth, up=1, down=0, parent=parent)[0].astype(np.int64)  # [n, n] steps up
    b = _pair_form(ancestors, depth, up=0, down=1, parent=parent)[0].astype(np.int64)  # [n, n] steps down
    left = rank[None, :] < rank[:, None]  # [n, n] j walked before i
    side = np.where((a == 1) & (b >= 1), np.where(left, 1, 2), 0)  # [n, n] 0: U^a D^b, 1: L, 2: R
    code = (side * (n + 1) + a) * (n + 1) + b  # [n, n] one code per path
    codes, inverse = np.unique(code, return_inverse=True)
    side_u, rest = np.divmod(codes, (n + 1) ** 2)
    a_u, b_u = np.divmod(rest, n + 1)
    strings = np.array([("U" * a_ + "D" * b_) if s == 0 else ("LR"[s - 1] + "D" * (b_ - 1))
                        for s, a_, b_ in zip(side_u, a_u, b_u)], dtype=object)
    return strings[inverse.reshape(n, n)].tolist()


# ----------------------------------------------------------------------------------------------
# syntax hints (BET(SG)) and dependency-supervision targets


def batch_syntax_hints(heads: Any, lengths: Any = None) -> Any:
    """BET(SG) syntax hints of a padded batch (Sha et al. 2022 Fig. 1c; docs/methods.md §4).

    The hint of position t (which predicts word t + 1, 0-based) is the nearest ancestor of word
    t + 1 that stands at a position <= t; t itself if there is none, at the last word, and at
    padding positions.

    Args:
        heads: ``[batch_size, n]`` 1-based heads (0 = ROOT), padded beyond ``lengths``.
        lengths: ``[batch_size]`` sentence lengths; None means all are n.

    Returns:
        ``[batch_size, n]`` int64 0-based positions (same kind as ``heads``).
    """
    heads_np, lengths_np, device = _prepare(heads, lengths)
    batch_size, n = heads_np.shape
    parent = _parents(heads_np)  # [B, n + 1]
    t = np.broadcast_to(np.arange(n), (batch_size, n))  # [B, n]
    deque(_climb(parent, t), maxlen=0)  # raises if the heads contain a cycle
    hints, done = t.copy(), np.zeros((batch_size, n), dtype=bool)
    for cur in _climb(parent, np.where(t + 1 < lengths_np[:, None], t + 1, n)):  # word t + 1 up
        found = (cur <= t) & ~done  # the first ancestor at a position <= t (ROOT = n never is)
        hints[found] = cur[found]
        done |= found
    return _from_numpy(hints, device)


def syntax_hints(heads: Any) -> Any:
    """BET(SG) syntax hints of one sentence: ``[n]`` 0-based positions (see
    :func:`batch_syntax_hints`).

    Example:
        >>> syntax_hints([2, 0, 4, 2, 7, 7, 4, 0]).tolist()
        [0, 1, 1, 3, 3, 3, 6, 7]
    """
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_syntax_hints(heads_np[None])[0], device)


def head_targets(heads: Any) -> Any:
    """Targets of a dependency-supervised attention head (Deguchi et al. 2019; docs/methods.md §2).

    Args:
        heads: ``[..., n]`` 1-based heads, 0 = ROOT (a padded batch works: padding, whose head is
            0, targets itself).

    Returns:
        ``[..., n]`` int64 0-based index of each word's head; a root word targets itself. For
        subwords use ``head_targets(project_to_subwords(heads, pieces))``.
    """
    heads_np, device = _to_numpy(heads)
    if heads_np.ndim < 1 or not (heads_np.size == 0 or np.issubdtype(heads_np.dtype, np.integer)):
        raise InputError(f"heads must be integers [..., n], got {type(heads).__name__} {brief(heads)} "
                         f"(dtype {heads_np.dtype}, shape {heads_np.shape})")
    heads_np = heads_np.astype(np.int64)
    n = heads_np.shape[-1]
    if ((heads_np < 0) | (heads_np > n)).any():
        raise InputError(f"heads must lie in 0..{n}, got {heads_np.min()}..{heads_np.max()}")
    return _from_numpy(np.where(heads_np > 0, heads_np - 1, np.arange(n)), device)
