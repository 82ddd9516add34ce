"""Compiled CPU kernels (numba) for :class:`~synattn.structs.ConstituencyMFVI`: its ``max_iter``
rounds and their explicit adjoint, with the checks of the span scores and pair weights fused.

The factors pair only spans that start at the same word, so each start ``i`` of each sentence is
its own small problem: the logits ``q[i, i..n-1]`` and the pair weights of that start as a clean
float64 block ``W[k, j] = pairs[i, j, k]`` (0 off the factors, entries ``<= NEG`` as
:data:`NEG`), after which a round is ``q[j] = s[i, j] + Σ_k σ(q[k]) · W[k, j]``: a plain product
over contiguous rows. The raw scores are read with the masks of
:func:`~synattn.structs.cky.dp.check_span_scores` and of the factors applied, and the
statistics of their checks (NaN present, smallest and largest score above :data:`NEG`) are
returned, so that clean inputs need no PyTorch pass (the caller refuses flagged ones through the
shared checks). The helpers of :mod:`synattn.structs.dependency._vi_kernels` (thread choice,
arrays, the exponential) are shared; float64 arithmetic whatever the input dtype.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..constants import NEG
from ..dependency._vi_kernels import _arrays, _exp, _jit


@_jit
def _sigmoids(x, out):
    """``out = σ(x)`` (C-contiguous arrays of one shape) from ``exp(-|x|)``, no overflow and
    :data:`NEG` giving 0; the exponentials and the divisions in two loops, each vectorised (a
    division in the loop of the exponential keeps LLVM from vectorising it)."""
    flat, to = x.reshape(-1), out.reshape(-1)
    for i in range(flat.shape[0]):
        v = flat[i]
        to[i] = _exp(v if v < 0.0 else -v)
    for i in range(flat.shape[0]):
        e = to[i]
        r = 1.0 / (1.0 + e)
        to[i] = r if flat[i] >= 0.0 else e * r


@_jit
def _clean_spans(s, n, out, stats):
    """``out[i, j]`` (float64 ``[N, N]``) = ``s[i, j]`` on the spans ``i <= j < n`` (entries
    ``<= NEG`` as :data:`NEG`), 0 elsewhere; ``stats[:] = (NaN present 1/0, smallest, largest)``
    over the spans' scores above :data:`NEG`."""
    N = s.shape[0]
    nan, lo, hi = 0.0, np.inf, -np.inf
    for i in range(N):
        for j in range(N):
            x = np.float64(s[i, j])
            use = i <= j < n
            nan = 1.0 if (use and x != x) else nan
            ok = use and x > NEG
            lo = min(lo, x if ok else np.inf)
            hi = max(hi, x if ok else -np.inf)
            out[i, j] = (NEG if x <= NEG else x) if use else 0.0
    stats[0], stats[1], stats[2] = nan, lo, hi


@_jit
def _clean_pairs(pairs, n, W, stats):
    """``W[i, k, j]`` (float64 ``[n, n, n]``) = ``pairs[i, j, k]`` on the factors (``i <= j, k <
    n``, ``j != k``; entries ``<= NEG`` as :data:`NEG`), 0 elsewhere; ``stats`` as
    :func:`_clean_spans` over the factors."""
    nan, lo, hi = 0.0, np.inf, -np.inf
    W[:] = 0.0
    for i in range(n):
        for j in range(i, n):
            for k in range(i, n):
                x = np.float64(pairs[i, j, k])
                use = k != j
                nan = 1.0 if (use and x != x) else nan
                ok = use and x > NEG
                lo = min(lo, x if ok else np.inf)
                hi = max(hi, x if ok else -np.inf)
                W[i, k, j] = (NEG if x <= NEG else x) if use else 0.0
    stats[0], stats[1], stats[2] = nan, lo, hi


@_jit
def _rounds(s, W, n, T, q, sig, acc, keep):
    """``T`` rounds of all starts of a sentence from ``q = s`` (``[N, N]``, rows: starts; ``W``
    its ``[n, n, n]`` block); with ``keep`` round ``t``'s ``σ(q)`` goes to ``sig[t]``, else to
    ``sig[0]``. Every row is updated over all ``n`` ends (``W`` is 0 off the factors, so a
    non-span ``q`` stays ``s = 0`` and its ``σ`` multiplies only zeros): loops of a fixed length,
    vectorised, instead of the triangle's shorter ones."""
    q[:, :] = s
    for t in range(T):
        sg = sig[t if keep else 0]
        _sigmoids(q, sg)
        acc[:] = 0.0
        for i in range(n):
            for k in range(i, n):
                p = sg[i, k]
                for j in range(n):  # (0 at j = k and j < i: a plain product)
                    acc[i, j] += p * W[i, k, j]
        for i in range(n):
            for j in range(i, n):
                q[i, j] = s[i, j] + acc[i, j]


@numba.njit(cache=True, parallel=True, fastmath=False)
def _mfvi(s, pairs, lengths, T):
    batch, N = s.shape[0], s.shape[1]
    out = np.zeros((batch, N, N))
    mu = np.zeros((batch, N, N))
    checks = np.empty((batch, 6))
    for b in numba.prange(batch):
        n = lengths[b]
        clean = np.empty((N, N))
        _clean_spans(s[b], n, clean, checks[b, :3])
        W = np.empty((n, n, n))
        _clean_pairs(pairs[b], n, W, checks[b, 3:])
        sig = np.empty((1, N, N))
        _rounds(clean, W, n, T, out[b], sig, np.empty((N, N)), False)
        _sigmoids(out[b], sig[0])
        for i in range(n):
            for j in range(i, n):
                mu[b, i, j] = sig[0, i, j]
    return out, mu, checks


@numba.njit(cache=True, parallel=True, fastmath=False)
def _mfvi_backward(s, pairs, lengths, T, gq, want_pairs):
    """``d/ds [B, N, N]`` and ``d/dpairs [B, N, N, N]`` (layouts of the raw inputs; 0 outside the
    spans and factors and where the masks cut the gradient, as the PyTorch path's
    ``clamp_min``/``masked_fill``) of ``Σ gq · q``."""
    batch, N = s.shape[0], s.shape[1]
    gs = np.zeros((batch, N, N))
    gp = np.zeros((batch, N, N, N) if want_pairs else (batch, 0, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        stats = np.empty(3)
        clean = np.empty((N, N))
        _clean_spans(s[b], n, clean, stats)
        W = np.empty((n, n, n))
        _clean_pairs(pairs[b], n, W, stats)
        sig = np.empty((T, N, N))
        _rounds(clean, W, n, T, np.empty((N, N)), sig, np.empty((N, N)), True)
        acc = np.empty(N)
        G = np.empty(N)
        total = np.empty(N)
        for i in range(n):
            for j in range(i, n):
                G[j] = gq[b, i, j]
                total[j] = 0.0
            for t in range(T - 1, -1, -1):  # q_{t+1} = s + W^T σ(q_t)
                for j in range(i, n):
                    total[j] += G[j]
                if want_pairs:
                    for j in range(i, n):
                        for k in range(i, n):
                            if k != j and pairs[b, i, j, k] > NEG:
                                gp[b, i, j, k] += G[j] * sig[t, i, k]
                for k in range(i, n):
                    acc[k] = 0.0
                    for j in range(i, n):
                        acc[k] += W[i, k, j] * G[j]
                for k in range(i, n):
                    G[k] = acc[k] * sig[t, i, k] * (1.0 - sig[t, i, k])
            for j in range(i, n):  # q_0 = s; clamp_min's gradient
                gs[b, i, j] = total[j] + G[j] if s[b, i, j] >= NEG else 0.0
    return gs, gp


def logits(s: torch.Tensor, pairs: torch.Tensor, lengths: torch.Tensor, max_iter: int
           ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """``[B, N, N]`` logits after ``max_iter`` rounds (0 outside the spans), the marginals
    ``σ(q)`` on the spans (0 elsewhere; both in the dtype of ``s``) and ``[B, 6]`` checks of the
    span scores (columns 0-2) and pair weights (3-5): NaN present 1/0, smallest and largest
    value above :data:`NEG` over each sentence's spans and factors.

    Args:
        s: ``[B, N, N]`` raw span scores (float32/float64).
        pairs: ``[B, N, N, N]`` raw pair weights ``[b, i, j, k]`` (float32/float64).
        lengths: ``[B]`` words per sentence, in ``1..N``.
    """
    s_, pairs_, lengths_ = _arrays(s, pairs, lengths)
    out, mu, checks = _mfvi(s_, pairs_, lengths_, max_iter)
    return torch.from_numpy(out).to(s.dtype), torch.from_numpy(mu).to(s.dtype), checks


def logits_backward(s: torch.Tensor, pairs: torch.Tensor, lengths: torch.Tensor, max_iter: int,
                    grad: torch.Tensor, want_pairs: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(d/ds, d/dpairs)`` of ``Σ grad · logits(...)`` with respect to the raw inputs (dtypes of
    ``s`` and ``pairs``; None for the second unless ``want_pairs``)."""
    s_, pairs_, lengths_ = _arrays(s, pairs, lengths)
    gs, gp = _mfvi_backward(s_, pairs_, lengths_, max_iter, grad.detach().double().contiguous().numpy(),
                            want_pairs)
    return torch.from_numpy(gs).to(s.dtype), torch.from_numpy(gp).to(pairs.dtype) if want_pairs else None
