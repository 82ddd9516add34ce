"""Compiled CPU kernels (numba) for the derivatives of :class:`synattn.structs.LinearChainCRF`:
the backward of the node marginals in its expectation form and the edge marginals (the gradient
of ``log Z``). The recursions, loop structure and layouts are those of
:mod:`synattn.structs.chain._kernels`, which documents them.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..backend import as_array
from ._kernels import _alpha_beta, _jit, _length, _parallel, _threads


@_jit
def _pad_gradient(grad_u0, grad_T, b, n):
    """Gradient of the identity transfer matrices past the length: the diagonal's score adds to
    the last label's, so it gets the gradient of that score; off the diagonal, 0."""
    C = grad_u0.shape[1]
    for i in range(n - 1, grad_T.shape[1]):
        for p in range(C):
            for c in range(C):
                grad_T[b, i, p, c] = 0.0
        for c in range(C):
            if n == 1:
                grad_T[b, i, c, c] = grad_u0[b, c]
            else:
                for p in range(C):
                    grad_T[b, i, c, c] += grad_T[b, n - 2, p, c]


@_parallel
def _marginals_backward(T, mask, alpha, beta, log_z, g, grad_u0, grad_T):
    """The backward of :class:`ChainMarginals` as a covariance: conditional expectations of
    ``s(y) = Σ_i g[i, y_i]`` carried forward and backward (see the module docstring)."""
    B, N, C = g.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        z = log_z[b]
        xi = np.empty((max(n - 1, 1), C, C))
        mu, F, R = np.empty((n, C)), np.empty((n, C)), np.empty((n, C))
        for i in range(n - 1):  # pair marginals; node marginals as their sums (weights sum to 1)
            for p in range(C):
                for c in range(C):
                    xi[i, p, c] = math.exp(alpha[b, i, p] + T[b, i, p, c] + beta[b, i + 1, c] - z)
        if n == 1:
            for c in range(C):
                mu[0, c] = math.exp(alpha[b, 0, c] + beta[b, 0, c] - z)
        else:
            for p in range(C):
                mu[0, p] = 0.0
                for c in range(C):
                    mu[0, p] += xi[0, p, c]
        for i in range(n - 1):
            for c in range(C):
                mu[i + 1, c] = 0.0
            for p in range(C):
                for c in range(C):
                    mu[i + 1, c] += xi[i, p, c]
        # F[i, c] = E[Σ_{j<=i} g[j, y_j] | y_i = c], left to right
        for c in range(C):
            F[0, c] = g[b, 0, c]
        for i in range(n - 1):
            for c in range(C):
                total = 0.0
                for p in range(C):
                    total += xi[i, p, c] * F[i, p]
                F[i + 1, c] = g[b, i + 1, c] + (total / mu[i + 1, c] if mu[i + 1, c] > 0 else 0.0)
        # R[i, p] = E[Σ_{j>=i} g[j, y_j] | y_i = p], right to left
        for c in range(C):
            R[n - 1, c] = g[b, n - 1, c]
        for i in range(n - 2, -1, -1):
            for p in range(C):
                total = 0.0
                for c in range(C):
                    total += xi[i, p, c] * R[i + 1, c]
                R[i, p] = g[b, i, p] + (total / mu[i, p] if mu[i, p] > 0 else 0.0)
        mean = 0.0  # E[s]
        for c in range(C):
            mean += mu[n - 1, c] * F[n - 1, c]
        # d/dT[i, p, c] = Cov(1[y_i = p, y_{i+1} = c], s) = xi (F[i, p] + R[i+1, c] - E[s])
        for i in range(n - 1):
            for p in range(C):
                for c in range(C):
                    grad_T[b, i, p, c] = xi[i, p, c] * (F[i, p] + R[i + 1, c] - mean)
        for c in range(C):
            grad_u0[b, c] = mu[0, c] * (R[0, c] - mean)
        _pad_gradient(grad_u0, grad_T, b, n)


@_parallel
def _edge_marginals(u0, T, mask, weight, pad_diagonal, alpha, beta, node0, xi):
    """``weight[b] ×`` the edge marginals ``xi`` and first-node marginals ``node0``."""
    B, C = u0.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        z = _alpha_beta(u0, T, b, n, alpha, beta)
        w = weight[b]
        for c in range(C):
            node0[b, c] = w * math.exp(alpha[b, 0, c] + beta[b, 0, c] - z)
        for i in range(xi.shape[1]):
            valid = i < n - 1 and mask[b, i + 1]
            for p in range(C):
                for c in range(C):
                    xi[b, i, p, c] = (w * math.exp(alpha[b, i, p] + T[b, i, p, c] + beta[b, i + 1, c] - z)
                                      if valid else 0.0)
            if pad_diagonal and i >= n - 1:  # identity padding: y stays y_{n-1}
                for c in range(C):
                    xi[b, i, c, c] = w * math.exp(alpha[b, n - 1, c] - z)


# ---------------------------------------------------------------------------------------------
# Torch-facing calls (batch-first tensors; outputs in the dtype of T).
# ---------------------------------------------------------------------------------------------

def marginals_backward(T: torch.Tensor, mask: torch.Tensor, alpha: torch.Tensor,
                       beta: torch.Tensor, log_z: torch.Tensor,
                       g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients ``[B, C]`` of ``u0`` and ``[B, N-1, C, C]`` of ``T`` given ``g = dL/dmu``
    ``[B, N, C]`` (node marginals ``mu``; ``g`` is ignored where ``mask`` is False)."""
    t = as_array(T)
    grad_u0, grad_T = np.empty((t.shape[0], t.shape[-1]), t.dtype), np.empty_like(t)
    _threads(t)
    g = (g.double() * mask.unsqueeze(-1)).contiguous()
    _marginals_backward(t, as_array(mask), as_array(alpha), as_array(beta), as_array(log_z),
                        as_array(g), grad_u0, grad_T)
    return torch.from_numpy(grad_u0), torch.from_numpy(grad_T)


def edge_marginals(u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor,
                   pad_diagonal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight[b] ×`` first-node marginals ``[B, C]`` and edge marginals ``[B, N-1, C, C]``.

    Past a chain's length the edge marginals are 0, or with ``pad_diagonal`` those of the
    identity transfer matrices (the gradient of ``log Z`` with respect to them).
    """
    t = as_array(T)
    (B, N), C = mask.shape, t.shape[-1]
    alpha, beta = np.empty((B, N, C)), np.empty((B, N, C))
    node0, xi = np.empty((B, C), t.dtype), np.empty_like(t)
    _threads(t)
    _edge_marginals(as_array(u0), t, as_array(mask), as_array(weight.double()), pad_diagonal,
                    alpha, beta, node0, xi)
    return torch.from_numpy(node0), torch.from_numpy(xi)
