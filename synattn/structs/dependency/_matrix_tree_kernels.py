"""Compiled CPU kernels (numba) of the Matrix-Tree theorem: GTH elimination and its adjoint.

The kernels compute, per sentence, what the pure-PyTorch GTH code of
:mod:`synattn.structs.dependency.matrix_tree` computes for the whole batch (same formulas, same column
shifts, same order of elimination), so the two paths agree to float64 rounding.
:func:`gth_forward` gives ``log Z`` by Grassmann-Taksar-Heyman elimination of Koo et al.'s
(2007) matrix, whose pivots are sums of non-negative terms, and optionally the arc marginals
``d log Z / d s`` by the adjoint of the elimination, written out, and the inverse of Koo's
matrix, which that adjoint determines entry by entry (:func:`_inverse`). The backward of the
marginals (the Hessian-vector product ``H v`` of ``log Z``) is in
:mod:`synattn.structs.dependency._matrix_tree_tangent_kernels`, which shares this module's helpers.

Loop structure: ``numba.prange`` over the threads, each taking a group of whole sentences of
about equal total work (``Σ n^3``; ragged batches would leave a thread idle under numba's static
split of the batch); inside, plain loops over the sentence's own length (padding costs nothing)
on ``[n+1, n]`` float64 work matrices: ``O(n^2)`` memory and ``O(n^3)`` time per sentence. The
work matrix has rows ``words…, ROOT`` and columns ``words`` in the elimination order of
``matrix_tree._weights`` (single root: words ``2..n`` then word 1, whose row plays ROOT while the
ROOT row is carried along as Koo's replaced row). Every ``O(n^3)`` loop is an update ``y += a x``
of a contiguous row, which LLVM vectorises without reassociating sums: the adjoint keeps
``G = d log Z / d M`` together with its transpose, so that both of its products (row vector
times ``G`` and ``G`` times column vector) run along rows. All arithmetic is float64 whatever
the input dtype.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .._numba_math import exp
from ..constants import NEG, SAFE_PIVOT, SAFE_SPREAD, TINY


@numba.njit(cache=True, fastmath=False)
def _word(c: int, n: int, multiroot: bool) -> int:
    """The word (1-based) of column ``c`` and of row ``c < n``; row ``n`` is ROOT (0)."""
    if multiroot:
        return c + 1
    return c + 2 if c < n - 1 else 1


@numba.njit(cache=True, fastmath=False)
def _head(i: int, n: int, multiroot: bool) -> int:
    """The head of row ``i``: a word, or ROOT (0) for the last row."""
    return _word(i, n, multiroot) if i < n else 0


@numba.njit(cache=True, fastmath=False)
def _exp_row(x, out):
    """``out[j] = exp(x[j])`` for ``x <= 0`` in a loop that LLVM vectorises.

    ``math.exp`` is a scalar library call per entry, the largest cost of the forward pass at
    ``n = 64``; :func:`synattn.structs._numba_math.exp` is not. Entries below ``EXP_MIN`` give 0
    (``exp`` would be subnormal: no weight next to the column's largest, which is 1).
    """
    for j in range(x.shape[0]):
        out[j] = exp(x[j])


@numba.njit(cache=True, fastmath=False)
def _load(scores, b, n, multiroot, W, shift):
    """``W [n+1, n] = exp(s[head(i), word(c)] - shift[c])``, 0 on self-loops, with ``shift[c]``
    the largest score into word ``c``; returns ``Σ_c shift[c]``."""
    shift[:] = NEG
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            if h != d:
                shift[c] = max(shift[c], np.float64(scores[b, h, d]))
    exponent = np.empty(n)
    wide = False
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            exponent[c] = np.float64(scores[b, h, d]) - shift[c] if h != d else NEG
            if h != d and scores[b, h, d] > NEG and exponent[c] < -SAFE_SPREAD:
                wide = True
        _exp_row(exponent, W[i])
    if wide:  # weights underflow next to their column's largest: NaN sends it to log space
        return np.nan
    total = 0.0
    for c in range(n):
        total += shift[c]
    return total


@numba.njit(cache=True, fastmath=False, inline="always")
def _axpy(Y, y, a, X, x, start, stop):
    """``Y[y, j] += a X[x, j]`` for ``start <= j < stop``.

    (Unsigned indices: numba's negative-index wraparound would stop LLVM from vectorising the
    loop; row views ``Y[y, start:stop]`` would cost two atomic reference counts per call.)
    """
    for offset in range(stop - start):
        j = numba.uint64(start + offset)
        Y[y, j] += a * X[x, j]


@numba.njit(cache=True, fastmath=False, inline="always")
def _dot(X, x, Y, y, start, stop):
    """``Σ_j X[x, j] Y[y, j]`` for ``start <= j < stop``."""
    total = 0.0
    for j in range(start, stop):
        total += X[x, j] * Y[y, j]
    return total


@numba.njit(cache=True, fastmath=False)
def _steps(n, multiroot):
    """Eliminated columns and the end of the rows that feed a pivot (single root: not ROOT)."""
    return (n, n + 1) if multiroot else (n - 1, n)


@numba.njit(cache=True, fastmath=False)
def _eliminate(M, pivots, n, multiroot):
    """GTH elimination of ``M [n+1, n]`` in place; fills ``pivots [n]``, returns ``Σ log pivot``.

    Afterwards column ``k`` below row ``k`` and row ``k`` right of column ``k`` (divided by the
    pivot) hold their values of step ``k``: what the adjoint needs.
    """
    steps, rows_end = _steps(n, multiroot)
    for k in range(steps):
        p = 0.0
        for i in range(k + 1, rows_end):
            p += M[i, k]
        p = max(p, TINY)
        pivots[k] = p
        for j in range(k + 1, n):
            M[k, j] /= p
        for i in range(k + 1, n + 1):  # Schur complement: spread the pivot row over its feeders
            _axpy(M, i, M[i, k], M, k, k + 1, n)
    if not multiroot:  # the replaced row's final entry
        pivots[n - 1] = max(M[n, n - 1], TINY)
    total = 0.0
    for k in range(n):
        total += math.log(pivots[k])
    return total


@numba.njit(cache=True, fastmath=False)
def _adjoint(M, pivots, G, GT, scratch, n, multiroot):
    """``G = d log Z / d W [n+1, n]`` (and ``GT`` its transpose) by walking the elimination of
    ``M`` backwards; ``scratch [2, n+1]``."""
    steps, rows_end = _steps(n, multiroot)
    G[:, :] = 0.0
    GT[:, :] = 0.0
    if not multiroot:
        G[n, n - 1] = GT[n - 1, n] = 1.0 / pivots[n - 1]
    for k in range(steps - 1, -1, -1):
        p = pivots[k]
        scratch[:, :] = 0.0  # rows: d log Z / d (row k right of k), ... / d (column k below k)
        for i in range(k + 1, n + 1):
            _axpy(scratch, 0, M[i, k], G, i, k + 1, n)
        for j in range(k + 1, n):
            _axpy(scratch, 1, M[k, j], GT, j, k + 1, n + 1)
        g_pivot = (1.0 - _dot(scratch, 0, M, k, k + 1, n)) / p
        for i in range(k + 1, n + 1):
            G[i, k] = GT[k, i] = scratch[1, i] + (g_pivot if i < rows_end else 0.0)
        for j in range(k + 1, n):
            G[k, j] = GT[j, k] = scratch[0, j] / p


@numba.njit(cache=True, fastmath=False)
def _balance(lengths, parts):
    """Sentences split into ``parts`` groups of about equal work (``n^3``), longest first, each
    to the least loaded group. Returns ``order [B]`` (grouped) and ``starts [parts+1]``."""
    batch = lengths.shape[0]
    load = np.zeros(parts)
    group = np.empty(batch, dtype=np.int64)
    for b in np.argsort(-lengths):
        group[b] = np.argmin(load)
        load[group[b]] += float(lengths[b]) ** 3
    order = np.argsort(group, kind="mergesort")
    starts = np.zeros(parts + 1, dtype=np.int64)
    for b in range(batch):
        starts[group[b] + 1] += 1
    return order, np.cumsum(starts)


@numba.njit(cache=True, fastmath=False)
def _inverse(G, n, multiroot, X):
    """``X [n, n]`` (0-based words) = the inverse of Koo's matrix of the column-scaled weights
    (:func:`synattn.structs.dependency.matrix_tree_gth._koo_matrix`), read off ``G = d log Z / d W``.

    ``d log det L / d w = <L^-T, d L / d w>``: multi-root, ``G[ROOT -> d] = X[d, d]`` and
    ``G[h -> d] = X[d, d] - X[d, h]``; single root (word 1's row replaced by the root weights),
    ``G[ROOT -> d] = X[d, 1]``, ``G[1 -> d] = X[d, d]``, ``G[h -> 1] = -X[1, h]`` and
    ``G[h -> d] = X[d, d] - X[d, h]`` otherwise. The first pass sets the entries given directly,
    the second the differences.
    """
    for second in range(2):
        for i in range(n + 1):
            h = _head(i, n, multiroot)
            for c in range(n):
                d = _word(c, n, multiroot)
                if h == d:
                    continue
                direct = h == 0 or (not multiroot and (h == 1 or d == 1))
                if direct and not second:
                    if h == 0:
                        X[d - 1, d - 1 if multiroot else 0] = G[i, c]
                    elif h == 1:
                        X[d - 1, d - 1] = G[i, c]
                    else:
                        X[0, h - 1] = -G[i, c]
                elif not direct and second:
                    X[d - 1, h - 1] = X[d - 1, d - 1] - G[i, c]


@numba.njit(cache=True, fastmath=False)
def _forward(scores, b, n, multiroot, need_marginals, marginals, inverse):
    """``log Z`` of sentence ``b``; if ``need_marginals``, its marginals in ``marginals[b]``, and
    if ``inverse`` is not empty, the inverse of Koo's matrix in ``inverse[b, :n, :n]``."""
    W = np.empty((n + 1, n))
    shift = np.empty(n)
    pivots = np.empty(n)
    total = _load(scores, b, n, multiroot, W, shift)
    if math.isnan(total):
        return np.nan
    M = W.copy()
    log_z = _eliminate(M, pivots, n, multiroot) + total
    if pivots.min() < SAFE_PIVOT:  # weights may have underflowed: flag for the log-space path
        return np.nan
    if need_marginals:
        G = np.empty((n + 1, n))
        GT = np.empty((n, n + 1))
        _adjoint(M, pivots, G, GT, np.empty((2, n + 1)), n, multiroot)
        if inverse.shape[0] > 0:
            _inverse(G, n, multiroot, inverse[b])
        for i in range(n + 1):
            h = _head(i, n, multiroot)
            for c in range(n):
                d = _word(c, n, multiroot)
                if h != d:
                    marginals[b, h, d] = G[i, c] * W[i, c]
    return log_z


@numba.njit(cache=True, parallel=True, fastmath=False)
def gth_forward(scores, lengths, multiroot, need_marginals, marginals, parts, inverse):
    """``log Z [B]`` (float64) and, if ``need_marginals``, the arc marginals (and the inverses of
    Koo's matrices).

    Args:
        scores: ``[B, L, L]`` float32/float64 arc scores ``s[b, h, d]`` (ROOT = 0).
        lengths: ``[B]`` int64 word counts in ``1..L-1``.
        multiroot: several root arcs allowed (else exactly one).
        need_marginals: also run the adjoint.
        marginals: ``[B, L, L]`` output, zero-initialised, the scores' dtype (unusable arcs are
            left untouched).
        parts: the number of threads (:func:`threads`).
        inverse: ``[B, L-1, L-1]`` float64 output, zero-initialised (sentence ``b`` in its first
            ``lengths[b]`` rows and columns), or ``[0, 0, 0]`` for none; needs ``need_marginals``.
    """
    log_z = np.empty(scores.shape[0])
    order, starts = _balance(lengths, parts)
    for t in numba.prange(starts.shape[0] - 1):  # one group of sentences per thread
        for q in range(starts[t], starts[t + 1]):
            b = order[q]
            log_z[b] = _forward(scores, b, lengths[b], multiroot, need_marginals, marginals, inverse)
    return log_z
