"""Compiled CPU kernels (numba) for :class:`synattn.structs.LinearChainCRF`.

They compute what the pure-PyTorch path of :mod:`synattn.structs.chain` computes, with the same
recursions, up to rounding:

- the forward recursion alone → ``log Z``; for chains given as unaries and one transition matrix
  each, read from the two factors without forming the transfer matrices, with one exponential per
  label and step instead of one per pair (:func:`_log_partition_factored`);
- log-space forward-backward → ``alpha``, ``beta``, node marginals ``exp(alpha + beta - log Z)``
  and edge marginals ``exp(alpha[i, p] + T[i, p, c] + beta[i+1, c] - log Z)`` (the gradient of
  ``log Z``);
- the backward of the node marginals (the Hessian of ``log Z`` times ``g = dL/dmu``) in its
  *expectation* form. The Jacobian of the marginals is the covariance of the part indicators, so
  with ``s(y) = Σ_i g[i, y_i]``,

      dL/dT[i, p, c] = Cov(1[y_i = p, y_{i+1} = c], s) = xi[i, p, c] (F[i, p] + R[i+1, c] - E[s])

  where ``xi`` are the pair marginals, ``F[i, p] = E[Σ_{j<=i} g[j, y_j] | y_i = p]`` and
  ``R[i, p] = E[Σ_{j>=i} g[j, y_j] | y_i = p]``, two recursions of forward-backward's shape whose
  weights are conditional probabilities ``xi / mu`` (in ``[0, 1]``, each row summing to 1).
  It is the same quantity as Kim et al. (2017)'s backpropagation through forward-backward in the signed
  log-space semifield (the PyTorch path of :class:`synattn.structs.chain.ChainMarginals`; the
  tests check that both agree), computed differently: in float64 every number here is a
  probability or a conditional expectation bounded by ``Σ |g|``, so no log-space or sign
  bookkeeping is needed, and it takes ``C²`` exponentials per position instead of about
  ``3 C² + 6 C`` exponentials and logarithms;
- the max semiring (Viterbi) with back-pointers → the best labelling (the first best on ties).

Loop structure: ``numba.prange`` over the chains of the batch (one chain per iteration, on as many
threads as PyTorch's intra-op pool); per chain, one scalar loop over its positions, up to its
length (the last valid position of ``mask``), with loops over the ``C`` labels inside. The
PyTorch path runs every chain to the padded length through identity transfer matrices, which
leaves all the numbers of the valid positions unchanged; its results at padded positions are
written here in closed form (0, or for gradients of the identity's diagonal, the gradient of the
last label's score). For ``C < 4`` the recursions of ``alpha`` and ``beta``, which do not depend
on each other, run in the same loop, which lets the CPU overlap their latencies; from ``C = 4`` on,
they share one exponential per transfer-matrix entry instead. Memory per chain is
``O(n C)``; all arithmetic is in float64, whatever the input dtype; impossible labels hold the
finite ``NEG``, never ``-inf``.

Layout: batch first, so that a chain is contiguous in memory: ``u0 [B, C]``,
``T [B, N-1, C, C]`` (``T[b, i, p, c]`` scores ``y_i = p → y_{i+1} = c`` with the unary score of
``y_{i+1} = c``; the transpose ``permute(3, 2, 0, 1)`` of the PyTorch path's ``[C, C, N-1, B]``),
``mask [B, N]``, ``alpha, beta [B, N, C]`` (float64, valid up to each chain's length). The
functions at the end take and return torch tensors in these layouts.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._numba_math import exp as _exp
from ..backend import as_array, set_threads

PARALLEL_WORK = 1 << 17
"""Batches with fewer ``chains × positions × labels²`` than this run on one thread: they take well
under a millisecond, less than waking (and, on a busy machine, waiting for) a second thread."""

SHARED_EXP_LABELS = 4
"""Label sets from this size share one exponential per transfer-matrix entry between the forward
and backward recursions (:func:`_alpha_beta_shared`); smaller ones use the plain log-space steps,
which need fewer exponentials there."""

SHARED_EXP_FLOOR = 1e-250
"""A shared-exponential sum below this is recomputed in log space: any term that underflowed is
then below ``1e-308``, a relative error of at most ``1e-58`` of the sums kept."""

_jit = numba.njit(cache=True, fastmath=False)
_parallel = numba.njit(cache=True, parallel=True, fastmath=False)


# ---------------------------------------------------------------------------------------------
# Scalar helpers.
# ---------------------------------------------------------------------------------------------

@_jit
def _length(mask, b):
    """Length of chain ``b``: one past its last valid position (at least 1)."""
    n = mask.shape[1]
    while n > 1 and not mask[b, n - 1]:
        n -= 1
    return n


@_jit
def _forward_step(prev, T, b, i, out):
    """``out[c] = LSE_p prev[p] + T[b, i, p, c]`` for every label ``c`` (alpha's recursion)."""
    C = out.shape[0]
    for c in range(C):
        best, m = 0, prev[0] + T[b, i, 0, c]
        for p in range(1, C):
            x = prev[p] + T[b, i, p, c]
            if x > m:
                best, m = p, x
        s = 0.0
        for p in range(C):
            if p != best:
                s += math.exp(prev[p] + T[b, i, p, c] - m)
        out[c] = m + math.log1p(s)


@_jit
def _backward_step(T, b, i, nxt, out):
    """``out[p] = LSE_c T[b, i, p, c] + nxt[c]`` for every label ``p`` (beta's recursion)."""
    C = out.shape[0]
    for p in range(C):
        best, m = 0, T[b, i, p, 0] + nxt[0]
        for c in range(1, C):
            x = T[b, i, p, c] + nxt[c]
            if x > m:
                best, m = c, x
        s = 0.0
        for c in range(C):
            if c != best:
                s += math.exp(T[b, i, p, c] + nxt[c] - m)
        out[p] = m + math.log1p(s)


@_jit
def _lse(x):
    """``LSE_c x[c]``."""
    m = x[0]
    for c in range(1, x.shape[0]):
        m = max(m, x[c])
    s = 0.0
    for c in range(x.shape[0]):
        s += math.exp(x[c] - m)
    return m + math.log(s)


@_jit
def _alpha_beta(u0, T, b, n, alpha, beta):
    """Forward and backward log-vectors of chain ``b`` up to its length ``n``; returns ``log Z``."""
    C = u0.shape[1]
    if C >= SHARED_EXP_LABELS:
        return _alpha_beta_shared(u0, T, b, n, alpha, beta)
    for c in range(C):
        alpha[b, 0, c] = u0[b, c]
        beta[b, n - 1, c] = 0.0
    for k in range(1, n):  # the two recursions are independent: one loop, overlapping latencies
        _forward_step(alpha[b, k - 1], T, b, k - 1, alpha[b, k])
        _backward_step(T, b, n - 1 - k, beta[b, n - k], beta[b, n - 1 - k])
    return _lse(alpha[b, n - 1])


@_jit
def _alpha_beta_shared(u0, T, b, n, alpha, beta):
    """:func:`_alpha_beta` with one exponential per transfer-matrix entry, shared by both passes.

    Each step's ``E = exp(T[i] - max T[i])`` is computed once; a step of either recursion is then
    ``m + max T[i] + log Σ exp(v - m) E`` over the previous vector ``v`` (``m = max v``): ``C``
    exponentials and ``C`` logarithms instead of ``C²``. Where such a sum falls below
    :data:`SHARED_EXP_FLOOR` (its largest term may have underflowed), that entry is recomputed
    term by term in log space, so the result never loses relative accuracy.
    """
    C = u0.shape[1]
    E, top = np.empty((max(n - 1, 1), C, C)), np.empty(max(n - 1, 1))
    v, s = np.empty(C), np.empty(C)
    for i in range(n - 1):  # (in float64: a float32 exp would underflow below e^-87)
        m = np.float64(T[b, i, 0, 0])
        for p in range(C):
            for c in range(C):
                m = max(m, np.float64(T[b, i, p, c]))
        top[i] = m
        for p in range(C):
            for c in range(C):
                E[i, p, c] = math.exp(np.float64(T[b, i, p, c]) - m)
    for c in range(C):
        alpha[b, 0, c] = u0[b, c]
        beta[b, n - 1, c] = 0.0
    for i in range(n - 1):  # alpha[i+1, c] = LSE_p alpha[i, p] + T[i, p, c]
        m = _exp_shifted(alpha[b, i], v)
        s[:] = 0.0
        for p in range(C):
            for c in range(C):
                s[c] += v[p] * E[i, p, c]
        for c in range(C):
            if s[c] > SHARED_EXP_FLOOR:
                alpha[b, i + 1, c] = m + top[i] + math.log(s[c])
        if s.min() <= SHARED_EXP_FLOOR:
            _forward_step(alpha[b, i], T, b, i, v)
            for c in range(C):
                if s[c] <= SHARED_EXP_FLOOR:
                    alpha[b, i + 1, c] = v[c]
    for i in range(n - 2, -1, -1):  # beta[i, p] = LSE_c T[i, p, c] + beta[i+1, c]
        m = _exp_shifted(beta[b, i + 1], v)
        for p in range(C):
            total = 0.0
            for c in range(C):
                total += E[i, p, c] * v[c]
            s[p] = total
            if total > SHARED_EXP_FLOOR:
                beta[b, i, p] = m + top[i] + math.log(total)
        if s.min() <= SHARED_EXP_FLOOR:
            _backward_step(T, b, i, beta[b, i + 1], v)
            for p in range(C):
                if s[p] <= SHARED_EXP_FLOOR:
                    beta[b, i, p] = v[p]
    return _lse(alpha[b, n - 1])


@_jit
def _exp_shifted(x, out):
    """``out = exp(x - max x)``; returns ``max x``."""
    m = x[0]
    for c in range(1, x.shape[0]):
        m = max(m, x[c])
    for c in range(x.shape[0]):
        out[c] = math.exp(x[c] - m)
    return m


# ---------------------------------------------------------------------------------------------
# Kernels: one chain per prange iteration.
# ---------------------------------------------------------------------------------------------

@_parallel
def _log_partition(u0, T, mask, log_z):
    """The forward recursion, each step ``alpha'[c] = top[c] + log Σ_p exp(w[p, c] - top[c])``
    with ``w[p, c] = alpha[p] + T[i, p, c]`` and ``top[c] = max_p w[p, c]`` (so every sum is at
    least 1): the ``C²`` exponentials of a step over contiguous rows, which the compiler
    vectorises with :func:`~synattn.structs._numba_math.exp` (2-3x :func:`_forward_step`'s
    one ``math.exp`` at a time from ``C = 8``)."""
    B, C = u0.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        alpha, top, s, w = u0[b].astype(np.float64), np.empty(C), np.empty(C), np.empty((C, C))
        for i in range(n - 1):
            for c in range(C):
                top[c] = alpha[0] + np.float64(T[b, i, 0, c])
            for p in range(C):
                a = alpha[p]
                for c in range(C):
                    x = a + np.float64(T[b, i, p, c])
                    w[p, c] = x
                    top[c] = max(top[c], x)
            s[:] = 0.0
            for p in range(C):
                for c in range(C):
                    s[c] += _exp(w[p, c] - top[c])
            for c in range(C):
                alpha[c] = top[c] + math.log(s[c])
        log_z[b] = _lse(alpha)


@_parallel
def _log_partition_factored(unary, trans, mask, log_z):
    """:func:`_log_partition` for transfer matrices ``T[b, i, p, c] = trans[b, p, c] +
    unary[b, i+1, c]`` read from their two factors, never formed: with ``E = exp(trans - top)``
    (``top[c] = max_p trans[b, p, c]``, ``C²`` exponentials per chain) a step is
    ``alpha'[c] = unary[i+1, c] + m + top[c] + log Σ_p exp(alpha[p] - m) E[p, c]``
    (``m = max alpha``): ``C`` exponentials and ``C`` logarithms. A sum below
    :data:`SHARED_EXP_FLOOR` (its largest term may have underflowed) is recomputed term by term in
    log space, as in :func:`_alpha_beta_shared`."""
    B, N, C = unary.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        E, top = np.empty((C, C)), np.empty(C)
        alpha, new, v, s = unary[b, 0].astype(np.float64), np.empty(C), np.empty(C), np.empty(C)
        for c in range(C):
            top[c] = trans[b, 0, c]
        for p in range(1, C):
            for c in range(C):
                top[c] = max(top[c], np.float64(trans[b, p, c]))
        for p in range(C):
            for c in range(C):
                E[p, c] = math.exp(np.float64(trans[b, p, c]) - top[c])
        for i in range(1, n):
            m = alpha.max()
            for p in range(C):
                v[p] = _exp(alpha[p] - m)
            s[:] = 0.0
            for p in range(C):
                vp = v[p]
                for c in range(C):
                    s[c] += vp * E[p, c]
            for c in range(C):
                if s[c] > SHARED_EXP_FLOOR:
                    new[c] = m + top[c] + math.log(s[c])
                else:
                    new[c] = alpha[0] + np.float64(trans[b, 0, c])
                    for p in range(1, C):
                        new[c] = max(new[c], alpha[p] + np.float64(trans[b, p, c]))
                    total = 0.0
                    for p in range(C):
                        total += math.exp(alpha[p] + np.float64(trans[b, p, c]) - new[c])
                    new[c] += math.log(total)
            for c in range(C):
                alpha[c] = new[c] + np.float64(unary[b, i, c])
        log_z[b] = _lse(alpha)


@_parallel
def _marginals(u0, T, mask, alpha, beta, log_z, mu):
    B, N, C = mu.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        z = _alpha_beta(u0, T, b, n, alpha, beta)
        log_z[b] = z
        for i in range(N):
            valid = i < n and mask[b, i]
            for c in range(C):
                mu[b, i, c] = math.exp(alpha[b, i, c] + beta[b, i, c] - z) if valid else 0.0


@_parallel
def _viterbi(u0, T, mask, score, labels):
    B, C = u0.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        delta, new = np.empty(C), np.empty(C)
        back = np.empty((n, C), np.int64)
        for c in range(C):
            delta[c] = u0[b, c]
        for i in range(1, n):
            for c in range(C):
                arg, best = 0, delta[0] + T[b, i - 1, 0, c]
                for p in range(1, C):
                    x = delta[p] + T[b, i - 1, p, c]
                    if x > best:
                        arg, best = p, x
                new[c], back[i, c] = best, arg
            delta[:] = new
        _backtrack(delta, back, b, n, score, labels)


@_jit
def _backtrack(delta, back, b, n, score, labels):
    """Chain ``b``'s best final label (the first on ties), its score and the labels read back
    through ``back [n, C]`` (``-1`` past ``n``)."""
    last = 0
    for c in range(1, delta.shape[0]):
        if delta[c] > delta[last]:
            last = c
    score[b] = delta[last]
    labels[b, n - 1] = last
    for i in range(n - 1, 0, -1):
        labels[b, i - 1] = back[i, labels[b, i]]
    labels[b, n:] = -1


# ---------------------------------------------------------------------------------------------
# Torch-facing calls (batch-first tensors; outputs in the dtype of T).
# ---------------------------------------------------------------------------------------------

def _threads(T: np.ndarray) -> None:
    """Threads for a kernel over transfer matrices ``T [B, N-1, C, C]`` (see PARALLEL_WORK)."""
    set_threads(T.size, PARALLEL_WORK)


def log_partition(u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` log-partition of ``u0 [B, C]``, ``T [B, N-1, C, C]``, ``mask [B, N]``."""
    t = as_array(T)
    log_z = np.empty(t.shape[0], t.dtype)
    _threads(t)
    _log_partition(as_array(u0), t, as_array(mask), log_z)
    return torch.from_numpy(log_z)


def log_partition_factored(unary: torch.Tensor, trans: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` log-partition of the chains of ``unary [B, N, C]`` and ``trans [B, C, C]`` (the
    transfer matrices ``trans[b] + unary[b, i+1]`` of every position, not formed), ``mask [B, N]``;
    the dtype of ``unary``."""
    u = as_array(unary)
    log_z = np.empty(u.shape[0], u.dtype)
    set_threads(u.size * u.shape[-1], PARALLEL_WORK)
    _log_partition_factored(u, as_array(trans), as_array(mask), log_z)
    return torch.from_numpy(log_z)


def marginals(u0: torch.Tensor, T: torch.Tensor,
              mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Node marginals ``mu [B, N, C]`` (0 where ``mask`` is False) and, in float64,
    ``alpha, beta [B, N, C]`` and ``log_z [B]`` for :func:`marginals_backward`."""
    t = as_array(T)
    B, N, C = mask.shape[0], mask.shape[1], t.shape[-1]
    alpha, beta, log_z = np.empty((B, N, C)), np.empty((B, N, C)), np.empty(B)
    mu = np.empty((B, N, C), t.dtype)
    _threads(t)
    _marginals(as_array(u0), t, as_array(mask), alpha, beta, log_z, mu)
    return torch.from_numpy(mu), torch.from_numpy(alpha), torch.from_numpy(beta), torch.from_numpy(log_z)


def viterbi(u0: torch.Tensor, T: torch.Tensor,
            mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best scores ``[B]`` and labellings ``[B, N]`` (``-1`` past each length)."""
    t = as_array(T)
    score, labels = np.empty(t.shape[0], t.dtype), np.empty(mask.shape, np.int64)
    _threads(t)
    _viterbi(as_array(u0), t, as_array(mask), score, labels)
    return torch.from_numpy(score), torch.from_numpy(labels)
