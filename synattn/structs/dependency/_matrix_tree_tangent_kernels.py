"""Compiled CPU kernels (numba) of the Matrix-Tree theorem: the backward of the marginals.

``H v``, the Hessian of ``log Z`` times a direction ``v`` of the scores, which (``H`` being
symmetric) is the backward of the arc marginals, per sentence, in two ways:

- :func:`gth_tangent`: the forward-mode derivative of the GTH elimination of
  :mod:`synattn.structs.dependency._matrix_tree_kernels` and of its adjoint, written out (same
  work matrices, same order of elimination);
- :func:`closed_form_tangent`: ``H v = v * mu - w * K(X P X)`` from the inverses ``X`` of Koo's
  matrices that the forward kept, two ``n × n`` matrix products per sentence (in the kernel, or
  for long sentences by the caller with batched BLAS between :func:`closed_form_inputs` and
  :func:`closed_form_finish`); a sentence whose result fails a column-sum check is recomputed by
  the forward-mode kernel.

Same loop structure as the forward kernels (whole sentences spread over threads by
:func:`~synattn.structs.dependency._matrix_tree_kernels._balance`, ``O(n^3)`` loops as
vectorisable row updates); all arithmetic is float64 whatever the input dtype.
"""

from __future__ import annotations

import numba
import numpy as np

from ..constants import TINY
from ._matrix_tree_kernels import _axpy, _balance, _dot, _head, _load, _steps, _word


@numba.njit(cache=True, fastmath=False, inline="always")
def _axpy2(Y, y, a, X, x, b, Z, z, start, stop):
    """``Y[y, j] += a X[x, j] + b Z[z, j]`` for ``start <= j < stop``."""
    for offset in range(stop - start):
        j = numba.uint64(start + offset)
        Y[y, j] += a * X[x, j] + b * Z[z, j]


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
def _inputs(scores, direction, b, n, multiroot, W, P):
    """Sentence ``b``'s column-scaled weights ``W [n+1, n]`` (the layout of
    :func:`~synattn.structs.dependency._matrix_tree_kernels._load`) and Koo's matrix ``P [n, n]``
    (zero-initialised) of the weights ``v * w``; returns the direction's largest absolute entry
    on a usable arc."""
    _load(scores, b, n, multiroot, W, np.empty(n))
    largest = 0.0
    for i in range(n + 1):
        h = _head(i, n, multiroot)
        for c in range(n):
            d = _word(c, n, multiroot)
            if h != d:
                v = np.float64(direction[b, h, d])
                largest = max(largest, abs(v))
                _koo_add(P, h, d, v * W[i, c], multiroot)
    return largest


@numba.njit(cache=True, fastmath=False)
def _closed_form_from(direction, b, n, multiroot, W, X, Y, largest, out, residual):
    """Sentence ``b``'s ``H v = v * mu - w * K(Y)``, ``Y = X P X`` (see
    :func:`synattn.structs.dependency.matrix_tree_gth._compiled_closed_form_tangent`) into ``out[b]``;
    returns False when a column of the result does not sum to 0 within ``residual`` times the
    direction's largest entry, or a column of the marginals ``w * K(X)`` not to 1 within
    ``residual`` (then ``out[b]`` is left for the caller to overwrite)."""
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
    """:func:`gth_tangent` from the inverses of Koo's matrices that the forward kept: two
    ``n × n`` matrix products per sentence instead of the forward-mode elimination, which
    recomputes a sentence whose result fails the column-sum check (``residual``).

    Args:
        scores, direction, lengths, multiroot, out, parts: as :func:`gth_tangent`.
        inverse: ``[B, L-1, L-1]`` float64, the inverses (sentence ``b`` in its first ``n`` rows
            and columns).
        residual: the check's tolerance, a fraction of the direction's largest entry.
    """
    order, starts = _balance(lengths, parts)
    for t in numba.prange(starts.shape[0] - 1):  # one group of sentences per thread
        for q in range(starts[t], starts[t + 1]):
            b = order[q]
            n = lengths[b]
            W = np.empty((n + 1, n))
            P = np.zeros((n, n))
            largest = _inputs(scores, direction, b, n, multiroot, W, P)
            T = np.empty((n, n))
            Y = np.empty((n, n))
            X = inverse[b]
            _matmul(X, P, T, n)
            _matmul(T, X, Y, n)
            if not _closed_form_from(direction, b, n, multiroot, W, X, Y, largest, out, residual):
                _tangent(scores, direction, b, n, multiroot, out)


@numba.njit(cache=True, parallel=True, fastmath=False)
def closed_form_inputs(scores, direction, lengths, multiroot, W, P, largest):
    """The first half of :func:`closed_form_tangent` for long sentences, whose two matrix
    products the caller batches with BLAS: per sentence ``b`` the weights ``W[b, :n+1, :n]``,
    Koo's matrix ``P[b]`` of the weights ``v * w`` (zero-initialised ``[B, N, N]``) and
    ``largest[b]`` (:func:`_inputs`)."""
    for b in numba.prange(scores.shape[0]):
        n = lengths[b]
        largest[b] = _inputs(scores, direction, b, n, multiroot, W[b, :n + 1, :n], P[b])


@numba.njit(cache=True, parallel=True, fastmath=False)
def closed_form_finish(scores, direction, lengths, multiroot, W, inverse, Y, largest, out, residual, parts):
    """The second half: :func:`closed_form_tangent`'s result from ``Y = X P X`` [B, N, N] and the
    outputs of :func:`closed_form_inputs`, recomputing by the forward-mode elimination a sentence
    that fails the column-sum check."""
    order, starts = _balance(lengths, parts)
    for t in numba.prange(starts.shape[0] - 1):  # one group of sentences per thread
        for q in range(starts[t], starts[t + 1]):
            b = order[q]
            n = lengths[b]
            if not _closed_form_from(direction, b, n, multiroot, W[b], inverse[b], Y[b], largest[b], out,
                                     residual):
                _tangent(scores, direction, b, n, multiroot, out)
