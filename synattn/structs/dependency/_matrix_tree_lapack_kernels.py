"""Compiled CPU kernels (numba) around LAPACK's LU for the Matrix-Tree theorem.

:mod:`synattn.structs.dependency.matrix_tree_lapack` factorises Koo et al.'s (2007) matrix with
LAPACK's blocked LU (``torch.linalg.lu_factor_ex``) and keeps a sentence only when the LU is
certified; these kernels do the work before and after the LAPACK calls in one pass each, for the
whole batch, instead of a dozen PyTorch operators:

- :func:`koo_load` builds the column-scaled matrix ``[B, N, N]`` (float64; padded words get
  identity rows and columns) from the raw scores, with the same column shifts and the same
  "wide column" flag as :func:`~synattn.structs.dependency._matrix_tree_kernels._load`;
- :func:`certify` reads ``log Z`` off the LU factors and checks them: ``info == 0``, a positive
  determinant, and every pivot at least ``CERTIFICATE`` times its column's largest entry;
- :func:`koo_marginals` computes Koo's closed-form marginals from the inverse ``X`` and checks
  them: every entry in ``[-1e-9, 1 + 1e-9]`` and every word's in-arcs summing to 1 within ``1e-9``.

The rules are those of the PyTorch version, :func:`~synattn.structs.dependency.matrix_tree_gth._lapack_inverse`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..constants import NEG, SAFE_SPREAD, TINY

CLAMP = -(SAFE_SPREAD + 1.0)
"""Exponents are clamped here before ``torch.exp``: near and below ``log`` of the smallest normal
number PyTorch's vectorised ``exp`` runs 10–300× slower (measured on [4, 161, 160]: 0.06 ms at -705,
2.3 ms at -708, 20 ms at -745). Nothing is lost: the usable, unmasked exponents of a sentence that
is kept are at least ``-SAFE_SPREAD`` (wider columns go to the log-space elimination), so
everything below is a self-loop, a masked arc or padding, whose weight is 0."""

FLOOR = math.exp(CLAMP) * (1.0 + 1e-9)
"""A weight at or below this (a clamped exponent's) counts as 0."""


@numba.njit(cache=True, parallel=True, fastmath=False)
def koo_exponents(scores, lengths, E, shifts):
    """``E[b, h, d-1] = max(s[b, h, d] - shift[d-1], CLAMP)`` (float64, rows ``h = 0..n``; the
    self-loops and everything past the sentence :data:`CLAMP`: weight 0) and ``shifts [B, N]`` the
    largest score into each word (``NEG`` if none is larger; 0 for padding). Returns ``[B]`` the
    summed shifts, NaN where a column is wide (a usable, unmasked in-arc more than
    ``SAFE_SPREAD`` below the column's largest: the sentence needs the log-space elimination).
    The exponential itself is left to ``torch.exp`` (vectorised wider than numba's loops)."""
    batch = scores.shape[0]
    total = np.empty(batch)
    for b in numba.prange(batch):
        n = lengths[b]
        top = shifts[b]
        low = np.full(n, np.inf)
        top[:n] = NEG
        for h in range(n + 1):
            for d in range(1, n + 1):
                x = np.float64(scores[b, h, d])
                if h != d:
                    top[d - 1] = max(top[d - 1], x)
                    if x > NEG:
                        low[d - 1] = min(low[d - 1], x)
        wide = False
        acc = 0.0
        for j in range(n):
            wide = wide or top[j] - low[j] > SAFE_SPREAD
            acc += top[j]
        top[n:] = 0.0
        for h in range(E.shape[1]):
            row = E[b, h]
            if h > n:
                row[:] = CLAMP
                continue
            for d in range(1, n + 1):
                row[d - 1] = max(np.float64(scores[b, h, d]) - top[d - 1], CLAMP)
            row[n:] = CLAMP
            if h >= 1:
                row[h - 1] = CLAMP
        total[b] = np.nan if wide else acc
    return total


@numba.njit(cache=True, parallel=True, fastmath=False)
def koo_load(W, lengths, multiroot, K, scale):
    """Fill ``K [B, N, N]`` with Koo's matrix of the column-scaled weights ``W [B, N+1, N]``
    (rows ROOT, words; columns words; ``exp`` of :func:`koo_exponents`, set to 0 here where at
    most ``FLOOR``) and ``scale [B, N]``
    with each column's largest absolute entry (for :func:`certify`).

    Multi-root: ``K[d, d] = r[d] + Σ_h A[h, d]``, ``K[h, d] = -A[h, d]``; single root: the same
    without ``r`` on the diagonal and with word 1's row replaced by ``r`` (0-based rows/columns
    are words ``1..N``); padded words get identity rows and columns. Row by row.
    """
    batch, N, _ = K.shape
    for b in numba.prange(batch):
        n = lengths[b]
        diagonal = np.zeros(n)
        top = scale[b]
        top[:] = 1.0  # (padding's identity)
        top[:n] = 0.0
        for h in range(n + 1):  # (clamped exponents: weights at the floor are 0)
            w = W[b, h]
            for j in range(n):
                w[j] = w[j] if w[j] > FLOOR else 0.0
        if multiroot:
            diagonal += W[b, 0, :n]
        for h in range(1, N + 1):
            row = K[b, h - 1]
            row[:] = 0.0
            if h > n:
                row[h - 1] = 1.0
                continue
            w = W[b, h]
            for j in range(n):
                diagonal[j] += w[j]
                row[j] = -w[j]
                top[j] = max(top[j], w[j])
        for j in range(n):
            K[b, j, j] = diagonal[j]
            top[j] = max(top[j], diagonal[j])
        if not multiroot:
            first = K[b, 0]
            for j in range(n):
                first[j] = W[b, 0, j]
            top[0] = 0.0  # column 1 lost its diagonal: its largest entry again
            for h in range(N):
                top[0] = max(top[0], abs(K[b, h, 0]))
            for j in range(1, n):
                top[j] = max(top[j], first[j])


@numba.njit(cache=True, parallel=True, fastmath=False)
def certify(scale, u, pivots, info, threshold, log_z):
    """``log_z[b] += Σ log |U_jj|`` and ``[B]`` True where the LU of ``K[b]`` (diagonal
    ``u [B, N]`` of ``U``) is certified: no error, a positive determinant (``K`` is a non-singular
    M-matrix or Koo's single-root matrix, both with positive determinants) and
    ``|U_jj| >= threshold · scale[b, j]``, ``scale`` the columns' largest absolute entries
    (:func:`koo_load`)."""
    batch, N = u.shape
    ok = np.empty(batch, dtype=np.bool_)
    for b in numba.prange(batch):
        good = info[b] == 0
        sign = 0
        total = 0.0
        for j in range(N):
            pivot = u[b, j]
            if pivot < 0:
                sign += 1
            if pivots[b, j] != j + 1:
                sign += 1
            if not abs(pivot) >= threshold * scale[b, j]:
                good = False
            total += math.log(max(abs(pivot), TINY))
        log_z[b] += total
        ok[b] = good and sign % 2 == 0
    return ok


@numba.njit(cache=True, parallel=True, fastmath=False)
def koo_marginals(W, lengths, multiroot, X, marginals, ok):
    """Koo's closed-form marginals ``[B, L, L]`` (written into zero-initialised ``marginals``, the
    scores' dtype) from the weights ``W`` of :func:`koo_load` and the inverses ``X [B, N, N]``;
    ``ok[b]`` is cleared where one falls outside ``[-1e-9, 1 + 1e-9]`` or a word's in-arcs do
    not sum to 1 within ``1e-9``.

    ``p(h -> d) = A[h, d] (X[d, d] - X[d, h])``, ``p(ROOT -> d) = r[d] X[d, d]``; single root:
    ``p(ROOT -> d) = r[d] X[d, 1]``, ``p(1 -> d) = A[1, d] X[d, d]``, ``p(h -> 1) = -A[h, 1] X[1, h]``.
    """
    batch = W.shape[0]
    for b in numba.prange(batch):
        if not ok[b]:
            continue
        n = lengths[b]
        x = X[b]
        out = marginals[b]
        total = np.zeros(n)
        for h in range(n + 1):
            w = W[b, h]
            for d in range(1, n + 1):
                if h == d:
                    continue
                if h == 0:
                    g = x[d - 1, d - 1] if multiroot else x[d - 1, 0]
                elif multiroot or (h != 1 and d != 1):
                    g = x[d - 1, d - 1] - x[d - 1, h - 1]
                elif h == 1:
                    g = x[d - 1, d - 1]
                else:  # d == 1, single root
                    g = -x[0, h - 1]
                p = w[d - 1] * g
                total[d - 1] += p
                out[h, d] = p
        good = True
        for h in range(n + 1):
            for d in range(1, n + 1):
                p = out[h, d]
                good = good and -1e-9 <= p <= 1.0 + 1e-9
        for j in range(n):
            good = good and abs(total[j] - 1.0) <= 1e-9
        ok[b] = good
