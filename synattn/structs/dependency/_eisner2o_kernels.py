"""Compiled CPU kernels (numba) for :class:`synattn.structs.Dependency2oCRF`.

The recursion of :mod:`synattn.structs.dependency.eisner2o` (second-order Eisner over complete ``C``,
incomplete ``I`` and sibling ``S`` items) and its explicit outside pass, the adjoint of the
inside pass, which gives the arc and sibling marginals ``d log Z / d s``; under the max semiring
the adjoint goes to the first best term of every sum, which marks the best tree's arcs. Samples
walk down the inside chart (:func:`_sample_tree`), each item picking one term of its sum. One
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


@_jit
def _drawn(t, m, u):
    """The term ``k < m`` drawn with its posterior weight ``exp(t[k] - ⊕ t)`` by the uniform
    ``u`` (inverse distribution function; the last term of positive weight past rounding)."""
    total = _total(t, m, False)
    acc = 0.0
    last = 0
    for k in range(m):
        weight = math.exp(t[k] - total)
        if weight > 0.0:
            last = k
        acc += weight
        if u < acc:
            return k
    return last


@_jit
def _sample_tree(arc, sib, n, multiroot, K, t, u, heads, stack):
    """One tree drawn top-down from the inside chart ``K``: from ``C→(0, n)``, each item picks
    one of the terms of its sum (the recursion of :func:`_inside`) with its posterior weight and
    expands its two items, until only empty complete spans are left; an incomplete span
    ``I→(i, j)`` (``I←(i, j)``) is the arc ``i → j`` (``j → i``), written into ``heads [n]``.
    ``u``: one uniform per expanded item (at most ``3n``: every arc, sibling pair and nonempty
    complete span is expanded once); ``stack [>= 6n + 1, 3]``: the items still to expand (each
    expansion pushes two)."""
    stack[0, 0], stack[0, 1], stack[0, 2] = CR, 0, n
    top, used = 1, 0
    while top > 0:
        top -= 1
        c, i, j = stack[top, 0], stack[top, 1], stack[top, 2]
        w = j - i
        if w == 0:
            continue
        if c == CR:  # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
            for q in range(w):
                t[q] = K[IR, i, i + q + 1] + K[CR, i + q + 1, j]
            r = i + _drawn(t, w, u[used]) + 1
            a0, a1, a2, b0, b1, b2 = IR, i, r, CR, r, j
        elif c == CL:  # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            for q in range(w):
                t[q] = K[CL, i, i + q] + K[IL, i + q, j]
            r = i + _drawn(t, w, u[used])
            a0, a1, a2, b0, b1, b2 = CL, i, r, IL, r, j
        elif c == SIB:  # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            for q in range(w):
                t[q] = K[CR, i, i + q] + K[CL, i + q + 1, j]
            r = i + _drawn(t, w, u[used])
            a0, a1, a2, b0, b1, b2 = CR, i, r, CL, r + 1, j
        elif c == IR:  # the arc i → j; its nearest inner dependent, or its inner sibling r
            heads[j - 1] = i
            t[0] = K[CL, i + 1, j]
            m = 1
            if i > 0 or multiroot:
                for r in range(i + 1, j):
                    t[m] = K[IR, i, r] + K[SIB, r, j] + sib[i, r, j]
                    m += 1
            k = _drawn(t, m, u[used])
            r = i + k
            if k == 0:
                a0, a1, a2, b0, b1, b2 = CL, i + 1, j, CL, j, j
            else:
                a0, a1, a2, b0, b1, b2 = IR, i, r, SIB, r, j
        else:  # I←(i, j): the arc j → i
            heads[i - 1] = j
            t[0] = K[CR, i, j - 1]
            for r in range(i + 1, j):
                t[r - i] = K[IL, r, j] + K[SIB, i, r] + sib[j, r, i]
            k = _drawn(t, w, u[used])
            r = i + k
            if k == 0:
                a0, a1, a2, b0, b1, b2 = CR, i, j - 1, CR, i, i
            else:
                a0, a1, a2, b0, b1, b2 = IL, r, j, SIB, i, r
        used += 1
        stack[top, 0], stack[top, 1], stack[top, 2] = a0, a1, a2
        stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = b0, b1, b2
        top += 2


@numba.njit(cache=True, parallel=True, fastmath=False)
def _sample_batch(arc, sib, lengths, multiroot, u, heads):
    """``heads [count, B, N]`` (filled with -1) of ``count`` trees per sentence: one inside pass
    per sentence, then one top-down walk per sample (``u [count, B, >= 3N]`` uniforms)."""
    count, batch, L = u.shape[0], arc.shape[0], arc.shape[1]
    K = np.empty((batch, 5, L, L))
    for b in numba.prange(batch):
        _inside(arc[b], sib[b], lengths[b], multiroot, False, K[b], np.empty(L + 1))
    for z in numba.prange(count * batch):
        c, b = z // batch, z % batch
        n = lengths[b]
        _sample_tree(arc[b], sib[b], n, multiroot, K[b], np.empty(n + 2), u[c, b], heads[c, b],
                     np.empty((6 * n + 1, 3), np.int64))


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


def sample(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
           count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[count, B, n]`` heads (``-1`` padding) of exact samples of checked CPU scores: one inside
    pass per sentence and a top-down walk per sample (:func:`_sample_tree`), its uniforms drawn
    from ``generator``."""
    batch, L = scores.shape[0], scores.shape[1]
    u = torch.rand(count, batch, 3 * L, generator=generator, dtype=torch.float64)
    heads = np.full((count, batch, L - 1), -1, dtype=np.int64)
    set_threads(int(((lengths + 1) ** 3).sum()) + count * int(((lengths + 1) ** 2).sum()), SERIAL_WORK)
    _sample_batch(as_array(scores.double()), as_array(siblings.double()), as_array(lengths.long()),
                  multiroot, as_array(u), heads)
    return torch.from_numpy(heads)
