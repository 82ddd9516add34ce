"""Tree relations between the words of a dependency tree: distance, traversal path, syntax hints.

A tree is ``heads`` of length n, 1-based, ``heads[i - 1]`` the head of word i and 0 for ROOT
(CoNLL-U). Every root word hangs from one artificial ROOT, so several root words are allowed and
two root words are siblings, 2 edges apart. Relations are between words (0-based i, j), never ROOT.

- Tree distance (seed 000, "Tree Distance"; METHODS.md §1): the number of edges between i and j.
- Tree traversal (seed 000, "Tree Traversal Encoding"; METHODS.md §1): the shortest path from i to
  j as moves U (to the parent) and D (to a child); it always reads U^a D^b. Sibling rule: when
  a == 1 and b >= 1 the leading "UD" becomes "L" if the sibling passed through stands left of i,
  "R" if right, so the labels are {""} ∪ U^a D^b ∪ L D^c ∪ R D^c. Because the sibling rule always
  applies to a == 1, b >= 1, the strings "UD", "UDD", ... never occur and are not in the vocabulary.
- Syntax hint (seed 003, BET(SG); METHODS.md §4): for position t, the nearest ancestor of word t + 1
  at a position <= t, else t itself.
- Dependency-supervision targets (seed 001; METHODS.md §2): the head's index, a root word itself.

The batched functions are vectorised over a padded batch: they climb from every word to ROOT at
once (one numpy step per tree level), build the ancestor matrix ``A[b, i, k] = 1`` if k is i, an
ancestor of i or ROOT, and count common ancestors with one batched matmul ``A Aᵀ``, which is the
depth of the lowest common ancestor (LCA). With d the depth (ancestors counted the same way):
distance = d_i + d_j − 2 d_lca, a = d_i − d_lca, b = d_j − d_lca; the sibling of the sibling rule is
the ancestor of j that is b − 1 steps above j. A small lookup table maps (a, b, side) to a label.

Example:
    >>> heads = [2, 0, 4, 2, 7, 7, 4, 0]  # I think this is a good idea .
    >>> tree_distance(heads)[3].tolist()  # from "is"
    [2, 1, 1, 0, 2, 2, 1, 3]
    >>> traversal_paths(heads)[3]
    ['L', 'U', 'D', '', 'DD', 'DD', 'D', 'UUD']
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from synattn.errors import InputError

FAR = "<far>"
"""The overflow label shared by every relation beyond the vocabulary (and by padding pairs)."""

# ----------------------------------------------------------------------------------------------
# numpy / torch interchange


def _to_numpy(x: Any) -> tuple[np.ndarray, Any]:
    """Returns ``x`` as a numpy array and the torch device it came from (None if not a tensor)."""
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is imported already
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy(), x.device
    return np.asarray(x), None


def _from_numpy(x: np.ndarray, device: Any) -> Any:
    """Returns ``x`` as a torch tensor on ``device``, or unchanged when ``device`` is None."""
    if device is None:
        return x
    torch = sys.modules["torch"]
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _label_dtype(n_labels: int) -> type:
    """The smallest signed integer dtype holding the indices 0..n_labels - 1."""
    return np.int8 if n_labels <= 127 else np.int16 if n_labels <= 32767 else np.int32


# ----------------------------------------------------------------------------------------------
# validation and tree geometry


def _check_heads(heads: np.ndarray, lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Validates a (padded) batch of heads and returns ``(heads, lengths)`` as int64 arrays.

    Args:
        heads: ``[batch_size, n]`` 1-based heads, 0 = ROOT; entries beyond a length are ignored.
        lengths: ``[batch_size]`` or None for "every sentence has n words".

    Returns:
        heads ``[batch_size, n]`` with padding entries set to 0, and lengths ``[batch_size]``.

    Raises:
        InputError: wrong shape or dtype, a length outside 0..n, a head outside 0..length.
    """
    if heads.size == 0:
        heads = heads.astype(np.int64)
    if heads.ndim != 2:
        raise InputError(f"heads must be a [batch_size, n] array, got shape {heads.shape}")
    if not np.issubdtype(heads.dtype, np.integer):
        raise InputError(f"heads must hold integers, got dtype {heads.dtype}")
    batch_size, n = heads.shape
    if lengths is None:
        lengths = np.full(batch_size, n, dtype=np.int64)
    if lengths.shape != (batch_size,) or (lengths.size and not np.issubdtype(lengths.dtype, np.integer)):
        raise InputError(f"lengths must be [batch_size] = [{batch_size}] integers, got "
                         f"shape {lengths.shape} dtype {lengths.dtype}")
    lengths = lengths.astype(np.int64)
    if ((lengths < 0) | (lengths > n)).any():
        raise InputError(f"lengths must lie in 0..{n} (the padded width), got {lengths.tolist()}")
    valid = np.arange(n) < lengths[:, None]  # [B, n]
    heads = np.where(valid, heads, 0).astype(np.int64)
    bad = (heads < 0) | (heads > lengths[:, None])  # [B, n]
    if bad.any():
        b, i = np.argwhere(bad)[0]
        where = f"sentence {b}: " if batch_size > 1 else ""
        raise InputError(f"{where}word {i + 1} has head {heads[b, i]}, expected 0 (ROOT) "
                         f"or a word 1..{lengths[b]}")
    return heads, lengths


def _climb(heads: np.ndarray) -> np.ndarray:
    """Every word's chain of ancestors, one numpy step per tree level over the whole batch.

    Args:
        heads: ``[batch_size, n]`` validated 1-based heads, 0 = ROOT.

    Returns:
        ``[batch_size, n, T]`` int64: ``[b, i, t]`` is the t-th ancestor of word i (0-based;
        t = 0 is i itself), or n (ROOT) once ROOT is reached; the last column is all ROOT.

    Raises:
        InputError: the heads contain a cycle (some word never reaches ROOT).
    """
    batch_size, n = heads.shape
    root = np.full((batch_size, 1), n, dtype=np.int64)
    parent = np.concatenate([np.where(heads > 0, heads - 1, n), root], axis=1)  # [B, n + 1]
    cur = np.broadcast_to(np.arange(n), (batch_size, n))  # [B, n]
    chain = [cur]
    while not (cur == n).all():
        if len(chain) > n:  # n steps lead every word of an acyclic tree to ROOT
            b, i = np.argwhere(cur != n)[0]
            where = f"sentence {b}: " if batch_size > 1 else ""
            raise InputError(f"{where}the heads contain a cycle: word {cur[b, i] + 1} "
                             f"(reached from word {i + 1}) never reaches ROOT")
        cur = np.take_along_axis(parent, cur, axis=1)  # [B, n]
        chain.append(cur)
    return np.stack(chain, axis=-1)  # [B, n, T]


def _geometry(heads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depths, LCA depths and ancestor chains of a batch of trees.

    Args:
        heads: ``[batch_size, n]`` validated 1-based heads, 0 = ROOT.

    Returns:
        depth ``[batch_size, n]`` (number of ancestors of i counting i and ROOT), lca_depth
        ``[batch_size, n, n]`` (number of common ancestors of i and j, ROOT included), both int32,
        and the ancestor chains of :func:`_climb` ``[batch_size, n, T]``.
    """
    batch_size, n = heads.shape
    chain = _climb(heads)  # [B, n, T]
    ancestors = np.zeros((batch_size, n, n + 1), dtype=np.float32)  # column n is ROOT
    ancestors[np.arange(batch_size)[:, None, None], np.arange(n)[None, :, None], chain] = 1.0
    lca_depth = np.matmul(ancestors, ancestors.transpose(0, 2, 1)).astype(np.int32)  # [B, n, n]
    depth = (chain != n).sum(axis=-1, dtype=np.int32) + 1  # [B, n]
    return depth, lca_depth, chain


def _pair_mask(lengths: np.ndarray, n: int) -> np.ndarray:
    """``[batch_size, n, n]`` True where both i and j are words (not padding)."""
    valid = np.arange(n) < lengths[:, None]  # [B, n]
    return valid[:, :, None] & valid[:, None, :]  # [B, n, n]


# ----------------------------------------------------------------------------------------------
# tree distance


def distance_vocab(max_distance: int = 8) -> list[str]:
    """Labels of the tree distance: ``"0"`` .. ``str(max_distance)``, then ``"<far>"``.

    Label index k < max_distance + 1 means distance k; index max_distance + 1 is the overflow
    label, shared by larger distances and by padding pairs.
    """
    if max_distance < 0:
        raise ValueError(f"max_distance must be >= 0, got {max_distance}")
    return [str(k) for k in range(max_distance + 1)] + [FAR]


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
    heads_np, device = _to_numpy(heads)
    lengths_np = None if lengths is None else _to_numpy(lengths)[0]
    heads_np, lengths_np = _check_heads(heads_np, lengths_np)
    depth, lca_depth, _ = _geometry(heads_np)
    dist = depth[:, :, None] + depth[:, None, :] - 2 * lca_depth  # [B, n, n]
    dist = np.where(_pair_mask(lengths_np, heads_np.shape[1]), dist, -1).astype(np.int64)
    return _from_numpy(dist, device)


def tree_distance(heads: Any) -> Any:
    """Tree distance between every two words of one sentence (seed 000; METHODS.md §1).

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT (several root words allowed).

    Returns:
        ``[n, n]`` int64, symmetric with a zero diagonal; two root words are 2 apart.
    """
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_tree_distance(heads_np[None])[0], device)


def batch_distance_labels(heads: Any, lengths: Any = None, max_distance: int = 8) -> Any:
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


def distance_labels(heads: Any, max_distance: int = 8) -> Any:
    """Tree distance labels of one sentence: ``[n, n]`` indices into :func:`distance_vocab`."""
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_distance_labels(heads_np[None], None, max_distance)[0], device)


# ----------------------------------------------------------------------------------------------
# tree traversal


def traversal_vocab(max_traversal: int = 4) -> list[str]:
    """Labels of the tree traversal path, in a fixed order.

    Index 0 is ``""`` (self); then, for lengths 1..max_traversal: U^a D^b by decreasing a (leaving
    out a == 1 with b >= 1, which the sibling rule always rewrites), L D^c, R D^c; last ``"<far>"``.

    Example:
        >>> traversal_vocab(2)
        ['', 'U', 'D', 'L', 'R', 'UU', 'DD', 'LD', 'RD', '<far>']
    """
    if max_traversal < 0:
        raise ValueError(f"max_traversal must be >= 0, got {max_traversal}")
    vocab = [""]
    for length in range(1, max_traversal + 1):
        vocab += ["U" * a + "D" * (length - a) for a in range(length, -1, -1)
                  if not (a == 1 and length > 1)]
        vocab += [side + "D" * (length - 1) for side in "LR"]
    return vocab + [FAR]


def _traversal_table(max_traversal: int) -> np.ndarray:
    """Lookup table ``[max_traversal + 4, max_traversal + 2]`` from (row, b) to a vocab index.

    Row a in 0..max_traversal + 1 is U^a D^b (a clipped to max_traversal + 1, which is beyond every
    label); row max_traversal + 2 is L D^(b-1) and row max_traversal + 3 is R D^(b-1).
    """
    index = {label: k for k, label in enumerate(traversal_vocab(max_traversal))}
    far = index[FAR]
    m = max_traversal
    table = np.full((m + 4, m + 2), far, dtype=np.int64)
    for b in range(m + 2):
        for a in range(m + 2):
            table[a, b] = index.get("U" * a + "D" * b, far)
        if b >= 1:
            table[m + 2, b] = index.get("L" + "D" * (b - 1), far)
            table[m + 3, b] = index.get("R" + "D" * (b - 1), far)
    return table


def _traversal_parts(depth: np.ndarray, lca_depth: np.ndarray, chain: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The path i -> j as (a, b, side): ``U^a D^b``, side 0, or with the sibling rule side 1 (L) / 2 (R).

    Args:
        depth, lca_depth, chain: as returned by :func:`_geometry`.

    Returns:
        a, b ``[batch_size, n, n]`` int32 and side ``[batch_size, n, n]`` int8.
    """
    n = depth.shape[1]
    a = depth[:, :, None] - lca_depth  # [B, n, n] steps up from i to the LCA
    b = depth[:, None, :] - lca_depth  # [B, n, n] steps down from the LCA to j
    # the sibling passed through is the ancestor of j at b - 1 steps above j: chain[b, j, b - 1]
    steps = np.clip(b - 1, 0, chain.shape[-1] - 1)  # [B, n_i, n_j]
    sibling = np.take_along_axis(chain.transpose(0, 2, 1), steps, axis=1)  # [B, n_i, n_j]
    left = sibling < np.arange(n)[None, :, None]  # [B, n, n]
    side = np.where((a == 1) & (b >= 1), np.where(left, 1, 2), 0).astype(np.int8)
    return a, b, side


def batch_relation_labels(heads: Any, lengths: Any = None, max_distance: int = 8,
                          max_traversal: int = 4) -> tuple[Any, Any]:
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
    heads_np, device = _to_numpy(heads)
    lengths_np = None if lengths is None else _to_numpy(lengths)[0]
    heads_np, lengths_np = _check_heads(heads_np, lengths_np)
    n_dist, table = len(distance_vocab(max_distance)), _traversal_table(max_traversal)
    depth, lca_depth, chain = _geometry(heads_np)
    pairs = _pair_mask(lengths_np, heads_np.shape[1])  # [B, n, n]

    dist = depth[:, :, None] + depth[:, None, :] - 2 * lca_depth  # [B, n, n]
    dist = np.where(pairs, np.minimum(dist, max_distance + 1), max_distance + 1)
    dist = dist.astype(_label_dtype(n_dist))

    a, b, side = _traversal_parts(depth, lca_depth, chain)
    m = max_traversal
    row = np.where(side == 0, np.minimum(a, m + 1), side + (m + 1))  # [B, n, n] row of the table
    trav = table.ravel()[row * (m + 2) + np.minimum(b, m + 1)]  # [B, n, n]
    trav = np.where(pairs, trav, table[m + 1, m + 1]).astype(_label_dtype(table.max() + 1))
    return _from_numpy(dist, device), _from_numpy(trav, device)


def batch_traversal_labels(heads: Any, lengths: Any = None, max_traversal: int = 4) -> Any:
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


def traversal_labels(heads: Any, max_traversal: int = 4) -> Any:
    """Tree traversal labels of one sentence: ``[n, n]`` indices into :func:`traversal_vocab`."""
    heads_np, device = _to_numpy(heads)
    return _from_numpy(batch_traversal_labels(heads_np[None], None, max_traversal)[0], device)


def traversal_paths(heads: Any) -> list[list[str]]:
    """The traversal path string from every word i to every word j of one sentence, unclipped.

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT.

    Returns:
        n lists of n strings over U, D, L, R; ``""`` on the diagonal (seed 000, Fig. "tree
        traversal encodings").
    """
    heads_np, _ = _check_heads(_to_numpy(heads)[0][None], None)
    n = heads_np.shape[1]
    if n == 0:
        return []
    a, b, side = (x[0] for x in _traversal_parts(*_geometry(heads_np)))  # [n, n] each
    code = (side.astype(np.int64) * (n + 1) + a) * (n + 1) + b  # [n, n] one code per path
    codes, inverse = np.unique(code, return_inverse=True)
    side_u, rest = np.divmod(codes, (n + 1) ** 2)
    a_u, b_u = np.divmod(rest, n + 1)
    strings = np.array([("U" * a_ + "D" * b_) if s == 0 else ("LR"[s - 1] + "D" * (b_ - 1))
                        for s, a_, b_ in zip(side_u, a_u, b_u)], dtype=object)
    return strings[inverse.reshape(n, n)].tolist()


# ----------------------------------------------------------------------------------------------
# syntax hints (BET(SG)) and dependency-supervision targets


def batch_syntax_hints(heads: Any, lengths: Any = None) -> Any:
    """BET(SG) syntax hints of a padded batch (seed 003 Fig. 1c; METHODS.md §4).

    The hint of position t (which predicts word t + 1, 0-based) is the nearest ancestor of word
    t + 1 that stands at a position <= t; t itself if there is none, at the last word, and at
    padding positions.

    Args:
        heads: ``[batch_size, n]`` 1-based heads (0 = ROOT), padded beyond ``lengths``.
        lengths: ``[batch_size]`` sentence lengths; None means all are n.

    Returns:
        ``[batch_size, n]`` int64 0-based positions (same kind as ``heads``).
    """
    heads_np, device = _to_numpy(heads)
    lengths_np = None if lengths is None else _to_numpy(lengths)[0]
    heads_np, lengths_np = _check_heads(heads_np, lengths_np)
    batch_size, n = heads_np.shape
    root = np.full((batch_size, 1), n, dtype=np.int64)
    parent = np.concatenate([np.where(heads_np > 0, heads_np - 1, n), root], axis=1)  # [B, n+1]
    t = np.broadcast_to(np.arange(n), (batch_size, n))  # [B, n]
    hints = t.copy()
    cur = np.where(t + 1 < lengths_np[:, None], t + 1, n)  # [B, n] word t + 1, or ROOT
    for _ in range(n):
        cur = np.take_along_axis(parent, cur, axis=1)  # [B, n] one step up
        found = cur <= t  # an ancestor at a position <= t (ROOT = n never is)
        hints[found] = cur[found]
        cur = np.where(found, n, cur)  # stop climbing once found
        if (cur == n).all():
            break
    else:
        if n and not (cur == n).all():
            _climb(heads_np)  # raises the cycle error with its location
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
    """Targets of a dependency-supervised attention head (seed 001; METHODS.md §2).

    Args:
        heads: ``[..., n]`` 1-based heads, 0 = ROOT (a padded batch works: padding, whose head is
            0, targets itself).

    Returns:
        ``[..., n]`` int64 0-based index of each word's head; a root word targets itself. For
        subwords use ``head_targets(project_to_subwords(heads, pieces))``.
    """
    heads_np, device = _to_numpy(heads)
    heads_np = heads_np.astype(np.int64)
    n = heads_np.shape[-1]
    if ((heads_np < 0) | (heads_np > n)).any():
        raise InputError(f"heads must lie in 0..{n}, got {heads_np.min()}..{heads_np.max()}")
    return _from_numpy(np.where(heads_np > 0, heads_np - 1, np.arange(n)), device)
