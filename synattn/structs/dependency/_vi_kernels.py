"""Compiled CPU kernels (numba) for :class:`~synattn.structs.DependencyMFVI` and
:class:`~synattn.structs.DependencyLBP`: their ``max_iter`` rounds of updates and the explicit
adjoint of those rounds (the backward), reading the raw sibling scores in place.

They compute what the PyTorch path of :mod:`synattn.structs.dependency.second_order_vi` computes,
up to rounding (the tests compare the two, and the adjoint with ``gradcheck``), without its
``[B, n+1, n+1, n+1]`` temporaries: the pair mask (``h``, ``s``, ``m`` distinct, ``s``, ``m``
words, ``h`` ROOT or a word) and the mask value (entries ``<= NEG`` are :data:`NEG`) are applied
as the sibling scores are read, and entries outside the pairs are never read (they may be NaN).
One sentence per ``numba.prange`` iteration (a serial kernel below
:data:`~synattn.structs.constants.SERIAL_WORK`), float64 arithmetic whatever the input dtype,
the results written in the input's dtype. The kernels also read the raw arc scores (masks of
``check_arc_scores(..., fill=NEG)`` applied and its checks' statistics returned, reduced over the
batch, so that clean inputs need no PyTorch pass), copy each sentence's factors once into a clean
block (then every round is a plain product), keep the logits and marginals as ``[h, d]`` rows
padded to :data:`LANES` entries (the softmax over heads runs along the columns, across them:
rows of ``n + 1`` entries are too short for LLVM's vectorised loops, whole rows of vectors are
not) and return the marginals with the logits.

- **MFVI**: per round, the column softmax ``P[s, h] = softmax_h q[h, s]`` and
  ``q[h, m] = s[h, m] + Σ_s P[s, h] · sib[h, s, m]`` (log-linear, any score range); the adjoint
  keeps the ``P`` of every round (``O(max_iter · n²)``).
- **LBP** in linear space: with the messages ``μ = exp(M)`` and ``E = exp(sib)`` (computed once
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
from ..backend import as_array, set_threads
from ..constants import NEG, SERIAL_WORK

LBP_LIMIT = 64.0
"""Largest ``|sibling score|`` of the compiled LBP (see the module docstring)."""
LOG_RANGE = 700.0
"""``|log x|`` below which a float64 ``x`` is a normal number (with a margin)."""

LANES = 8
"""Rows of the MFVI kernels are padded to a multiple of this many entries (one AVX-512 vector of
float64), so that LLVM's vectorised loops cover them without a scalar remainder."""

_jit = numba.njit(cache=True, fastmath=False, error_model="numpy")
# (error_model="numpy": a float division has no zero check, so loops with one vectorise)


@_jit
def _pair(h, s, m, n):
    """Whether ``(h → s, h → m)`` is a factor: distinct, ``s``, ``m`` words, ``h`` ROOT or a word."""
    return 1 <= s <= n and 1 <= m <= n and h <= n and s != m and h != s and h != m


# ---------------------------------------------------------------------------------------------
# Mean field: rows padded to LANES entries, the logits and marginals kept as [h, d] rows (the
# softmax over heads runs along the columns, vectorised across them), the factors in the
# siblings' dtype.
# ---------------------------------------------------------------------------------------------

@_jit
def _width(n):
    """Padded row length for the ``n + 1`` heads or dependents of a sentence of ``n`` words."""
    return (n + LANES) // LANES * LANES


@_jit
def _arc_rows(s, n, S, stats):
    """``S[h, d]`` (float64 ``[n+1, Lp]``) = ``s[h, d]`` on the arcs some head choice uses (``h``
    ROOT or a word, ``d`` a word, ``h != d``), entries ``<= NEG`` as :data:`NEG`, and :data:`NEG`
    elsewhere and in the padding (as ``check_arc_scores(..., fill=NEG)``); ``stats[:] = (NaN
    present 1/0, smallest, largest)`` over those arcs' scores above :data:`NEG`."""
    nan, lo, hi = 0.0, np.inf, -np.inf
    Lp = S.shape[1]
    for h in range(n + 1):
        row = S[h]
        for d in range(n + 1):
            x = np.float64(s[h, d])
            use = 1 <= d and h != d
            nan = 1.0 if (use and x != x) else nan
            ok = use and x > NEG
            lo = min(lo, x if ok else np.inf)
            hi = max(hi, x if ok else -np.inf)
            row[d] = (NEG if x <= NEG else x) if use else NEG
        for d in range(n + 1, Lp):
            row[d] = NEG
    stats[0], stats[1], stats[2] = nan, lo, hi


@_jit
def _bits(x):
    """The bits of a float64 as an int64 (ordered as the floats for ``x >= 0``, NaN last)."""
    return np.float64(x).view(np.int64)


@_jit
def _from_bits(i):
    """The float64 of :func:`_bits`."""
    return np.int64(i).view(np.float64)


@_jit
def _factor_rows(sib, n, W, stats, off):
    """``W[h, s, m]`` (``[n+1, n+1, Lp]``, the siblings' dtype) = ``sib[h, s, m]`` on the factors
    (entries ``<= NEG`` as :data:`NEG`), ``off`` (0 or :data:`NEG`) elsewhere (rows ``s = 0``,
    ``s = h`` and the padding included); ``stats[:] = (NaN present 1/0, -top, top)`` with
    ``top`` the largest ``|score|`` above :data:`NEG` over the factors.

    Rows of ``n + 1`` entries are too short for vectorised loops with per-entry masks: each row
    is copied as it is (a memory copy), the entries that are no factor are set one by one,
    and one flat loop over the whole block then masks the scores and gathers the statistics
    (``off`` leaves them unchanged: a NaN or infinite factor shows up as the largest magnitude's
    bits, an integer maximum that vectorises)."""
    K = n + 1
    for h in range(K):
        W[h, 0, :] = off
        W[h, h, :] = off
        for j in range(1, K):
            if j == h:
                continue
            src = sib[h, j]
            dst = W[h, j]
            for m in range(K):
                dst[m] = src[m]
            for m in range(K, W.shape[2]):
                dst[m] = off
            dst[0] = off
            dst[j] = off
            dst[h] = off
    flat = W.reshape(-1)
    top = np.int64(0)  # the bits of the largest |x| above NEG, NaN above +inf
    for i in range(flat.shape[0]):
        x = np.float64(flat[i])
        masked = x <= NEG
        bits = _bits(0.0 if masked else abs(x))
        top = bits if bits > top else top
        flat[i] = NEG if masked else flat[i]
    largest = _from_bits(top)
    stats[0] = 1.0 if largest != largest else 0.0
    stats[1], stats[2] = (-largest, largest) if largest == largest else (0.0, 0.0)


@_jit
def _softmax_heads(Q, n, P, top, total):
    """``P[h, d] = softmax over h in 0..n of Q[h, d]`` for every column ``d`` of the rows
    ``[n+1, Lp]`` (each loop runs along a row: vectorised)."""
    Lp = Q.shape[1]
    top[:] = Q[0]
    for h in range(1, n + 1):
        q = Q[h]
        for d in range(Lp):
            x = q[d]
            top[d] = x if x > top[d] else top[d]
    total[:] = 0.0
    for h in range(n + 1):
        q, p = Q[h], P[h]
        for d in range(Lp):
            e = _exp(q[d] - top[d])
            p[d] = e
            total[d] += e
    for h in range(n + 1):
        p = P[h]
        for d in range(Lp):
            p[d] /= total[d]


@_jit
def _mix(p, Wh, n, acc):
    """``acc = Σ_{s=1..n} p[s] · Wh[s]`` (rows ``[n+1, Lp]``), in the order of ``s``; four rows
    per pass over ``acc`` (the same roundings as one at a time)."""
    Lp = acc.shape[0]
    acc[:] = 0.0
    j = 1
    while j + 3 <= n:
        p0, p1, p2, p3 = p[j], p[j + 1], p[j + 2], p[j + 3]
        r0, r1, r2, r3 = Wh[j], Wh[j + 1], Wh[j + 2], Wh[j + 3]
        for m in range(Lp):
            acc[m] = (((acc[m] + p0 * r0[m]) + p1 * r1[m]) + p2 * r2[m]) + p3 * r3[m]
        j += 4
    while j <= n:
        pj, r = p[j], Wh[j]
        for m in range(Lp):
            acc[m] += pj * r[m]
        j += 1


@_jit
def _mfvi_rounds(S, W, n, T, Q, P, Ps, keep):
    """``T`` rounds from ``q = s`` (arc rows of :func:`_arc_rows`, logits in ``Q``) with the
    factors ``W`` of :func:`_factor_rows`; ``P`` ends as the marginals of the last logits, and
    with ``keep`` each round's ``P`` goes to ``Ps[t]``."""
    Lp = S.shape[1]
    acc = np.empty(Lp)
    top = np.empty(Lp)
    total = np.empty(Lp)
    Q[:, :] = S
    for t in range(T):
        _softmax_heads(Q, n, P, top, total)
        if keep:
            Ps[t] = P
        for h in range(n + 1):
            _mix(P[h], W[h], n, acc)
            q, s = Q[h], S[h]
            for m in range(Lp):
                q[m] = s[m] + acc[m]
    _softmax_heads(Q, n, P, top, total)


@_jit
def _mfvi_sentence(s, sib, n, T, out, mu, checks):
    """One sentence: logits ``out`` and marginals ``mu`` (``[L, L]``; :data:`NEG` and 0 outside
    the sentence) and ``checks`` (``[6]``, see :func:`logits`)."""
    K, Lp = n + 1, _width(n)
    S = np.empty((K, Lp))
    _arc_rows(s, n, S, checks[:3])
    W = np.empty((K, K, Lp), sib.dtype)
    _factor_rows(sib, n, W, checks[3:], 0.0)
    P = np.empty((K, Lp))
    Q = np.empty((K, Lp))
    _mfvi_rounds(S, W, n, T, Q, P, P.reshape((1, K, Lp)), False)
    _write(Q, P, n, out, mu)


@_jit
def _write(Q, P, n, out, mu):
    """The logits ``out`` and marginals ``mu`` (``[L, L]``) of a sentence from its rows ``Q``
    and ``P`` (:data:`NEG` and 0 outside the sentence, 0 in ROOT's column of ``mu``)."""
    L = out.shape[0]
    for h in range(L):
        for d in range(L):
            inside = h <= n and d <= n
            out[h, d] = Q[h, d] if inside else NEG
            mu[h, d] = P[h, d] if inside and d >= 1 else 0.0


@_jit
def _summary(checks, out):
    """``out[k] = (NaN present, smallest, largest)`` over the batch of the per-sentence
    ``checks`` (``[B, 6]``) of the arcs (``k = 0``) and the siblings (``k = 1``)."""
    for k in range(2):
        out[k, 0], out[k, 1], out[k, 2] = 0.0, np.inf, -np.inf
        for b in range(checks.shape[0]):
            out[k, 0] = max(out[k, 0], checks[b, 3 * k])
            out[k, 1] = min(out[k, 1], checks[b, 3 * k + 1])
            out[k, 2] = max(out[k, 2], checks[b, 3 * k + 2])


@numba.njit(cache=True, fastmath=False, error_model="numpy")
def _mfvi(s, sib, lengths, T, out, mu, checks, summary):
    for b in range(s.shape[0]):
        _mfvi_sentence(s[b], sib[b], lengths[b], T, out[b], mu[b], checks[b])
    _summary(checks, summary)


@numba.njit(cache=True, parallel=True, fastmath=False, error_model="numpy")
def _mfvi_parallel(s, sib, lengths, T, out, mu, checks, summary):
    for b in numba.prange(s.shape[0]):
        _mfvi_sentence(s[b], sib[b], lengths[b], T, out[b], mu[b], checks[b])
    _summary(checks, summary)


@_jit
def _arc_gradient(s, n, g, out):
    """``out[h, d] = g[h, d]`` on the arcs :func:`_arc_rows` reads with a score above
    :data:`NEG`, 0 elsewhere (the gradient of its masks)."""
    L = s.shape[0]
    for h in range(L):
        for d in range(L):
            use = h <= n and 1 <= d <= n and h != d and s[h, d] > NEG
            out[h, d] = g[h, d] if use else 0.0


@numba.njit(cache=True, parallel=True, fastmath=False, error_model="numpy")
def _mfvi_backward(s, sib, lengths, T, gq, want_sib):
    """``d/ds [B, L, L]`` and ``d/dsib [B, L, L, L]`` (layouts of the raw ``s`` and ``sib``; 0
    outside the arcs and factors and at masked entries) of ``Σ gq · q``."""
    batch, L = s.shape[0], s.shape[1]
    gs = np.zeros((batch, L, L))
    gsib = np.zeros((batch, L, L, L) if want_sib else (batch, 0, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        K, Lp = n + 1, _width(n)
        stats = np.empty(3)
        S = np.empty((K, Lp))
        _arc_rows(s[b], n, S, stats)
        W = np.empty((K, K, Lp), sib.dtype)
        _factor_rows(sib[b], n, W, stats, 0.0)
        Ps = np.empty((T, K, Lp))
        _mfvi_rounds(S, W, n, T, np.empty((K, Lp)), np.empty((K, Lp)), Ps, True)
        Gs = np.empty((T, K, K))  # Gs[t]: d/dq after round t (the input of round t+1)
        G = np.empty((K, K))
        total = gq[b].copy()  # d/d(clean s)
        for h in range(K):
            for d in range(K):
                G[h, d] = gq[b, h, d]
        gP = np.empty((K, K))  # gP[h, s] = Σ_m sib[h, s, m] G[h, m]
        for t in range(T - 1, -1, -1):
            Gs[t] = G
            P = Ps[t]
            for h in range(K):
                for j in range(1, K):
                    acc = 0.0
                    if j != h:
                        for m in range(K):
                            acc += G[h, m] * W[h, j, m]
                    gP[h, j] = acc
            G = np.zeros((K, K))
            for j in range(1, K):  # through the column softmax
                dot = 0.0
                for h in range(K):
                    dot += P[h, j] * gP[h, j]
                for h in range(K):
                    G[h, j] = P[h, j] * (gP[h, j] - dot)
            for h in range(K):
                for d in range(K):
                    total[h, d] += G[h, d]
        _arc_gradient(s[b], n, total, gs[b])
        if want_sib:  # d/dsib[h, s, m] = Σ_t P_t[h, s] G_{t+1}[h, m]
            for h in range(K):
                for j in range(1, K):
                    if j == h:
                        continue
                    for m in range(1, K):
                        if m == j or m == h or not W[h, j, m] > NEG:
                            continue
                        acc = 0.0
                        for t in range(T):
                            acc += Ps[t, h, j] * Gs[t, h, m]
                        gsib[b, h, j, m] = acc
    return gs, gsib


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


# ---------------------------------------------------------------------------------------------
# Entry points.
# ---------------------------------------------------------------------------------------------

def _inputs(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor):
    """The inputs as arrays and the kernel's work (``Σ (n+1)³``; its bound ``B · L³`` when
    that is below :data:`~synattn.structs.constants.SERIAL_WORK`)."""
    lengths_ = as_array(lengths.long())
    work = s.shape[0] * s.shape[1] ** 3
    if work >= SERIAL_WORK:
        work = int(((lengths_ + 1) ** 3).sum())
    return as_array(s), as_array(sib), lengths_, work


def _arrays(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor):
    """The inputs as arrays, the threads of the next (parallel) kernel set for their work."""
    s_, sib_, lengths_, work = _inputs(s, sib, lengths)
    set_threads(work, SERIAL_WORK)
    return s_, sib_, lengths_


def logits(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor, max_iter: int,
           lbp: bool) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """``[B, L, L]`` logits ``q`` after ``max_iter`` rounds, the marginals ``softmax_h q`` in
    the words' columns (0 elsewhere; both in the dtype of ``s``) and ``[2, 3]`` checks of the
    arc scores (row 0) and sibling scores (row 1): NaN present 1/0, smallest and largest score
    above :data:`NEG` over the batch's arcs and factors. LBP leaves a sentence with a NaN or a
    sibling score beyond :data:`LBP_LIMIT` unset.

    Args:
        s: ``[B, L, L]`` raw arc scores ``[b, h, d]`` (float32/float64; read on the arcs a head
            choice uses, masked to :data:`NEG` at or below it and :data:`NEG` elsewhere).
        sib: ``[B, L, L, L]`` raw sibling scores ``[b, h, s, m]`` (float32/float64).
        lengths: ``[B]`` words per sentence, in ``1..L-1``.
    """
    s_, sib_, lengths_, work = _inputs(s, sib, lengths)
    # below SERIAL_WORK (or with one thread) the serial kernel runs, without numba's thread
    # launch (a fixed cost of tens of microseconds at these sizes)
    parallel = work >= SERIAL_WORK and set_threads(work, SERIAL_WORK) > 1
    kernel = ((_lbp_parallel if parallel else _lbp) if lbp
              else (_mfvi_parallel if parallel else _mfvi))
    out = np.empty(s.shape, s_.dtype)
    mu = np.empty(s.shape, s_.dtype)
    summary = np.empty((2, 3))
    kernel(s_, sib_, lengths_, max_iter, out, mu, np.empty((s.shape[0], 6)), summary)
    return torch.from_numpy(out), torch.from_numpy(mu), summary


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
