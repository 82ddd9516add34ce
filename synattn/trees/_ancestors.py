"""The array machinery behind :mod:`synattn.trees.relations`: numpy/torch interchange, head
checks, climbing every word to ROOT at once, ancestor matrices, the pre-order rank and the
``u a + v b`` pair form (one batched matmul; see the docstring of :mod:`synattn.trees.relations`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from synattn.errors import InputError

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
    integral = lengths.size == 0 or np.issubdtype(lengths.dtype, np.integer)
    if lengths.shape != (batch_size,) or not integral:
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


def _prepare(heads: Any, lengths: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """Validated numpy ``heads [B, n]``, ``lengths [B]`` and the torch device of heads (or None)."""
    heads_np, device = _to_numpy(heads)
    lengths_np = None if lengths is None else _to_numpy(lengths)[0]
    return (*_check_heads(heads_np, lengths_np), device)


def _parents(heads: np.ndarray) -> np.ndarray:
    """``[batch_size, n + 1]`` 0-based parents of validated heads; ROOT is n, its own parent."""
    batch_size, n = heads.shape
    root = np.full((batch_size, 1), n, dtype=np.int64)
    return np.concatenate([np.where(heads > 0, heads - 1, n), root], axis=1)  # [B, n + 1]


def _climb(parent: np.ndarray, start: np.ndarray) -> Iterator[np.ndarray]:
    """Yields ``start`` and then its parents, grandparents, ... until every entry is ROOT.

    Args:
        parent: ``[batch_size, n + 1]`` from :func:`_parents`.
        start: ``[batch_size, k]`` 0-based words (or n for ROOT).

    Yields:
        ``[batch_size, k]`` int64 ancestors, one tree level per step (at most n + 1 steps).

    Raises:
        InputError: the heads contain a cycle (an entry is not ROOT after n steps).
    """
    batch_size, n = parent.shape[0], parent.shape[1] - 1
    parent_flat = parent.ravel()  # [B * (n + 1)]
    offsets = (np.arange(batch_size) * (n + 1))[:, None]  # [B, 1]
    cur = start
    for _ in range(n + 1):  # n steps lead every word of an acyclic tree to ROOT
        yield cur
        if (cur == n).all():
            return
        cur = parent_flat[cur + offsets]  # [B, k] one step up
    b, i = np.argwhere(cur != n)[0]
    where = f"sentence {b}: " if batch_size > 1 else ""
    raise InputError(f"{where}the heads contain a cycle: word {cur[b, i] + 1} (an ancestor of "
                     f"word {start[b, i] + 1}) never reaches ROOT")


def _ancestors(heads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ancestor matrices, depths and parents, one numpy step per tree level over the whole batch.

    Args:
        heads: ``[batch_size, n]`` validated 1-based heads, 0 = ROOT.

    Returns:
        ancestors ``[batch_size, n, n + 3]`` float32: ``[b, i, k] = 1`` if word k is i or an
        ancestor of i, column n (ROOT) is 1, the last two columns are 0 (room for
        :func:`_pair_form`); depth ``[batch_size, n]`` int64, the number of ancestors of i
        counting i itself and ROOT; parent ``[batch_size, n]`` int64, 0-based with n = ROOT.

    Raises:
        InputError: the heads contain a cycle.
    """
    batch_size, n = heads.shape
    parent = _parents(heads)  # [B, n + 1]
    ancestors = np.zeros((batch_size, n, n + 3), dtype=np.float32)  # [B, n, n words + ROOT + 2]
    row_start = np.arange(batch_size * n).reshape(batch_size, n) * (n + 3)  # [B, n]
    depth = np.ones((batch_size, n), dtype=np.int64)
    for cur in _climb(parent, np.broadcast_to(np.arange(n), (batch_size, n))):
        ancestors.reshape(-1)[row_start + cur] = 1.0  # the last step marks ROOT for every word
        depth += cur != n
    return ancestors, depth, parent[:, :n]


def _preorder(ancestors: np.ndarray, depth: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Rank of every word in a depth-first walk from ROOT that visits children left to right.

    For siblings s < i (positions) the whole subtree of s is walked before i, so a word j below s
    has ``rank[j] < rank[i]``: this decides L / R of the sibling rule without finding s. The rank
    is the number of ancestors plus the sizes of the subtrees of the left siblings of the word and
    of each of its ancestors.

    Args:
        ancestors, depth, parent: as returned by :func:`_ancestors`.

    Returns:
        ``[batch_size, n]`` int32 ranks, distinct within a sentence.
    """
    batch_size, n = parent.shape
    size = ancestors[:, :, :n].sum(axis=1)  # [B, n] words in each subtree
    order = np.argsort(parent * n + np.arange(n), axis=1)  # [B, n] siblings together, left first
    parent_sorted = np.take_along_axis(parent, order, axis=1)
    size_sorted = np.take_along_axis(size, order, axis=1)
    before = np.cumsum(size_sorted, axis=1) - size_sorted  # [B, n]
    first = np.ones((batch_size, n), dtype=bool)
    first[:, 1:] = parent_sorted[:, 1:] != parent_sorted[:, :-1]  # first child of each parent
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0), axis=1)  # [B, n]
    left_sizes = np.zeros((batch_size, n + 3), dtype=np.float32)  # [B, n + 3], 0 beyond words
    np.put_along_axis(left_sizes[:, :n], order, before - np.take_along_axis(before, start, axis=1),
                      axis=1)
    on_path = np.matmul(ancestors, left_sizes[:, :, None])[:, :, 0]  # [B, n] sum over ancestors
    return on_path.astype(np.int32) + depth.astype(np.int32)


LINEAR_FROM = 1024  # sentences this long or longer: common ancestors in O(n²), not by an O(n³) matmul


def _common_ancestors(ancestors: np.ndarray, depth: np.ndarray, parent: np.ndarray,
                      dtype: type = np.float64) -> np.ndarray:
    """``(A Aᵀ)[b, i, j]`` (common ancestors of i and j, ROOT included) in ``O(n²)`` per sentence.

    A word ``c`` shares with ``j`` its parent's common ancestors plus itself when it is an
    ancestor of ``j``: ``C[c, :] = C[parent(c), :] + A[:, c]`` (``C[ROOT, :] = 1``), so the rows
    are filled one tree level at a time, each from the level above.

    Args:
        ancestors, depth, parent: as returned by :func:`_ancestors` (``depth`` only for its shape:
            callers raise the padding's; the levels are read off ``ancestors``).
        dtype: of the result (float32 is exact below 2**24 words).

    Returns:
        ``[batch_size, n, n]`` exact integers.
    """
    batch_size, n = depth.shape
    out: np.ndarray = np.empty((batch_size, n, n), dtype=dtype)
    for b in range(batch_size):
        level_of = ancestors[b, :, :n + 1].sum(axis=1).astype(np.int64)  # [n] the tree's depths
        by_depth = np.argsort(level_of, kind="stable")  # [n] words, shallowest first
        ends = np.searchsorted(level_of[by_depth], np.arange(2, int(level_of.max(initial=1)) + 2))
        for level, (lo, hi) in enumerate(zip(ends[:-1], ends[1:]), start=2):  # depth 2: under ROOT
            words = by_depth[lo:hi]
            above = 1.0 if level == 2 else out[b, parent[b, words]]  # [m, n] or ROOT's row
            out[b, words] = above + ancestors[b][:, words].T  # [m, n]: + (c is an ancestor of j)
    return out


def _pair_form(ancestors: np.ndarray, depth: np.ndarray, up: int, down: int,
               parent: np.ndarray | None = None) -> np.ndarray:
    """``up * a + down * b`` for every pair (i, j) with one batched matmul (with ``parent`` and
    sentences of :data:`LINEAR_FROM` words or more: by :func:`_common_ancestors`, in ``O(n²)``).

    a = d_i - d_lca and b = d_j - d_lca, where d_lca = (A Aᵀ)[i, j] counts the common ancestors
    (ROOT included). ``up a + down b = up d_i + down d_j - (up + down) (A Aᵀ)[i, j]`` is the product
    of the rows ``[-(up + down) A_i, up d_i, 1]`` and ``[A_j, 1, down d_j]``.

    Args:
        ancestors: ``[batch_size, n, n + 3]`` from :func:`_ancestors`; its last two columns are
            overwritten.
        depth: ``[batch_size, n]`` depths (those of :func:`_ancestors`, or larger for padding).
        up, down: integer weights.
        parent: as returned by :func:`_ancestors` (optional: it enables the ``O(n²)`` path).

    Returns:
        ``[batch_size, n, n]`` float32 holding exact integers (float64 if float32 could not).
    """
    n = depth.shape[1]
    if parent is not None and n >= LINEAR_FROM:
        exact32 = (abs(up) + abs(down)) * (int(depth.max(initial=0)) + 1) < 2**24
        pairs = _common_ancestors(ancestors, depth, parent, np.float32 if exact32 else np.float64)
        pairs *= -(up + down)  # in place: [B, n, n] arrays are large here
        pairs += (up * depth)[:, :, None].astype(pairs.dtype)
        pairs += (down * depth)[:, None, :].astype(pairs.dtype)
        return pairs
    factor_j = ancestors  # [B, n, n + 3]
    if (abs(up) + abs(down)) * (int(depth.max(initial=0)) + 1) >= 2**24:  # beyond exact float32
        factor_j = ancestors.astype(np.float64)
    factor_j[:, :, n + 1], factor_j[:, :, n + 2] = 1.0, down * depth
    factor_i = factor_j * -(up + down)  # [B, n, n + 3]
    factor_i[:, :, n + 1], factor_i[:, :, n + 2] = up * depth, 1.0
    return np.matmul(factor_i, factor_j.transpose(0, 2, 1))  # [B, n, n]
