"""Compiled CPU kernels (numba) for :class:`synattn.structs.SemiMarkovCRF`: ``log Z`` by the
forward recursion over segment ends, and the segment marginals by forward-backward.

With ``edge[s, k, p, c]`` the score of a segment covering positions ``s+1..s+k`` labelled ``c``
after a predecessor labelled ``p`` (:func:`synattn.structs.reference.semi_markov_log_partition`):

    alpha[0, c] = init[c],  alpha[t, c] = LSE_{1<=k<K, k<=t, p} alpha[t-k, p] + edge[t-k, k, p, c]
    beta[L-1, p] = 0,       beta[s, p]  = LSE_{1<=k<K, s+k<=L-1, c} edge[s, k, p, c] + beta[s+k, c]
    mu[s, k, p, c] = exp(alpha[s, p] + edge[s, k, p, c] + beta[s+k, c] - log Z),
    log Z = LSE_c alpha[L-1, c]

One sequence per ``numba.prange`` iteration, float64 inside whatever the input dtype, ``O(n C)``
memory per sequence besides the marginals; entries of segments past a length are 0 in ``mu``.
Layout: ``edge [B, n-1, K, C, C]`` (batch first, contiguous), ``lengths [B]``.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from .._numba_math import exp
from ..backend import as_array, set_threads

PARALLEL_WORK = 1 << 17
"""Batches with fewer ``sequences × positions × K × C²`` than this run on one thread."""

_parallel = numba.njit(cache=True, parallel=True, fastmath=False)
_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _alpha(edge, L, init, alpha):
    """Fill ``alpha[:L]`` (``[n, C]``) of one sequence from position 0's scores ``init [C]``."""
    K, C = edge.shape[1], edge.shape[2]
    alpha[0, :] = init
    for t in range(1, L):
        kmax = min(K - 1, t)
        for c in range(C):
            m = -np.inf
            for k in range(1, kmax + 1):
                for p in range(C):
                    v = alpha[t - k, p] + edge[t - k, k, p, c]
                    if v > m:
                        m = v
            total = 0.0
            for k in range(1, kmax + 1):
                for p in range(C):
                    total += exp(alpha[t - k, p] + edge[t - k, k, p, c] - m)
            alpha[t, c] = m + np.log(total)


@_jit
def _lse_row(x):
    m = x.max()
    total = 0.0
    for v in x:
        total += exp(v - m)
    return m + np.log(total)


@_parallel
def _log_partition(edge, lengths, init, out):
    B, n = lengths.shape[0], edge.shape[1] + 1
    C = edge.shape[3]
    for b in numba.prange(B):
        alpha = np.empty((n, C))
        _alpha(edge[b], lengths[b], init[b], alpha)
        out[b] = _lse_row(alpha[lengths[b] - 1])


@_parallel
def _marginals(edge, lengths, init, grad, mu):
    B, n = lengths.shape[0], edge.shape[1] + 1
    K, C = edge.shape[2], edge.shape[3]
    for b in numba.prange(B):
        L = lengths[b]
        e = edge[b]
        alpha = np.empty((n, C))
        beta = np.empty((n, C))
        _alpha(e, L, init[b], alpha)
        log_z = _lse_row(alpha[L - 1])
        beta[L - 1, :] = 0.0
        for s in range(L - 2, -1, -1):
            kmax = min(K - 1, L - 1 - s)
            for p in range(C):
                m = -np.inf
                for k in range(1, kmax + 1):
                    for c in range(C):
                        v = e[s, k, p, c] + beta[s + k, c]
                        if v > m:
                            m = v
                total = 0.0
                for k in range(1, kmax + 1):
                    for c in range(C):
                        total += exp(e[s, k, p, c] + beta[s + k, c] - m)
                beta[s, p] = m + np.log(total)
        g = grad[b]
        for s in range(L - 1):
            kmax = min(K - 1, L - 1 - s)
            for k in range(1, kmax + 1):
                for p in range(C):
                    for c in range(C):
                        mu[b, s, k, p, c] = g * exp(alpha[s, p] + e[s, k, p, c]
                                                    + beta[s + k, c] - log_z)


def log_partition(edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor) -> torch.Tensor:
    """``[B]`` ``log Z`` (the input's dtype) of ``edge [B, n-1, K, C, C]`` with ``lengths [B]``
    and position 0's label scores ``init [B, C]``."""
    B = lengths.shape[0]
    out = np.empty(B)
    set_threads(edge.numel(), PARALLEL_WORK)
    _log_partition(as_array(edge.double()), as_array(lengths.long()), as_array(init.double()), out)
    return torch.from_numpy(out).to(edge.dtype)


def marginals(edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor,
              grad: torch.Tensor) -> torch.Tensor:
    """``grad[b] * mu`` ``[B, n-1, K, C, C]`` (the input's dtype), 0 for segments no structure
    of a sequence can use."""
    mu = np.zeros(tuple(edge.shape))
    set_threads(edge.numel(), PARALLEL_WORK)
    _marginals(as_array(edge.double()), as_array(lengths.long()), as_array(init.double()),
               as_array(grad.double()), mu)
    return torch.from_numpy(mu).to(edge.dtype)
