"""Compiled CPU Viterbi (numba) for :class:`synattn.structs.LinearChainCRF` chains given as unaries
and one transition matrix per chain, read from the two factors without forming the transfer
matrices.

:func:`_viterbi_factored` is :func:`synattn.structs.chain._kernels._viterbi` over
``T[b, i-1, p, c] = trans[b, p, c] + unary[b, i, c]``, each such entry computed where it is used,
in the dtype of the inputs (the rounding of the PyTorch sum the transfer matrices hold) and then
added to the float64 best scores, as there: the same scores, back-pointers and labels, the first
best on ties, for any masks (:data:`~synattn.structs.constants.NEG`), lengths and label counts.
Layout: batch first, ``unary [B, N, C]``, ``trans [B, C, C]`` (``trans[b, p, c]`` scores
``p → c``), ``mask [B, N]`` (valid positions, a prefix of each chain).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..backend import as_array, set_threads
from ._kernels import PARALLEL_WORK, _backtrack, _length

_parallel = numba.njit(cache=True, parallel=True, fastmath=False)


@_parallel
def _viterbi_factored(unary, trans, mask, score, labels):
    B, N, C = unary.shape
    for b in numba.prange(B):
        n = _length(mask, b)
        delta, new = np.empty(C), np.empty(C)
        back = np.empty((n, C), np.int64)
        for c in range(C):
            delta[c] = unary[b, 0, c]
        for i in range(1, n):
            for c in range(C):
                u = unary[b, i, c]
                arg, best = 0, delta[0] + (trans[b, 0, c] + u)
                for p in range(1, C):
                    x = delta[p] + (trans[b, p, c] + u)
                    if x > best:
                        arg, best = p, x
                new[c], back[i, c] = best, arg
            delta[:] = new
        _backtrack(delta, back, b, n, score, labels)


def viterbi_factored(unary: torch.Tensor, trans: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best scores ``[B]`` (the dtype of ``unary``) and labellings ``[B, N]`` (``-1`` past each
    length) of ``unary [B, N, C]`` and ``trans [B, C, C]`` (the same dtype), ``mask [B, N]``."""
    u = as_array(unary)
    B, N, C = u.shape
    score, labels = np.empty(B, u.dtype), np.empty((B, N), np.int64)
    set_threads(B * (N - 1) * C * C, PARALLEL_WORK)  # (the work of the transfer-matrix kernel)
    _viterbi_factored(u, as_array(trans), as_array(mask), score, labels)
    return torch.from_numpy(score), torch.from_numpy(labels)
