"""Compiled CPU kernels (numba) for :class:`~synattn.structs.DependencyLBP`: its ``max_iter``
rounds of loopy belief propagation and their explicit adjoint, reading the raw sibling scores in
place, with the conventions and row helpers of :mod:`synattn.structs.dependency._vi_kernels`
(MFVI's kernels: masks applied as the scores are read, one sentence per ``numba.prange``
iteration, float64 inside, the checks' statistics returned).

**LBP** in linear space: with the messages ``μ = exp(M)`` and ``E = exp(sib)`` (computed once
per call), the update of the message of factor ``(h → m, h → s)`` into ``m``'s head is, over
the ``L = N + 1`` values ``h`` of the padded batch as in the PyTorch path,
``a[h] = P[s, h] / μ[h, s, m]``, ``A = Σ_h a[h]``, ``b[h] = a[h] · E[h, m, s]``,
``μ'[h, m, s] = L · (A + b[h]) / (L · A + Σ_h b[h])`` — products, no transcendental per entry,
and the same ``μ'`` for ``a`` scaled by any factor per message. The messages of the pairs of
words ``{x, y}`` are kept twice, as ``[x, h, y]`` blocks into ``x`` (``F``) and into ``y``
(``G``), each as ``A + b[h]`` without its factor ``L / Z`` (which the next update does not
see): block ``x`` of one is updated from block ``x`` of the other, so every loop runs along
rows over ``y`` (vectorised, the sums over ``h`` accumulated across rows; each message is
computed twice, once per block, where the earlier layout computed it once, one scalar sum over
``h`` at a time). ``q[h, y] = s[h, y] + Σ_x log μ'[h, y, x]`` multiplies block rows of ``G``
(the messages into ``y``, their factor restored) along ``y`` and takes one logarithm per
:func:`_chunk` blocks (once per round at ordinary score ranges). With sibling scores within
``±top`` every ``μ`` is in ``[L / (L + exp(top)), L]`` (``B <= exp(top) · A``), so neither
``E`` nor those products leave float64's range for ``top <=`` :data:`LBP_LIMIT`; the caller
runs the PyTorch path for sentences with larger ones. The adjoint recomputes the rounds of one
sentence keeping every round's messages (``O(max_iter · n³)`` per sentence, not per batch; in
the ``[m, s, h]`` layout it reads) and goes back through them.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._numba_math import exp as _exp
from ..constants import NEG
from ._vi_kernels import (
    LBP_LIMIT,
    LOG_RANGE,
    _arc_gradient,
    _arc_rows,
    _factor_rows,
    _jit,
    _softmax_heads,
    _summary,
    _width,
    _write,
    run_adjoint,
    run_rounds,
)

__all__ = ["LBP_LIMIT", "logits", "logits_backward"]


# ---------------------------------------------------------------------------------------------
# Loopy belief propagation: the messages of every pair of words {x, y} in two [x, h, y] blocks,
# F (into x) and G (into y), so that each update runs along rows over y (vectorised).
# ---------------------------------------------------------------------------------------------

@_jit
def _lbp_factors(sib, n, E, ET, stats):
    """``E[h, x, y] = exp(sib[h, x, y])`` on the factors and 0 elsewhere (masked entries, the
    padding), ``ET[x, h, y] = E[h, y, x]`` (both float64 ``[n+1, n+1, Lp]``); ``stats`` as
    :func:`_factor_rows`. Returns False (``E``, ``ET`` unset) for a NaN or a sibling score beyond
    :data:`LBP_LIMIT`."""
    K, Lp = n + 1, E.shape[2]
    _factor_rows(sib, n, E, stats, NEG)  # (NEG off the factors and at masked entries)
    if stats[0] > 0.0 or stats[2] > LBP_LIMIT:
        return False
    flat = E.reshape(-1)
    for i in range(flat.shape[0]):  # (one long loop: vectorised; exp(NEG) = 0)
        flat[i] = _exp(flat[i])
    for x in range(K):
        for h in range(K):
            row = ET[x, h]
            for y in range(K):
                row[y] = E[h, y, x]
            for y in range(K, Lp):
                row[y] = 0.0
    return True


@_jit
def _pair_messages(PR, E, ETx, x, n, L, AFx, TFx, AGx, TGx, TGw, sums):
    """One round's messages of the pairs ``{x, y}`` for every ``y`` (module docstring) from the
    previous ones: ``F[h, y] = μ[h, x, y]`` (into ``x``'s head) and ``G[h, y] = μ[h, y, x]``
    (into ``y``'s) are kept as ``c[y] · (A[y] + T[h, y])`` without the factor ``c`` (the update
    is the same for any factor per message), rows ``[n+1, Lp]``; ``PR`` the column softmax rows
    ``[h, d]``. ``AFx``, ``TFx``, ``AGx`` are updated in place, the new ``T`` of ``G`` goes to
    ``TGw``; ``sums[1]``, ``sums[3]`` end as the factors ``c`` of ``F``, ``G``. Entries off the
    factors (``y`` ROOT, ``x`` or padding) are computed like the others and never read as
    messages. (Few arrays per loop: with more LLVM's alias checks cost more.)"""
    Lp = PR.shape[1]
    AF, BF, AG, BG = sums[0], sums[1], sums[2], sums[3]
    sums[:, :] = 0.0
    for h in range(n + 1):  # into y: x's belief without F's message
        px, tf, eg, tg = PR[h, x], TFx[h], ETx[h], TGw[h]
        for y in range(Lp):
            a = px * (1.0 / (AFx[y] + tf[y]))
            b = a * eg[y]
            AG[y] += a
            BG[y] += b
            tg[y] = b
    for h in range(n + 1):  # into x: y's belief without G's message
        pr, tg, ef, tf = PR[h], TGx[h], E[h, x], TFx[h]
        for y in range(Lp):
            a = pr[y] * (1.0 / (AGx[y] + tg[y]))
            b = a * ef[y]
            AF[y] += a
            BF[y] += b
            tf[y] = b
    for y in range(Lp):
        AFx[y] = AF[y]
        AGx[y] = AG[y]
        BF[y] = L / (L * AF[y] + BF[y])
        BG[y] = L / (L * AG[y] + BG[y])


@_jit
def _chunk(L, lo, hi):
    """Message factors multiplied before one logarithm, for sibling scores in ``[lo, hi]``: the
    most whose product stays a normal float64 (each ``μ`` in ``[L / (L + exp(top)), L]``,
    module docstring; at least 8 for ``top <=`` :data:`LBP_LIMIT` and ``L <= 10⁴``)."""
    top = max(-lo, hi) if lo <= hi else 0.0
    per = max(math.log(L), math.log1p(math.exp(min(top, LBP_LIMIT)) / L))
    return max(1, int(LOG_RANGE / per))


@_jit
def _log_products(prod, acc, n):
    """``acc += log(prod)`` on the entries ``[h, m]`` of words ``m != h``; ``prod = 1``."""
    for h in range(n + 1):
        for m in range(1, n + 1):
            if m != h:
                acc[h, m] += math.log(prod[h, m])
    prod[:, :] = 1.0


@_jit
def _lbp_rounds(S, E, ET, n, L, T, Q, PR, mus, Ps, keep, chunk):
    """``T`` rounds from ``q = s`` (rows as in :func:`_mfvi_rounds`: arc rows ``S``, logits
    ``Q``, their column softmax ``PR``, which ends as the marginals of the last logits), every
    message 1; with ``keep`` round ``t``'s messages go to ``mus[t+1]`` (``[n+1, n+1, n+1]``,
    ``mus[t+1][m, s, h] = μ[h, m, s]``, 1 where there is no factor; ``mus[0]`` is 1) and its
    input marginals to ``Ps[t]`` (``[s, h]``), the layouts of :func:`_lbp_backward`."""
    K, Lp = n + 1, S.shape[1]
    top = np.empty(Lp)
    total = np.empty(Lp)
    sums = np.empty((4, Lp))
    AF = np.zeros((K, Lp))  # the messages of :func:`_pair_messages` (all 1)
    TF = np.ones((K, K, Lp))
    AG = np.zeros((K, Lp))
    TG = np.ones((K + 1, K, Lp))  # (K + 1 blocks: the spare one takes each new block)
    slot = np.arange(K + 1)
    CF = np.empty((K, Lp))
    prod = np.empty((K, Lp))
    acc = np.empty((K, Lp))
    if keep:
        mus[0] = 1.0
    Q[:, :] = S
    for t in range(T):
        _softmax_heads(Q, n, PR, top, total)
        prod[:] = 1.0
        acc[:] = 0.0
        count = 0
        for x in range(1, K):
            new = slot[K]
            _pair_messages(PR, E, ET[x], x, n, L, AF[x], TF[x], AG[x], TG[slot[x]], TG[new], sums)
            slot[K], slot[x] = slot[x], new
            c, A, Tx = sums[3], AG[x], TG[new]
            for h in range(K):  # q[h, y] = s[h, y] + Σ_x log μ[h, y, x] over the factors
                if h == x:
                    continue
                p, g = prod[h], Tx[h]
                for y in range(Lp):
                    p[y] *= 1.0 if (y == x or y == h) else c[y] * (A[y] + g[y])
            if keep:
                CF[x] = sums[1]
            count += 1
            if count == chunk:
                _log_products(prod, acc, n)
                count = 0
        for h in range(K):
            for m in range(1, K):
                if h != m:
                    Q[h, m] = S[h, m] + acc[h, m] + math.log(prod[h, m])
        if keep:
            for j in range(K):
                for h in range(K):
                    Ps[t, j, h] = PR[h, j]
            mu = mus[t + 1]
            mu[:] = 1.0
            for m in range(1, K):
                for h in range(K):
                    for j in range(1, K):
                        if j != m:
                            mu[m, j, h] = CF[m, j] * (AF[m, j] + TF[m, h, j])
    _softmax_heads(Q, n, PR, top, total)


@_jit
def _lbp_sentence(s, sib, n, T, out, mu, checks):
    """As :func:`_mfvi_sentence`, for LBP; a sentence with a NaN or a sibling score beyond
    :data:`LBP_LIMIT` is left unset (refused or left to the PyTorch path by the caller)."""
    K, Lp, L = n + 1, _width(n), s.shape[0]
    S = np.empty((K, Lp))
    _arc_rows(s, n, S, checks[:3])
    E = np.empty((K, K, Lp))
    ET = np.empty((K, K, Lp))
    if not _lbp_factors(sib, n, E, ET, checks[3:]):
        return
    PR = np.empty((K, Lp))
    Q = np.empty((K, Lp))
    _lbp_rounds(S, E, ET, n, L, T, Q, PR, np.empty((0, 0, 0, 0)), np.empty((0, 0, 0)), False,
                _chunk(L, checks[4], checks[5]))
    _write(Q, PR, n, out, mu)


@_jit
def _reciprocals(mu, inv):
    """``inv = 1 / mu`` in one flat loop (vectorised: a division per entry of the short loops of
    :func:`_message` would stay scalar)."""
    x, out = mu.reshape(-1), inv.reshape(-1)
    for i in range(x.shape[0]):
        out[i] = 1.0 / x[i]


@_jit
def _message(P, inv, E, n, L, out):
    """``out[h] = μ'[h]`` of one factor-to-variable message (module docstring) from the
    reciprocals ``inv = 1 / μ`` of the previous messages; returns the normaliser ``Z``, ``A``."""
    A = 0.0
    B = 0.0
    for h in range(n + 1):
        a = P[h] * inv[h]
        b = a * E[h]
        A += a
        B += b
        out[h] = b
    Z = L * A + B
    c = L / Z
    for h in range(n + 1):
        out[h] = c * (A + out[h])
    return Z, A


@numba.njit(cache=True, fastmath=False, error_model="numpy")
def _lbp(s, sib, lengths, T, out, mu, checks, summary):
    for b in range(s.shape[0]):
        _lbp_sentence(s[b], sib[b], lengths[b], T, out[b], mu[b], checks[b])
    _summary(checks, summary)


@numba.njit(cache=True, parallel=True, fastmath=False, error_model="numpy")
def _lbp_parallel(s, sib, lengths, T, out, mu, checks, summary):
    for b in numba.prange(s.shape[0]):
        _lbp_sentence(s[b], sib[b], lengths[b], T, out[b], mu[b], checks[b])
    _summary(checks, summary)


@numba.njit(cache=True, parallel=True, fastmath=False, error_model="numpy")
def _lbp_backward(s, sib, lengths, T, gq, want_sib):
    """As :func:`_mfvi_backward`, for LBP."""
    batch, L = s.shape[0], s.shape[1]
    gs = np.zeros((batch, L, L))
    gsib = np.zeros((batch, L, L, L) if want_sib else (batch, 0, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        K, Lp = n + 1, _width(n)
        stats = np.empty(3)
        S = np.empty((K, Lp))
        _arc_rows(s[b], n, S, stats)
        E = np.empty((K, K, Lp))
        ET = np.empty((K, K, Lp))
        _lbp_factors(sib[b], n, E, ET, stats)  # (the forward refused or left out the others)
        Ps = np.empty((T, K, K))
        mus = np.empty((T + 1, K, K, K))
        _lbp_rounds(S, E, ET, n, L, T, np.empty((K, Lp)), np.empty((K, Lp)), mus, Ps, True,
                    _chunk(L, stats[1], stats[2]))
        Em = np.empty((K, K, K))  # Em[m, s, h] = E[h, m, s]: the rows read below
        for h in range(K):
            for m in range(K):
                for j in range(K):
                    Em[m, j, h] = E[h, m, j]
        total = gq[b].copy()  # d/d(clean s)
        G = np.zeros((n + 1, n + 1))
        for h in range(n + 1):
            for d in range(n + 1):
                G[h, d] = gq[b, h, d]
        gmu = np.zeros((n + 1, n + 1, n + 1))  # d/dμ of the round being undone
        gprev = np.empty((n + 1, n + 1, n + 1))
        gP = np.empty((n + 1, n + 1))
        a = np.empty(n + 1)
        new = np.empty(n + 1)
        inv = np.empty((n + 1, n + 1, n + 1))
        for t in range(T, 0, -1):
            mu = mus[t]
            _reciprocals(mus[t - 1], inv)
            for m in range(1, n + 1):  # q = s + Σ log μ: d/dμ[h, m, s] += G[h, m] / μ
                for j in range(1, n + 1):
                    if j == m:
                        continue
                    for h in range(n + 1):
                        if h != j and h != m:
                            gmu[m, j, h] += G[h, m] / mu[m, j, h]
            gprev[:] = 0.0
            gP[:] = 0.0
            for m in range(1, n + 1):  # through each message μ'[., m, j] (module docstring)
                for j in range(1, n + 1):
                    if j == m:
                        continue
                    Pj, o, e, g = Ps[t - 1, j], inv[j, m], Em[m, j], gmu[m, j]  # (o = 1 / μ)
                    Z, A = _message(Pj, o, e, n, L, new)
                    dot = 0.0
                    for h in range(n + 1):
                        dot += g[h] * new[h]
                    gZ = -dot / Z
                    gA = 0.0
                    for h in range(n + 1):
                        gA += g[h]
                    gA = gA * L / Z + gZ * L
                    for h in range(n + 1):
                        a[h] = Pj[h] * o[h]
                        gb = g[h] * L / Z + gZ
                        if want_sib and e[h] != 0.0:
                            gsib[b, h, m, j] += gb * a[h] * e[h]
                        ga = gA + gb * e[h]
                        gP[j, h] += ga * o[h]
                        gprev[j, m, h] -= ga * a[h] * o[h]
            gmu, gprev = gprev, gmu
            G = np.zeros((n + 1, n + 1))
            for j in range(1, n + 1):  # through the column softmax of round t - 1
                dot = 0.0
                for h in range(n + 1):
                    dot += Ps[t - 1, j, h] * gP[j, h]
                for h in range(n + 1):
                    G[h, j] = Ps[t - 1, j, h] * (gP[j, h] - dot)
            for h in range(n + 1):
                for d in range(n + 1):
                    total[h, d] += G[h, d]
        _arc_gradient(s[b], n, total, gs[b])
    return gs, gsib


def logits(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor,
           max_iter: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """LBP's logits, marginals and checks after ``max_iter`` rounds
    (:func:`~synattn.structs.dependency._vi_kernels.run_rounds`)."""
    return run_rounds(_lbp, _lbp_parallel, s, sib, lengths, max_iter)


def logits_backward(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor, max_iter: int,
                    grad: torch.Tensor, want_sib: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The adjoint of LBP's rounds (:func:`~synattn.structs.dependency._vi_kernels.run_adjoint`)."""
    return run_adjoint(_lbp_backward, s, sib, lengths, max_iter, grad, want_sib)
