"""Compiled CPU kernels (numba) of the Matrix-Tree theorem: GTH elimination and its derivatives.

The kernels compute, per sentence, what the pure-PyTorch GTH code of
:mod:`synattn.structs.dependency.matrix_tree` computes for the whole batch (same formulas, same column
shifts, same order of elimination), so the two paths agree to float64 rounding:

- :func:`gth_forward`: ``log Z`` by Grassmann-Taksar-Heyman elimination of Koo et al.'s
  (2007) matrix, whose pivots are sums of non-negative terms, and optionally the arc marginals
  ``d log Z / d s`` by the adjoint of the elimination, written out, and the inverse of Koo's
  matrix, which that adjoint determines entry by entry (:func:`_inverse`);
- :func:`gth_tangent`: the forward-mode derivative of both in a direction ``v`` of the scores,
  i.e. the Hessian-vector product ``H v`` of ``log Z``, which (``H`` being symmetric) is the
  backward of the marginals.

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
def _axpy2(Y, y, a, X, x, b, Z, z, start, stop):
    """``Y[y, j] += a X[x, j] + b Z[z, j]`` for ``start <= j < stop``."""
    for offset in range(stop - start):
        j = numba.uint64(start + offset)
        Y[y, j] += a * X[x, j] + b * Z[z, j]


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


@numba.njit(cache=True, fastmath=False)
def _eliminate_tangent(M, dM, pivots, d_pivots, n, multiroot):
    """:func:`_eliminate` (without the log) carrying forward-mode tangents ``dM`` along."""
    steps, rows_end = _steps(n, multiroot)
    for k in range(steps):
        p = 0.0
        dp = 0.0
        for i in range(k + 1, rows_end):
            p += M[i, k]
            dp += dM[i, k]
        if p < TINY:  # the floor is a constant
            p, dp = TINY, 0.0
        pivots[k] = p
        d_pivots[k] = dp
        for j in range(k + 1, n):
            M[k, j] /= p
            dM[k, j] = (dM[k, j] - M[k, j] * dp) / p
        for i in range(k + 1, n + 1):
            _axpy2(dM, i, dM[i, k], M, k, M[i, k], dM, k, k + 1, n)
            _axpy(M, i, M[i, k], M, k, k + 1, n)
    if not multiroot:
        p = M[n, n - 1]
        dp = dM[n, n - 1]
        if p < TINY:
            p, dp = TINY, 0.0
        pivots[n - 1] = p
        d_pivots[n - 1] = dp


@numba.njit(cache=True, fastmath=False)
def _adjoint_tangent(M, dM, pivots, d_pivots, G, GT, dG, dGT, scratch, n, multiroot):
    """:func:`_adjoint` with forward-mode tangents: fills ``G``, ``dG`` and their transposes;
    ``scratch [4, n+1]``."""
    steps, rows_end = _steps(n, multiroot)
    G[:, :] = 0.0
    GT[:, :] = 0.0
    dG[:, :] = 0.0
    dGT[:, :] = 0.0
    if not multiroot:
        p = pivots[n - 1]
        G[n, n - 1] = GT[n - 1, n] = 1.0 / p
        dG[n, n - 1] = dGT[n - 1, n] = -d_pivots[n - 1] / (p * p)
    for k in range(steps - 1, -1, -1):
        p = pivots[k]
        dp = d_pivots[k]
        scratch[:, :] = 0.0  # rows: the adjoints of row k and column k as in _adjoint, tangents
        for i in range(k + 1, n + 1):
            a = M[i, k]
            _axpy(scratch, 0, a, G, i, k + 1, n)
            _axpy2(scratch, 2, dM[i, k], G, i, a, dG, i, k + 1, n)
        for j in range(k + 1, n):
            a = M[k, j]
            _axpy(scratch, 1, a, GT, j, k + 1, n + 1)
            _axpy2(scratch, 3, dM[k, j], GT, j, a, dGT, j, k + 1, n + 1)
        g_pivot = (1.0 - _dot(scratch, 0, M, k, k + 1, n)) / p
        dg_pivot = (-(_dot(scratch, 2, M, k, k + 1, n) + _dot(scratch, 0, dM, k, k + 1, n))
                    - g_pivot * dp) / p
        for i in range(k + 1, n + 1):
            fed = i < rows_end
            G[i, k] = GT[k, i] = scratch[1, i] + (g_pivot if fed else 0.0)
            dG[i, k] = dGT[k, i] = scratch[3, i] + (dg_pivot if fed else 0.0)
        for j in range(k + 1, n):
            g = scratch[0, j] / p
            G[k, j] = GT[j, k] = g
            dG[k, j] = dGT[j, k] = (scratch[2, j] - g * dp) / p


@numba.njit(cache=True, fastmath=False)
def _tangent(scores, direction, b, n, multiroot, out):
    """The derivative of sentence ``b``'s marginals in ``direction``, into ``out[b]``."""
    W = np.empty((n + 1, n))
    scratch = np.empty((4, n + 1))
    _load(scores, b, n, multiroot, W, scratch[0])
    dW = np.empty((n + 1, n))
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            dW[i, c] = W[i, c] * np.float64(direction[b, h, d]) if h != d else 0.0
    M = W.copy()
    dM = dW.copy()
    pivots = np.empty(n)
    d_pivots = np.empty(n)
    _eliminate_tangent(M, dM, pivots, d_pivots, n, multiroot)
    G = np.empty((n + 1, n))
    GT = np.empty((n, n + 1))
    dG = np.empty((n + 1, n))
    dGT = np.empty((n, n + 1))
    _adjoint_tangent(M, dM, pivots, d_pivots, G, GT, dG, dGT, scratch, n, multiroot)
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            if h != d:
                out[b, h, d] = dG[i, c] * W[i, c] + G[i, c] * dW[i, c]


@numba.njit(cache=True, parallel=True, fastmath=False)
def gth_tangent(scores, direction, lengths, multiroot, out, parts):
    """The derivative of the arc marginals in ``direction``: ``H v`` for ``H`` the Hessian of
    ``log Z``.

    Args:
        scores: ``[B, L, L]`` float32/float64 arc scores.
        direction: ``[B, L, L]`` the tangent ``v`` of the scores (the scores' dtype).
        lengths: ``[B]`` int64 word counts.
        multiroot: several root arcs allowed.
        out: ``[B, L, L]`` output, zero-initialised, the scores' dtype (unusable arcs are left
            untouched).
        parts: the number of threads (:func:`threads`).
    """
    order, starts = _balance(lengths, parts)
    for t in numba.prange(starts.shape[0] - 1):  # one group of sentences per thread
        for q in range(starts[t], starts[t + 1]):
            b = order[q]
            _tangent(scores, direction, b, lengths[b], multiroot, out)


@numba.njit(cache=True, fastmath=False)
def _koo_add(P, h, d, v, multiroot):
    """Adds weight ``v`` of arc ``h -> d`` (1-based, ROOT = 0) to Koo's matrix ``P`` (0-based
    words; single root: word 1's row replaced by the root weights)."""
    if h == 0:
        P[0 if not multiroot else d - 1, d - 1] += v
        return
    if multiroot or d != 1:
        P[d - 1, d - 1] += v
    if multiroot or h != 1:
        P[h - 1, d - 1] -= v


@numba.njit(cache=True, fastmath=False)
def _koo_grad(X, h, d, multiroot):
    """``d log det L / d w[h -> d]`` read off ``X`` (the contraction of
    :func:`synattn.structs.dependency.matrix_tree_gth._koo_gradient`)."""
    if h == 0:
        return X[d - 1, d - 1] if multiroot else X[d - 1, 0]
    diag = X[d - 1, d - 1] if (multiroot or d != 1) else 0.0
    return diag - (X[d - 1, h - 1] if (multiroot or h != 1) else 0.0)


@numba.njit(cache=True, fastmath=False)
def _matmul(A, B, C, n):
    """``C[:n, :n] = A[:n, :n] @ B[:n, :n]`` by row updates, four rows of ``C`` per pass over a
    row of ``B`` (vectorised along the rows; each entry sums over ``k`` in order)."""
    C[:n, :n] = 0.0
    i = 0
    while i + 4 <= n:
        for k in range(n):
            a0, a1, a2, a3 = A[i, k], A[i + 1, k], A[i + 2, k], A[i + 3, k]
            for offset in range(n):
                j = numba.uint64(offset)
                b = B[k, j]
                C[i, j] += a0 * b
                C[i + 1, j] += a1 * b
                C[i + 2, j] += a2 * b
                C[i + 3, j] += a3 * b
        i += 4
    while i < n:
        for k in range(n):
            _axpy(C, i, A[i, k], B, k, 0, n)
        i += 1


@numba.njit(cache=True, fastmath=False)
def _closed_form(scores, direction, b, n, multiroot, X, out, residual):
    """Sentence ``b``'s ``H v = v * mu - w * K(X P X)`` with ``P = L(v * w)`` (see
    :func:`synattn.structs.dependency.matrix_tree_gth._compiled_closed_form_tangent`) into ``out[b]``;
    returns False when a column of the result does not sum to 0 within ``residual`` times the
    direction's largest entry, or a column of the marginals ``w * K(X)`` not to 1 within
    ``residual`` (then ``out[b]`` is left for the caller to overwrite)."""
    W = np.empty((n + 1, n))
    shift = np.empty(n)
    _load(scores, b, n, multiroot, W, shift)
    P = np.zeros((n, n))
    largest = 0.0
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            if h != d:
                v = np.float64(direction[b, h, d])
                largest = max(largest, abs(v))
                _koo_add(P, h, d, v * W[i, c], multiroot)
    T = np.empty((n, n))
    Y = np.empty((n, n))
    _matmul(X, P, T, n)
    _matmul(T, X, Y, n)
    sums = np.zeros(n)  # of each column of the result: 0
    ones = np.zeros(n)  # of each column of the marginals from X: 1
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            if h != d:
                mu = W[i, c] * _koo_grad(X, h, d, multiroot)
                hv = np.float64(direction[b, h, d]) * mu - W[i, c] * _koo_grad(Y, h, d, multiroot)
                out[b, h, d] = hv
                sums[d - 1] += hv
                ones[d - 1] += mu
    for d in range(n):
        if not (abs(sums[d]) <= residual * max(largest, TINY) and abs(ones[d] - 1.0) <= residual):
            return False
    return True


@numba.njit(cache=True, parallel=True, fastmath=False)
def closed_form_tangent(scores, direction, lengths, multiroot, inverse, out, residual, parts):
    """:func:`gth_tangent` from the inverses of Koo's matrices that :func:`gth_forward` gave:
    two ``n × n`` matrix products per sentence instead of the forward-mode elimination, which
    recomputes a sentence whose result fails the column-sum check (``residual``).

    Args:
        scores, direction, lengths, multiroot, out, parts: as :func:`gth_tangent`.
        inverse: ``[B, L-1, L-1]`` float64, the ``inverse`` output of :func:`gth_forward`.
        residual: the check's tolerance, a fraction of the direction's largest entry.
    """
    order, starts = _balance(lengths, parts)
    for t in numba.prange(starts.shape[0] - 1):  # one group of sentences per thread
        for q in range(starts[t], starts[t + 1]):
            b = order[q]
            if not _closed_form(scores, direction, b, lengths[b], multiroot, inverse[b], out,
                                residual):
                _tangent(scores, direction, b, lengths[b], multiroot, out)
