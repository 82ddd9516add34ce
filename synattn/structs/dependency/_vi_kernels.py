"""Compiled CPU kernels (numba) for :class:`~synattn.structs.DependencyMFVI` and
:class:`~synattn.structs.DependencyLBP`: their ``max_iter`` rounds of updates and the explicit
adjoint of those rounds (the backward), reading the raw sibling scores in place.

They compute what the PyTorch path of :mod:`synattn.structs.dependency.second_order_vi` computes,
up to rounding (the tests compare the two, and the adjoint with ``gradcheck``), without its
``[B, n+1, n+1, n+1]`` temporaries: the pair mask (``h``, ``s``, ``m`` distinct, ``s``, ``m``
words, ``h`` ROOT or a word) and the mask value (entries ``<= NEG`` are :data:`NEG`) are applied
as the sibling scores are read, and entries outside the pairs are never read (they may be NaN).
One sentence per ``numba.prange`` iteration, float64 arithmetic whatever the input dtype. The
kernels also read the raw arc scores (masks of ``check_arc_scores(..., fill=NEG)`` applied and its
checks' statistics returned, so that clean inputs need no PyTorch pass), copy each sentence's
factors once into a clean float64 block (``W``: then every round is a plain product), keep the
logits transposed (``qT[d, h]``: the softmax over heads reads contiguous rows) and return the
marginals with the logits.

- **MFVI**: per round, the column softmax ``P[s, h] = softmax_h q[h, s]`` and
  ``q[h, m] = s[h, m] + Σ_s P[s, h] · sib[h, s, m]`` (log-linear, any score range); the adjoint
  keeps the ``P`` of every round (``O(max_iter · n²)``).
- **LBP** in linear space: with the messages ``μ = exp(M)`` and ``E = exp(sib)`` (computed once
  per call), the update of the message of factor ``(h → m, h → s)`` into ``m``'s head is, over
  the ``L = N + 1`` values ``h`` of the padded batch as in the PyTorch path,
  ``a[h] = P[s, h] / μ[h, s, m]``, ``A = Σ_h a[h]``, ``b[h] = a[h] · E[h, m, s]``,
  ``μ'[h, m, s] = L · (A + b[h]) / (L · A + Σ_h b[h])`` — divisions and products, no
  transcendental per entry; ``q[h, m] = s[h, m] + Σ_s log μ'[h, m, s]`` takes one logarithm
  per :data:`CHUNK` factors. Sibling scores within ``±`` :data:`LBP_LIMIT` keep every ``μ`` in
  ``[L·exp(-LBP_LIMIT), L]``, so neither ``E`` nor those products leave float64's range; the
  caller runs the PyTorch path for sentences with larger ones. The adjoint recomputes the
  rounds of one sentence keeping every round's messages (``O(max_iter · n³)`` per sentence,
  not per batch) and goes back through them.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._numba_math import exp as _exp
from ..backend import as_array, set_threads
from ..constants import NEG, SERIAL_WORK

LBP_LIMIT = 64.0
"""Largest ``|sibling score|`` of the compiled LBP (see the module docstring)."""
CHUNK = 8
"""Message factors multiplied before one logarithm (``L^8 · exp(-8 · 64)`` is a normal float64
for ``L`` up to 10⁴)."""

_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _pair(h, s, m, n):
    """Whether ``(h → s, h → m)`` is a factor: distinct, ``s``, ``m`` words, ``h`` ROOT or a word."""
    return 1 <= s <= n and 1 <= m <= n and h <= n and s != m and h != s and h != m


@_jit
def _softmax_columns(qT, n, P):
    """``P[s, h] = softmax over h in 0..n of q[h, s]`` for the words ``s``, from the logits
    transposed, ``qT[s, h] = q[h, s]`` (the kernels keep them so: contiguous, vectorised)."""
    for s in range(1, n + 1):
        top = qT[s, 0]
        for h in range(1, n + 1):
            top = max(top, qT[s, h])
        for h in range(n + 1):
            P[s, h] = _exp(qT[s, h] - top)
        total = 0.0
        for h in range(n + 1):
            total += P[s, h]
        for h in range(n + 1):
            P[s, h] /= total


@_jit
def _clean_arcs(s, n, out, stats):
    """``out[d, h]`` (float64 ``[L, L]``, transposed) = ``s[h, d]`` on the arcs some head choice uses (``h``
    ROOT or a word, ``d`` a word, ``h != d``), entries ``<= NEG`` as :data:`NEG`, and
    :data:`NEG` elsewhere (as ``check_arc_scores(..., fill=NEG)``); ``stats[:] = (NaN present
    1/0, smallest, largest)`` over those arcs' scores above :data:`NEG`."""
    L = s.shape[0]
    nan, lo, hi = 0.0, np.inf, -np.inf
    for h in range(L):
        for d in range(L):
            x = np.float64(s[h, d])
            use = h <= n and 1 <= d <= n and h != d
            nan = 1.0 if (use and x != x) else nan
            ok = use and x > NEG
            lo = min(lo, x if ok else np.inf)
            hi = max(hi, x if ok else -np.inf)
            out[d, h] = (NEG if x <= NEG else x) if use else NEG
    stats[0], stats[1], stats[2] = nan, lo, hi


@_jit
def _clean_factors(sib, n, off, W, stats):
    """``W[h, s, m]`` (float64 ``[n+1, n+1, n+1]``) = ``sib[h, s, m]`` on the factors (entries
    ``<= NEG`` as :data:`NEG`), ``off`` elsewhere; ``stats[:] = (NaN present 1/0, smallest,
    largest)`` over the factors' scores above :data:`NEG` (``+inf``/``-inf`` when there are
    none). One pass, per-``m`` accumulators so that the loop vectorises."""
    nan = np.zeros(n + 1)
    lo = np.full(n + 1, np.inf)
    hi = np.full(n + 1, -np.inf)
    for h in range(n + 1):
        for j in range(n + 1):
            row = j >= 1 and j != h
            for m in range(n + 1):
                x = np.float64(sib[h, j, m])
                ok = row and m >= 1 and m != j and m != h
                nan[m] = 1.0 if (ok and x != x) else nan[m]
                use = ok and x > NEG
                lo[m] = min(lo[m], x if use else np.inf)
                hi[m] = max(hi[m], x if use else -np.inf)
                W[h, j, m] = (NEG if x <= NEG else x) if ok else off
    stats[0], stats[1], stats[2] = nan.max(), lo.min(), hi.max()


@_jit
def _marginals(qT, n, P, mu, out):
    """``mu[h, d] = softmax_h q[h, d]`` for the words ``d`` (other entries of ``mu`` untouched)
    and ``out = q`` from ``qT``."""
    _softmax_columns(qT, n, P)
    for h in range(n + 1):
        for d in range(1, n + 1):
            mu[h, d] = P[d, h]
    L = qT.shape[0]
    for h in range(L):
        for d in range(L):
            out[h, d] = qT[d, h]


# ---------------------------------------------------------------------------------------------
# Mean field.
# ---------------------------------------------------------------------------------------------

@_jit
def _mfvi_rounds(sT, W, n, T, qT, P, Ps, keep):
    """``T`` rounds from ``q = s`` (clean arc scores ``[L, L]`` transposed, :func:`_clean_arcs`;
    ``qT`` the logits transposed) with the factors ``W`` of :func:`_clean_factors`
    (0 off the factors); with ``keep`` each round's ``P`` goes to ``Ps[t]``."""
    acc = np.empty(n + 1)
    qT[:, :] = sT
    for t in range(T):
        _softmax_columns(qT, n, P)
        if keep:
            Ps[t] = P
        for h in range(n + 1):
            acc[:] = 0.0
            for j in range(1, n + 1):
                p = P[j, h]
                if j == h or p == 0.0:
                    continue
                for m in range(n + 1):  # (0 off the factors: a plain product, vectorised)
                    acc[m] += p * W[h, j, m]
            for m in range(1, n + 1):
                if m != h:
                    qT[m, h] = sT[m, h] + acc[m]


@numba.njit(cache=True, parallel=True, fastmath=False)
def _mfvi(s, sib, lengths, T):
    batch, L = s.shape[0], s.shape[1]
    out = np.empty((batch, L, L))
    mu = np.zeros((batch, L, L))
    checks = np.empty((batch, 6))
    for b in numba.prange(batch):
        n = lengths[b]
        clean = np.empty((L, L))
        _clean_arcs(s[b], n, clean, checks[b, :3])
        W = np.empty((n + 1, n + 1, n + 1))
        _clean_factors(sib[b], n, 0.0, W, checks[b, 3:])
        P = np.empty((n + 1, n + 1))
        qT = np.empty((L, L))
        _mfvi_rounds(clean, W, n, T, qT, P, P.reshape((1, n + 1, n + 1)), False)
        _marginals(qT, n, P, mu[b], out[b])
    return out, mu, checks


@_jit
def _arc_gradient(s, n, g, out):
    """``out[h, d] = g[h, d]`` on the arcs :func:`_clean_arcs` reads with a score above
    :data:`NEG`, 0 elsewhere (the gradient of its masks)."""
    L = s.shape[0]
    for h in range(L):
        for d in range(L):
            use = h <= n and 1 <= d <= n and h != d and s[h, d] > NEG
            out[h, d] = g[h, d] if use else 0.0


@numba.njit(cache=True, parallel=True, fastmath=False)
def _mfvi_backward(s, sib, lengths, T, gq, want_sib):
    """``d/ds [B, L, L]`` and ``d/dsib [B, L, L, L]`` (layouts of the raw ``s`` and ``sib``; 0
    outside the arcs and factors and at masked entries) of ``Σ gq · q``."""
    batch, L = s.shape[0], s.shape[1]
    gs = np.zeros((batch, L, L))
    gsib = np.zeros((batch, L, L, L) if want_sib else (batch, 0, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        stats = np.empty(3)
        clean = np.empty((L, L))
        _clean_arcs(s[b], n, clean, stats)
        W = np.empty((n + 1, n + 1, n + 1))
        _clean_factors(sib[b], n, 0.0, W, stats)
        q = np.empty((L, L))
        Ps = np.empty((T, n + 1, n + 1))
        _mfvi_rounds(clean, W, n, T, q, np.empty((n + 1, n + 1)), Ps, True)
        Gs = np.empty((T, n + 1, n + 1))  # Gs[t]: d/dq after round t (the input of round t+1)
        G = np.zeros((n + 1, n + 1))
        total = gq[b].copy()  # d/d(clean s)
        for h in range(n + 1):
            for d in range(n + 1):
                G[h, d] = gq[b, h, d]
        gP = np.empty((n + 1, n + 1))
        for t in range(T - 1, -1, -1):
            Gs[t] = G
            P = Ps[t]
            for h in range(n + 1):  # gP[s, h] = Σ_m sib[h, s, m] G[h, m]
                for j in range(1, n + 1):
                    acc = 0.0
                    if j != h:
                        for m in range(n + 1):
                            acc += G[h, m] * W[h, j, m]
                    gP[j, h] = acc
            G = np.zeros((n + 1, n + 1))
            for j in range(1, n + 1):  # through the column softmax
                dot = 0.0
                for h in range(n + 1):
                    dot += P[j, h] * gP[j, h]
                for h in range(n + 1):
                    G[h, j] = P[j, h] * (gP[j, h] - dot)
            for h in range(n + 1):
                for d in range(n + 1):
                    total[h, d] += G[h, d]
        _arc_gradient(s[b], n, total, gs[b])
        if want_sib:  # d/dsib[h, s, m] = Σ_t P_t[s, h] G_{t+1}[h, m]
            for h in range(n + 1):
                for j in range(1, n + 1):
                    if j == h:
                        continue
                    for m in range(1, n + 1):
                        if m == j or m == h or not W[h, j, m] > NEG:
                            continue
                        acc = 0.0
                        for t in range(T):
                            acc += Ps[t, j, h] * Gs[t, h, m]
                        gsib[b, h, j, m] = acc
    return gs, gsib


# ---------------------------------------------------------------------------------------------
# Loopy belief propagation.
# ---------------------------------------------------------------------------------------------

@_jit
def _exp_factors(W, n, E):
    """``E[m, s, h] = exp(W[h, m, s])`` from the factors of :func:`_clean_factors` with
    ``off = NEG`` (so 0 off the factors and at masked entries); ``W`` is overwritten (the
    exponentials in its layout first, contiguous and vectorised, then transposed)."""
    flat = W.reshape(-1)
    for i in range(flat.shape[0]):  # (one long loop: rows of n+1 are too short to vectorise)
        flat[i] = _exp(flat[i])
    for m in range(n + 1):
        for j in range(n + 1):
            for h in range(n + 1):
                E[m, j, h] = W[h, m, j]


@_jit
def _message(P, old, E, n, L, out):
    """``out[h] = μ'[h]`` of one factor-to-variable message (module docstring); returns the
    normaliser ``Z``, ``A``."""
    A = 0.0
    B = 0.0
    for h in range(n + 1):
        a = P[h] / old[h]
        b = a * E[h]
        A += a
        B += b
        out[h] = b
    Z = L * A + B
    c = L / Z
    for h in range(n + 1):
        out[h] = c * (A + out[h])
    return Z, A


@_jit
def _lbp_rounds(sT, E, n, L, T, qT, P, mus, Ps, keep):
    """``T`` rounds from ``q = s`` (both transposed, as in :func:`_mfvi_rounds`), ``μ = 1``;
    messages in ``mus[0]`` (``[n+1, n+1, n+1]``, ``mus[0][m, s, h] = μ[h, m, s]``), or with
    ``keep`` round ``t``'s in ``mus[t+1]`` and its ``P`` in ``Ps[t]`` (``mus[0]`` stays 1)."""
    mu = mus[0]
    mu[:] = 1.0
    tmp = np.empty((2, n + 1))
    prod = np.empty(n + 1)
    acc = np.empty(n + 1)
    qT[:, :] = sT
    for t in range(T):
        _softmax_columns(qT, n, P)
        if keep:
            Ps[t] = P
            mus[t + 1] = mus[t]
            mu = mus[t + 1]
        for m in range(1, n + 1):
            for j in range(m + 1, n + 1):  # the factor of the pair {m, j}: both messages
                _message(P[j], mu[j, m], E[m, j], n, L, tmp[0])
                _message(P[m], mu[m, j], E[j, m], n, L, tmp[1])
                mu[m, j] = tmp[0]
                mu[j, m] = tmp[1]
        for m in range(1, n + 1):  # q[h, m] = s[h, m] + Σ_s log μ[h, m, s] over the factors
            acc[:] = 0.0
            prod[:] = 1.0
            count = 0
            for j in range(1, n + 1):
                if j == m:
                    continue
                for h in range(n + 1):
                    prod[h] *= 1.0 if (h == j or h == m) else mu[m, j, h]
                count += 1
                if count == CHUNK:
                    for h in range(n + 1):
                        acc[h] += math.log(prod[h])
                    prod[:] = 1.0
                    count = 0
            for h in range(n + 1):
                if h != m:
                    qT[m, h] = sT[m, h] + acc[h] + math.log(prod[h])


@numba.njit(cache=True, parallel=True, fastmath=False)
def _lbp(s, sib, lengths, T):
    batch, L = s.shape[0], s.shape[1]
    out = np.empty((batch, L, L))
    mu = np.zeros((batch, L, L))
    checks = np.empty((batch, 6))
    for b in numba.prange(batch):
        n = lengths[b]
        clean = np.empty((L, L))
        _clean_arcs(s[b], n, clean, checks[b, :3])
        E = np.empty((n + 1, n + 1, n + 1))
        _clean_factors(sib[b], n, NEG, E, checks[b, 3:])
        if checks[b, 3] > 0.0 or max(-checks[b, 4], checks[b, 5]) > LBP_LIMIT:
            continue  # refused or left to the PyTorch path by the caller
        W = E.copy()
        _exp_factors(W, n, E)
        P = np.empty((n + 1, n + 1))
        mus = np.empty((1, n + 1, n + 1, n + 1))
        qT = np.empty((L, L))
        _lbp_rounds(clean, E, n, L, T, qT, P, mus, P.reshape((1, n + 1, n + 1)), False)
        _marginals(qT, n, P, mu[b], out[b])
    return out, mu, checks


@numba.njit(cache=True, parallel=True, fastmath=False)
def _lbp_backward(s, sib, lengths, T, gq, want_sib):
    """As :func:`_mfvi_backward`, for LBP."""
    batch, L = s.shape[0], s.shape[1]
    gs = np.zeros((batch, L, L))
    gsib = np.zeros((batch, L, L, L) if want_sib else (batch, 0, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        stats = np.empty(3)
        clean = np.empty((L, L))
        _clean_arcs(s[b], n, clean, stats)
        W = np.empty((n + 1, n + 1, n + 1))
        _clean_factors(sib[b], n, NEG, W, stats)
        E = np.empty((n + 1, n + 1, n + 1))
        _exp_factors(W, n, E)
        q = np.empty((L, L))
        P = np.empty((n + 1, n + 1))
        Ps = np.empty((T, n + 1, n + 1))
        mus = np.empty((T + 1, n + 1, n + 1, n + 1))
        _lbp_rounds(clean, E, n, L, T, q, P, mus, Ps, True)
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
        for t in range(T, 0, -1):
            mu, old = mus[t], mus[t - 1]
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
                    Pj, o, e, g = Ps[t - 1, j], old[j, m], E[m, j], gmu[m, j]
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
                        a[h] = Pj[h] / o[h]
                        gb = g[h] * L / Z + gZ
                        if want_sib and e[h] != 0.0:
                            gsib[b, h, m, j] += gb * a[h] * e[h]
                        ga = gA + gb * e[h]
                        gP[j, h] += ga / o[h]
                        gprev[j, m, h] -= ga * a[h] / o[h]
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


# ---------------------------------------------------------------------------------------------
# Entry points.
# ---------------------------------------------------------------------------------------------

def _arrays(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor):
    lengths_ = as_array(lengths.long())
    set_threads(int(((lengths_ + 1) ** 3).sum()), SERIAL_WORK)
    return as_array(s), as_array(sib), lengths_


def logits(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor, max_iter: int,
           lbp: bool) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """``[B, L, L]`` logits ``q`` after ``max_iter`` rounds, the marginals ``softmax_h q`` in
    the words' columns (0 elsewhere; both in the dtype of ``s``) and ``[B, 6]`` checks of the
    arc scores (columns 0-2) and sibling scores (3-5): NaN present 1/0, smallest and largest
    score above :data:`NEG` over each sentence's arcs and factors. LBP leaves a sentence with a
    NaN or a sibling score beyond :data:`LBP_LIMIT` unset.

    Args:
        s: ``[B, L, L]`` raw arc scores ``[b, h, d]`` (float32/float64; read on the arcs a head
            choice uses, masked to :data:`NEG` at or below it and :data:`NEG` elsewhere).
        sib: ``[B, L, L, L]`` raw sibling scores ``[b, h, s, m]`` (float32/float64).
        lengths: ``[B]`` words per sentence, in ``1..L-1``.
    """
    s_, sib_, lengths_ = _arrays(s, sib, lengths)
    out, mu, checks = (_lbp if lbp else _mfvi)(s_, sib_, lengths_, max_iter)
    return torch.from_numpy(out).to(s.dtype), torch.from_numpy(mu).to(s.dtype), checks


def logits_backward(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor, max_iter: int,
                    lbp: bool, grad: torch.Tensor, want_sib: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(d/ds, d/dsib)`` of ``Σ grad · logits(...)`` with respect to the raw scores (dtypes of
    ``s`` and ``sib``, 0 where they are masked or unread; None for the second unless
    ``want_sib``)."""
    s_, sib_, lengths_ = _arrays(s, sib, lengths)
    gs, gsib = (_lbp_backward if lbp else _mfvi_backward)(s_, sib_, lengths_, max_iter,
                                                          as_array(grad.double()), want_sib)
    return (torch.from_numpy(gs).to(s.dtype),
            torch.from_numpy(gsib).to(sib.dtype) if want_sib else None)
