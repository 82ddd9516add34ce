"""Compiled CPU kernels (numba) for :class:`synattn.structs.SentCFG`: inside pass and its adjoint.

The recursion of :mod:`synattn.structs.cky.cfg`, ``beta(i, j, X) = log Σ_{k, Y, Z} exp(rules[X,
Y, Z] + in(i, k, Y) + in(k+1, j, Z))``, with ``in`` the terms over one word, written in blocks
by the kinds of the two children. A span ``i..j`` of ``w >= 3`` words has:

- block ``TN`` (``k = i``: a preterminal, then the nonterminal span ``i+1..j``),
- block ``NT`` (``k = j-1``: the nonterminal span ``i..j-1``, then a preterminal),
- block ``NN`` (``i < k < j-1``, both children nonterminals; ``w >= 4``),

and a span of two words the block ``TT`` only. The terminals are folded into the rules once per
word (``WTN[i, X, Z] = Σ_t rules[X, NT+t, Z]·terms[i, t]`` in scaled exponentials, likewise
``WNT``, ``WTT``), so ``TN`` and ``NT`` cost ``NT²`` per span; ``NN`` sums its splits into
``P[Y, Z]`` (``NT²`` per split) and contracts ``P`` with the rules (``NT³`` per span).

Every factor is a scaled exponential: ``exp(x - max)`` per child (its maximum kept apart), per
block of each rule row and per block's splits, so each block's sum lies in ``[0, #terms]`` and
``beta`` is the log-sum-exp of the blocks' ``log sum + shifts``; a block whose sum is at most
``TINY`` (every term masked or underflowed) adds nothing. Impossible items hold the finite
``NEG``. The adjoint (outside pass) gives ``d log Z / d (terms, rules, roots)``: a block's
adjoint per ``X`` is ``g(X)·exp(shifts - beta(X))``, the rules' gradient the product of the
block's scaled rules with the accumulated ``Σ_spans adjoint·P``. One sentence per
``numba.prange`` iteration, float64 inside; ``O(n²·NT³ + n³·NT²)`` time and ``O(n²·NT)`` charts
per sentence.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..backend import as_array, set_threads
from ..constants import IMPOSSIBLE, NEG, SERIAL_WORK, TINY

TN, NT_, NN, TT = 0, 1, 2, 3  # rule blocks (left child kind, right child kind)

_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _prepare(terms, rules, n, NT, T, rm, ER, mT, ET, WTN, WNT, WTT):
    """Scaled rules ``ER = exp(rules - rm[block, X])``, terms ``ET = exp(terms - mT)`` and the
    terminals folded into the rules (``WTN``, ``WNT``, ``WTT``)."""
    for x in range(NT):
        for blk in range(4):
            y0, y1 = (NT, NT + T) if blk == TN or blk == TT else (0, NT)
            z0, z1 = (NT, NT + T) if blk == NT_ or blk == TT else (0, NT)
            best = NEG
            for y in range(y0, y1):
                for z in range(z0, z1):
                    best = max(best, rules[x, y, z])
            rm[blk, x] = best
            for y in range(y0, y1):
                for z in range(z0, z1):
                    ER[x, y, z] = math.exp(rules[x, y, z] - best)
    for i in range(n):
        best = NEG
        for t in range(T):
            best = max(best, terms[i, t])
        mT[i] = best
        for t in range(T):
            ET[i, t] = math.exp(terms[i, t] - best)
    WTN[:] = 0.0
    WNT[:] = 0.0
    WTT[:] = 0.0
    for i in range(n):
        for x in range(NT):
            for t in range(T):
                e = ET[i, t]
                for z in range(NT):
                    WTN[i, x, z] += ER[x, NT + t, z] * e
                for u in range(T):
                    WTT[i, x, u] += ER[x, NT + t, NT + u] * e
            for y in range(NT):
                acc = 0.0
                for u in range(T):
                    acc += ER[x, y, NT + u] * ET[i, u]
                WNT[i, x, y] = acc


@_jit
def _pairs(i, j, NT, mN, EN, P):
    """``P[Y, Z] = Σ_{i<k<j-1} exp(mN[i,k] + mN[k+1,j] - M)·EN[i,k,Y]·EN[k+1,j,Z]``; returns
    ``M`` (the largest ``mN[i,k] + mN[k+1,j]``)."""
    M = mN[i, i + 1] + mN[i + 2, j]
    for k in range(i + 2, j - 1):
        M = max(M, mN[i, k] + mN[k + 1, j])
    P[:] = 0.0
    for k in range(i + 1, j - 1):
        c = math.exp(mN[i, k] + mN[k + 1, j] - M)
        for y in range(NT):
            a = c * EN[i, k, y]
            for z in range(NT):
                P[y, z] += a * EN[k + 1, j, z]
    return M


@_jit
def _inside(n, NT, T, rm, ER, mT, ET, WTN, WNT, WTT, beta, mN, EN, IB, MB, P, inner):
    """Fill ``beta [n, n, NT]`` (log, at least ``NEG``), ``mN``/``EN`` (its maximum per span and
    scaled exponentials), each block's sum ``IB [n, n, 4, NT]`` and shift ``MB [n, n, 4]``."""
    for w in range(2, n + 1):
        for i in range(n - w + 1):
            j = i + w - 1
            IB[i, j] = 0.0
            if w == 2:
                MB[i, j, TT] = mT[i] + mT[j]
                for x in range(NT):
                    acc = 0.0
                    for u in range(T):
                        acc += WTT[i, x, u] * ET[j, u]
                    IB[i, j, TT, x] = acc
            else:
                MB[i, j, TN] = mT[i] + mN[i + 1, j]
                MB[i, j, NT_] = mN[i, j - 1] + mT[j]
                for x in range(NT):
                    a = 0.0
                    b = 0.0
                    for z in range(NT):
                        a += WTN[i, x, z] * EN[i + 1, j, z]
                        b += WNT[j, x, z] * EN[i, j - 1, z]
                    IB[i, j, TN, x] = a
                    IB[i, j, NT_, x] = b
                if w >= 4:
                    MB[i, j, NN] = _pairs(i, j, NT, mN, EN, P)
                    for x in range(NT):
                        row = inner[:NT]
                        row[:] = 0.0
                        for y in range(NT):
                            for z in range(NT):
                                row[z] += ER[x, y, z] * P[y, z]
                        IB[i, j, NN, x] = row.sum()
            top = NEG
            for x in range(NT):
                v = NEG
                best = -np.inf
                for blk in range(4):
                    if IB[i, j, blk, x] > TINY:
                        best = max(best, math.log(IB[i, j, blk, x]) + MB[i, j, blk] + rm[blk, x])
                if best > -np.inf:
                    acc = 0.0
                    for blk in range(4):
                        if IB[i, j, blk, x] > TINY:
                            acc += math.exp(math.log(IB[i, j, blk, x]) + MB[i, j, blk] + rm[blk, x] - best)
                    v = max(best + math.log(acc), NEG)
                beta[i, j, x] = v
                top = max(top, v)
            mN[i, j] = top
            for x in range(NT):
                EN[i, j, x] = math.exp(beta[i, j, x] - top)


@_jit
def _outside(n, NT, T, rm, ER, ET, WTN, WNT, beta, mN, EN, IB, MB, P, Q, tmp,
             GN, GR, GT, HTN, HNT):
    """Adjoint of :func:`_inside` from the adjoints of the whole span ``GN[0, n-1]``: adds
    ``d log Z / d terms`` to ``GT``, ``d log Z / d rules`` (before the factor ``ER``) to ``GR``."""
    a = tmp[0, :NT]
    u = tmp[1, :NT]
    HTN[:] = 0.0
    HNT[:] = 0.0
    for w in range(n, 1, -1):
        for i in range(n - w + 1):
            j = i + w - 1
            for blk in range(4):
                if (blk == TT) != (w == 2) or (blk == NN and w < 4):
                    continue
                live = False
                for x in range(NT):
                    g = GN[i, j, x]
                    if g != 0.0 and beta[i, j, x] > NEG and IB[i, j, blk, x] > TINY:
                        a[x] = g * math.exp(MB[i, j, blk] + rm[blk, x] - beta[i, j, x])
                        live = True
                    else:
                        a[x] = 0.0
                if not live:
                    continue
                if blk == TT:
                    for x in range(NT):
                        for t in range(T):
                            for v in range(T):
                                q = a[x] * ET[i, t] * ET[j, v]
                                GR[x, NT + t, NT + v] += q
                                q *= ER[x, NT + t, NT + v]
                                GT[i, t] += q
                                GT[j, v] += q
                elif blk == TN:  # right child i+1..j
                    u[:] = 0.0
                    for x in range(NT):
                        for z in range(NT):
                            HTN[i, x, z] += a[x] * EN[i + 1, j, z]
                            u[z] += a[x] * WTN[i, x, z]
                    for z in range(NT):
                        GN[i + 1, j, z] += EN[i + 1, j, z] * u[z]
                elif blk == NT_:  # left child i..j-1
                    u[:] = 0.0
                    for x in range(NT):
                        for y in range(NT):
                            HNT[j, x, y] += a[x] * EN[i, j - 1, y]
                            u[y] += a[x] * WNT[j, x, y]
                    for y in range(NT):
                        GN[i, j - 1, y] += EN[i, j - 1, y] * u[y]
                else:
                    M = _pairs(i, j, NT, mN, EN, P)
                    Q[:] = 0.0
                    for x in range(NT):
                        for y in range(NT):
                            for z in range(NT):
                                Q[y, z] += a[x] * ER[x, y, z]
                                GR[x, y, z] += a[x] * P[y, z]
                    for k in range(i + 1, j - 1):
                        c = math.exp(mN[i, k] + mN[k + 1, j] - M)
                        u[:] = 0.0
                        for y in range(NT):
                            acc = 0.0
                            ly = EN[i, k, y]
                            for z in range(NT):
                                acc += Q[y, z] * EN[k + 1, j, z]
                                u[z] += ly * Q[y, z]
                            GN[i, k, y] += c * ly * acc
                        for z in range(NT):
                            GN[k + 1, j, z] += c * EN[k + 1, j, z] * u[z]
    for i in range(n):  # the terminals folded into WTN (left word i) and WNT (right word i)
        for x in range(NT):
            for t in range(T):
                e = ET[i, t]
                acc = 0.0
                for z in range(NT):
                    q = e * HTN[i, x, z]
                    GR[x, NT + t, z] += q
                    acc += q * ER[x, NT + t, z]
                    q = e * HNT[i, x, z]
                    GR[x, z, NT + t] += q
                    acc += q * ER[x, z, NT + t]
                GT[i, t] += acc


@numba.njit(cache=True, parallel=True, fastmath=False)
def _batch(terms, rules, roots, lengths, outside):
    """``log_z [B]`` and, if ``outside``, the gradients of ``log Z`` by ``terms``, ``rules`` and
    ``roots`` (0 where ``log Z`` is impossible and past each length)."""
    batch, N, T = terms.shape
    NT = roots.shape[1]
    S = NT + T
    log_z = np.empty(batch)
    on = 1 if outside else 0  # (gradients: empty arrays without the outside pass)
    g_terms = np.zeros((batch, N * on, T * on))
    g_rules = np.zeros((batch, NT * on, S * on, S * on))
    g_roots = np.zeros((batch, NT * on))
    for b in numba.prange(batch):
        n = lengths[b]
        rm = np.empty((4, NT))
        ER = np.zeros((NT, S, S))
        mT, ET = np.empty(n), np.empty((n, T))
        WTN, WNT, WTT = np.empty((n, NT, NT)), np.empty((n, NT, NT)), np.empty((n, NT, T))
        beta, EN = np.empty((n, n, NT)), np.empty((n, n, NT))
        mN = np.empty((n, n))
        IB, MB = np.empty((n, n, 4, NT)), np.zeros((n, n, 4))
        P = np.empty((NT, NT))
        tmp = np.empty((2, max(NT, 1)))
        _prepare(terms[b], rules[b], n, NT, T, rm, ER, mT, ET, WTN, WNT, WTT)
        _inside(n, NT, T, rm, ER, mT, ET, WTN, WNT, WTT, beta, mN, EN, IB, MB, P, tmp[0])
        top = NEG
        for x in range(NT):
            top = max(top, roots[b, x] + beta[0, n - 1, x])
        acc = 0.0
        for x in range(NT):
            acc += math.exp(roots[b, x] + beta[0, n - 1, x] - top)
        log_z[b] = top + math.log(acc)
        if not outside or log_z[b] <= IMPOSSIBLE:
            continue
        GN = np.zeros((n, n, NT))
        for x in range(NT):
            p = math.exp(roots[b, x] + beta[0, n - 1, x] - log_z[b])
            g_roots[b, x] = p
            GN[0, n - 1, x] = p
        Q = np.empty((NT, NT))
        GR = g_rules[b]
        HTN, HNT = np.empty((n, NT, NT)), np.empty((n, NT, NT))
        _outside(n, NT, T, rm, ER, ET, WTN, WNT, beta, mN, EN, IB, MB, P, Q, tmp,
                 GN, GR, g_terms[b], HTN, HNT)
        for x in range(NT):
            for y in range(S):
                for z in range(S):
                    GR[x, y, z] *= ER[x, y, z]
    return log_z, g_terms, g_rules, g_roots


def _run(terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor, lengths: torch.Tensor,
         outside: bool) -> tuple[torch.Tensor, ...]:
    NT = rules.shape[1]
    n = lengths.long()
    set_threads(int((n * n * (NT ** 3 + n * NT ** 2)).sum()) // 8, SERIAL_WORK)
    out = _batch(as_array(terms.double()), as_array(rules.double()), as_array(roots.double()),
                 as_array(n), outside)
    return tuple(torch.from_numpy(x).to(terms.dtype) for x in out)


def log_partition(terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor,
                  lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` ``log Z`` of checked, masked ``terms [B, N, T]``, ``rules [B, NT, S, S]``,
    ``roots [B, NT]`` (CPU; a value at or below ``IMPOSSIBLE`` when no parse survives the masks)."""
    return _run(terms, rules, roots, lengths, False)[0]


def marginals(terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor,
              lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``log_z [B]`` and the expected counts ``(terms [B, N, T], rules [B, NT, S, S], roots [B,
    NT])``, the gradient of ``log Z`` (all 0 where no parse survives the masks)."""
    log_z, g_terms, g_rules, g_roots = _run(terms, rules, roots, lengths, True)
    return log_z, g_terms, g_rules, g_roots
