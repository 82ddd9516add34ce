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

- **MFVI** (here): per round, the column softmax ``P[s, h] = softmax_h q[h, s]`` and
  ``q[h, m] = s[h, m] + Σ_s P[s, h] · sib[h, s, m]`` (log-linear, any score range); the adjoint
  keeps the ``P`` of every round (``O(max_iter · n²)``).
- **LBP**: :mod:`synattn.structs.dependency._lbp_kernels` (its rounds in linear space, built on
  the row helpers here).

Both give ``logits(s, sib, lengths, max_iter)`` and ``logits_backward(...)`` (:func:`run_rounds`,
:func:`run_adjoint`); :mod:`synattn.structs.dependency.second_order_vi` calls the module of its
algorithm.
"""

from __future__ import annotations

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


def run_rounds(serial, parallel, s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor,
               max_iter: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """``[B, L, L]`` logits ``q`` after ``max_iter`` rounds of the kernel ``serial`` (or
    ``parallel``, one sentence per thread), the marginals ``softmax_h q`` in the words' columns
    (0 elsewhere; both in the dtype of ``s``) and ``[2, 3]`` checks of the arc scores (row 0) and
    sibling scores (row 1): NaN present 1/0, smallest and largest score above :data:`NEG` over
    the batch's arcs and factors. LBP leaves a sentence with a NaN or a sibling score beyond
    :data:`LBP_LIMIT` unset.

    Args:
        s: ``[B, L, L]`` raw arc scores ``[b, h, d]`` (float32/float64; read on the arcs a head
            choice uses, masked to :data:`NEG` at or below it and :data:`NEG` elsewhere).
        sib: ``[B, L, L, L]`` raw sibling scores ``[b, h, s, m]`` (float32/float64).
        lengths: ``[B]`` words per sentence, in ``1..L-1``.
    """
    s_, sib_, lengths_, work = _inputs(s, sib, lengths)
    # below SERIAL_WORK (or with one thread) the serial kernel runs, without numba's thread
    # launch (a fixed cost of tens of microseconds at these sizes)
    kernel = parallel if work >= SERIAL_WORK and set_threads(work, SERIAL_WORK) > 1 else serial
    out = np.empty(s.shape, s_.dtype)
    mu = np.empty(s.shape, s_.dtype)
    summary = np.empty((2, 3))
    kernel(s_, sib_, lengths_, max_iter, out, mu, np.empty((s.shape[0], 6)), summary)
    return torch.from_numpy(out), torch.from_numpy(mu), summary


def run_adjoint(backward, s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor, max_iter: int,
                grad: torch.Tensor, want_sib: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(d/ds, d/dsib)`` of ``Σ grad · logits(...)`` with respect to the raw scores by the
    adjoint kernel ``backward`` (dtypes of ``s`` and ``sib``, 0 where they are masked or unread;
    None for the second unless ``want_sib``)."""
    s_, sib_, lengths_ = _arrays(s, sib, lengths)
    gs, gsib = backward(s_, sib_, lengths_, max_iter, as_array(grad.double()), want_sib)
    return (torch.from_numpy(gs).to(s.dtype),
            torch.from_numpy(gsib).to(sib.dtype) if want_sib else None)


def logits(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor,
           max_iter: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """MFVI's logits, marginals and checks after ``max_iter`` rounds (:func:`run_rounds`)."""
    return run_rounds(_mfvi, _mfvi_parallel, s, sib, lengths, max_iter)


def logits_backward(s: torch.Tensor, sib: torch.Tensor, lengths: torch.Tensor, max_iter: int,
                    grad: torch.Tensor, want_sib: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The adjoint of MFVI's rounds (:func:`run_adjoint`)."""
    return run_adjoint(_mfvi_backward, s, sib, lengths, max_iter, grad, want_sib)
