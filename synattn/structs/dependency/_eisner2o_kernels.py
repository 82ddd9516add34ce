"""Compiled CPU kernels (numba) for :class:`synattn.structs.Dependency2oCRF`.

The recursion of :mod:`synattn.structs.dependency.eisner2o` (second-order Eisner over complete ``C``,
incomplete ``I`` and sibling ``S`` items) and its explicit outside pass, the adjoint of the
inside pass, which gives the arc and sibling marginals ``d log Z / d s``; under the max semiring
the adjoint goes to the first best term of every sum, which marks the best tree's arcs. One
sentence per ``numba.prange`` iteration, spans by width, float64 inside whatever the input dtype,
impossible items at the finite ``NEG``; ``O(n³)`` time and ``O(n²)`` charts per sentence (the
sibling marginals ``O(n³)``, the size of the sibling scores).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..backend import as_array, set_threads
from ..constants import SERIAL_WORK

CR, CL, IR, IL, SIB = 0, 1, 2, 3, 4  # chart channels, as in synattn.structs.dependency.eisner2o

_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _total(t, m, viterbi):
    """``⊕`` of the first ``m`` terms of ``t``: log-sum-exp, or max with ``viterbi``."""
    best = t[0]
    for k in range(1, m):
        if t[k] > best:
            best = t[k]
    if viterbi:
        return best
    acc = 0.0
    for k in range(m):
        acc += math.exp(t[k] - best)
    return best + math.log(acc)


@_jit
def _share(t, m, total, viterbi, p):
    """``p[k]``: the part of a sum's adjoint that term ``k`` gets (posterior, or the first best)."""
    if viterbi:
        found = False
        for k in range(m):
            p[k] = 1.0 if (not found and t[k] == total) else 0.0
            found = found or t[k] == total
    else:
        for k in range(m):
            p[k] = math.exp(t[k] - total)


@_jit
def _inside(arc, sib, n, multiroot, viterbi, K, t):
    for i in range(n + 1):
        K[CR, i, i] = 0.0
        K[CL, i, i] = 0.0
    for w in range(1, n + 1):
        for i in range(n + 1 - w):
            j = i + w
            for q in range(w):  # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
                t[q] = K[CR, i, i + q] + K[CL, i + q + 1, j]
            K[SIB, i, j] = _total(t, w, viterbi)
            t[0] = K[CL, i + 1, j]  # I→(i, j): nearest child, or siblings r
            m = 1
            if i > 0 or multiroot:
                for r in range(i + 1, j):
                    t[m] = K[IR, i, r] + K[SIB, r, j] + sib[i, r, j]
                    m += 1
            K[IR, i, j] = arc[i, j] + _total(t, m, viterbi)
            t[0] = K[CR, i, j - 1]  # I←(i, j)
            for r in range(i + 1, j):
                t[r - i] = K[IL, r, j] + K[SIB, i, r] + sib[j, r, i]
            K[IL, i, j] = arc[j, i] + _total(t, w, viterbi)
            for q in range(w):  # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
                t[q] = K[IR, i, i + q + 1] + K[CR, i + q + 1, j]
            K[CR, i, j] = _total(t, w, viterbi)
            for q in range(w):  # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
                t[q] = K[CL, i, i + q] + K[IL, i + q, j]
            K[CL, i, j] = _total(t, w, viterbi)


@_jit
def _outside(arc, sib, n, multiroot, viterbi, K, G, t, p, garc, gsib):
    """Adjoints ``G`` of the charts and ``garc [L, L]``, ``gsib [L, L, L]`` of the scores."""
    G[:] = 0.0
    G[CR, 0, n] = 1.0
    for w in range(n, 0, -1):
        for i in range(n + 1 - w):
            j = i + w
            g = G[CL, i, j]  # C←(i, j): its terms use C←(i, r) and I←(r, j), r = i is this span's
            if g != 0.0:
                for q in range(w):
                    t[q] = K[CL, i, i + q] + K[IL, i + q, j]
                _share(t, w, K[CL, i, j], viterbi, p)
                for q in range(w):
                    G[CL, i, i + q] += g * p[q]
                    G[IL, i + q, j] += g * p[q]
            g = G[CR, i, j]
            if g != 0.0:
                for q in range(w):
                    t[q] = K[IR, i, i + q + 1] + K[CR, i + q + 1, j]
                _share(t, w, K[CR, i, j], viterbi, p)
                for q in range(w):
                    G[IR, i, i + q + 1] += g * p[q]
                    G[CR, i + q + 1, j] += g * p[q]
            g = G[IL, i, j]
            if g != 0.0:
                garc[j, i] += g
                t[0] = K[CR, i, j - 1]
                for r in range(i + 1, j):
                    t[r - i] = K[IL, r, j] + K[SIB, i, r] + sib[j, r, i]
                _share(t, w, _total(t, w, viterbi), viterbi, p)
                G[CR, i, j - 1] += g * p[0]
                for r in range(i + 1, j):
                    x = g * p[r - i]
                    G[IL, r, j] += x
                    G[SIB, i, r] += x
                    gsib[j, r, i] += x
            g = G[IR, i, j]
            if g != 0.0:
                garc[i, j] += g
                t[0] = K[CL, i + 1, j]
                m = 1
                if i > 0 or multiroot:
                    for r in range(i + 1, j):
                        t[m] = K[IR, i, r] + K[SIB, r, j] + sib[i, r, j]
                        m += 1
                _share(t, m, _total(t, m, viterbi), viterbi, p)
                G[CL, i + 1, j] += g * p[0]
                for k in range(1, m):
                    r = i + k
                    x = g * p[k]
                    G[IR, i, r] += x
                    G[SIB, r, j] += x
                    gsib[i, r, j] += x
            g = G[SIB, i, j]  # every span that reads S(i, j) is wider: its adjoint is complete
            if g != 0.0:
                for q in range(w):
                    t[q] = K[CR, i, i + q] + K[CL, i + q + 1, j]
                _share(t, w, K[SIB, i, j], viterbi, p)
                for q in range(w):
                    G[CR, i, i + q] += g * p[q]
                    G[CL, i + q + 1, j] += g * p[q]


@numba.njit(cache=True, parallel=True, fastmath=False)
def _batch(arc, sib, lengths, multiroot, viterbi, outside):
    batch, L = arc.shape[0], arc.shape[1]
    log_z = np.empty(batch)
    garc = np.zeros((batch, L, L) if outside else (batch, 0, 0))
    gsib = np.zeros((batch, L, L, L) if outside and not viterbi else (batch, 0, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        K = np.empty((5, n + 1, n + 1))
        t = np.empty(n + 2)
        _inside(arc[b], sib[b], n, multiroot, viterbi, K, t)
        log_z[b] = K[CR, 0, n]
        if outside:
            G = np.empty((5, n + 1, n + 1))
            p = np.empty(n + 2)
            gs = gsib[b] if not viterbi else np.zeros((n + 1, n + 1, n + 1))
            _outside(arc[b], sib[b], n, multiroot, viterbi, K, G, t, p, garc[b], gs)
    return log_z, garc, gsib


def _run(scores, siblings, lengths, multiroot, viterbi, outside):
    set_threads(int(((lengths + 1) ** 3).sum()), SERIAL_WORK)
    log_z, garc, gsib = _batch(as_array(scores.double()), as_array(siblings.double()),
                               as_array(lengths.long()), multiroot, viterbi, outside)
    dtype = scores.dtype
    return (torch.from_numpy(log_z).to(dtype), torch.from_numpy(garc).to(dtype),
            torch.from_numpy(gsib).to(dtype))


def log_partition(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                  multiroot: bool) -> torch.Tensor:
    """``[B]`` ``log Z`` (inside pass only) of checked CPU scores ``[B, L, L]``, ``[B, L, L, L]``."""
    return _run(scores, siblings, lengths, multiroot, False, False)[0]


def marginals(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
              multiroot: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``log Z [B]``, arc marginals ``[B, L, L]`` and sibling marginals ``[B, L, L, L]``."""
    return _run(scores, siblings, lengths, multiroot, False, True)


def best(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
         multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The best tree's score ``[B]`` and its arcs as 0/1 ``[B, L, L]``."""
    return _run(scores, siblings, lengths, multiroot, True, True)[:2]
