"""Eisner's algorithm (projective dependency CRF) as Triton kernels: three launches a call.

The recursions are those of :mod:`synattn.structs.dependency.eisner` (Eisner 1996), written here
over charts indexed by span start and end, ``X[i, j]`` for the span ``(i, j)``, one program per
sentence, the span widths in a loop inside the kernel:

- :func:`_inside` — ``log Z`` (or the best score, ``VITERBI``), and on dual numbers (``DUAL``)
  its tangent in a direction ``g``;
- :func:`_outside` — the outside scores ``O_X`` of every item, in log space, read by pulling from
  the wider items that use it (no scatter, no atomics), and the arc marginals
  ``μ(h→d) = exp(I(h,d) + O_I(h,d) - log Z)`` with, under ``DUAL``, their tangent ``H g`` (the
  Hessian-vector product that is the marginals' backward);
- :func:`_backtrack` — the best tree from the max-semiring chart, top-down, each used span routed
  to its first best split (the same tie rule as the other backends).

Charts: ``CH [B, 4, L, L]`` holds ``C←, C→, I←, I→`` (``CL, CR, IL, IR``), ``OUT [B, 5, L, L]``
their outside scores and that of the split sum ``S``; ``L = N + 1`` with ROOT at index 0. Only
items inside a sentence are ever read, so the charts need no initialisation (``torch.empty``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import NEG_INF, gather_pair, lse_finish, signature, tile, tl_dtype

CL, CR, IL, IR, SS = (tl.constexpr(c) for c in range(5))  # chart channels


@triton.jit
def _inside(S, G, LEN, CH, DCH, LOGZ, DLOGZ, L, MULTIROOT: tl.constexpr, VITERBI: tl.constexpr,
            DUAL: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    LL = L * L
    s, g = S + b * LL, G + b * LL
    ch, dch = CH + b * 4 * LL, DCH + b * 4 * LL
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    for i0 in range(0, n + 1, BI):  # width 0: C(i, i) = 0
        i = i0 + ri
        ok = i <= n
        for c in range(2):
            tl.store(ch + c * LL + i * L + i, zero, mask=ok)
            if DUAL:
                tl.store(dch + c * LL + i * L + i, zero, mask=ok)
    tl.debug_barrier()
    for w in range(1, n + 1):
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            j = i + w
            # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, w, BK):
                r = i[:, None] + (k0 + rk)[None, :]
                mask = ok[:, None] & (r < j[:, None])
                x = CR * LL + i[:, None] * L + r
                y = CL * LL + (r + 1) * L + j[:, None]
                m, acc, dacc = gather_pair(ch + x, ch + y, dch + x, dch + y, mask, m, acc, dacc,
                                       VITERBI, DUAL)
            split, dsplit = lse_finish(m, acc, dacc, VITERBI, DUAL)
            # I←(i, j) = S(i, j) + s[j, i],  I→(i, j) = S(i, j) + s[i, j]
            tl.store(ch + IL * LL + i * L + j, split + tl.load(s + j * L + i, mask=ok), mask=ok)
            tl.store(ch + IR * LL + i * L + j, split + tl.load(s + i * L + j, mask=ok), mask=ok)
            if DUAL:
                tl.store(dch + IL * LL + i * L + j, dsplit + tl.load(g + j * L + i, mask=ok), mask=ok)
                tl.store(dch + IR * LL + i * L + j, dsplit + tl.load(g + i * L + j, mask=ok), mask=ok)
        tl.debug_barrier()
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            j = i + w
            # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, w, BK):
                r = i[:, None] + (k0 + rk)[None, :]
                mask = ok[:, None] & (r < j[:, None])
                x = CL * LL + i[:, None] * L + r
                y = IL * LL + r * L + j[:, None]
                m, acc, dacc = gather_pair(ch + x, ch + y, dch + x, dch + y, mask, m, acc, dacc,
                                       VITERBI, DUAL)
            left, dleft = lse_finish(m, acc, dacc, VITERBI, DUAL)
            # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, w, BK):
                r = i[:, None] + 1 + (k0 + rk)[None, :]
                mask = ok[:, None] & (r <= j[:, None])
                x = IR * LL + i[:, None] * L + r
                y = CR * LL + r * L + j[:, None]
                m, acc, dacc = gather_pair(ch + x, ch + y, dch + x, dch + y, mask, m, acc, dacc,
                                       VITERBI, DUAL)
            right, dright = lse_finish(m, acc, dacc, VITERBI, DUAL)
            if not MULTIROOT:  # ROOT's complete span must cover the whole sentence
                dead = (i == 0) & (w != n)
                right = tl.where(dead, -1e9, right)
                dright = tl.where(dead, 0.0, dright)
            tl.store(ch + CL * LL + i * L + j, left, mask=ok)
            tl.store(ch + CR * LL + i * L + j, right, mask=ok)
            if DUAL:
                tl.store(dch + CL * LL + i * L + j, dleft, mask=ok)
                tl.store(dch + CR * LL + i * L + j, dright, mask=ok)
        tl.debug_barrier()
    tl.store(LOGZ + b, tl.load(ch + CR * LL + n))  # log Z = C→(0, n)
    if DUAL:
        tl.store(DLOGZ + b, tl.load(dch + CR * LL + n))


@triton.jit
def _outside(S, G, LEN, CH, DCH, OUT, DOUT, LOGZ, DLOGZ, MU, DMU, L, MULTIROOT: tl.constexpr,
             DUAL: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    LL = L * L
    s, g, mu, dmu = S + b * LL, G + b * LL, MU + b * LL, DMU + b * LL
    ch, dch = CH + b * 4 * LL, DCH + b * 4 * LL
    out, dout = OUT + b * 5 * LL, DOUT + b * 5 * LL
    log_z = tl.load(LOGZ + b)
    dlog_z = log_z
    if DUAL:
        dlog_z = tl.load(DLOGZ + b)
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    for w in range(n, 0, -1):
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            e = i + w
            # O_C→(i, e) = ⊕_{j>e} O_S(i, j) ⊗ C←(e+1, j)  ⊕  ⊕_{h<i} O_C→(h, e) ⊗ I→(h, i)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, n - i0 - w, BK):
                jj = e[:, None] + 1 + (k0 + rk)[None, :]
                mask = ok[:, None] & (jj <= n)
                x = SS * LL + i[:, None] * L + jj
                y = CL * LL + (e[:, None] + 1) * L + jj
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            for k0 in range(0, i0 + BI, BK):
                h = (k0 + rk)[None, :]
                mask = ok[:, None] & (h < i[:, None])
                x = CR * LL + h * L + e[:, None]
                y = IR * LL + h * L + i[:, None]
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            right, dright = lse_finish(m, acc, dacc, False, DUAL)
            top = (i == 0) & (w == n)
            right = tl.where(top, 0.0, right)  # C→(0, n) is log Z itself
            if not MULTIROOT:  # a masked C→(0, w) passes nothing down
                right = tl.where((i == 0) & (w != n), NEG_INF, right)
            # O_C←(i, e) = ⊕_{h<i} O_S(h, e) ⊗ C→(h, i-1)  ⊕  ⊕_{j>e} O_C←(i, j) ⊗ I←(e, j)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, i0 + BI, BK):
                h = (k0 + rk)[None, :]
                mask = ok[:, None] & (h < i[:, None])
                x = SS * LL + h * L + e[:, None]
                y = CR * LL + h * L + i[:, None] - 1
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            for k0 in range(0, n - i0 - w, BK):
                jj = e[:, None] + 1 + (k0 + rk)[None, :]
                mask = ok[:, None] & (jj <= n)
                x = CL * LL + i[:, None] * L + jj
                y = IL * LL + e[:, None] * L + jj
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            left, dleft = lse_finish(m, acc, dacc, False, DUAL)
            tl.store(out + CR * LL + i * L + e, right, mask=ok)
            tl.store(out + CL * LL + i * L + e, left, mask=ok)
            if DUAL:
                tl.store(dout + CR * LL + i * L + e, tl.where(right == NEG_INF, 0.0, dright), mask=ok)
                tl.store(dout + CL * LL + i * L + e, dleft, mask=ok)
        tl.debug_barrier()
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            e = i + w
            # O_I→(i, e) = ⊕_{j>=e} O_C→(i, j) ⊗ C→(e, j)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, n + 1 - i0 - w, BK):
                jj = e[:, None] + (k0 + rk)[None, :]
                mask = ok[:, None] & (jj <= n)
                x = CR * LL + i[:, None] * L + jj
                y = CR * LL + e[:, None] * L + jj
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            o_right, do_right = lse_finish(m, acc, dacc, False, DUAL)
            # O_I←(i, e) = ⊕_{h<=i} O_C←(h, e) ⊗ C←(h, i)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, i0 + BI, BK):
                h = (k0 + rk)[None, :]
                mask = ok[:, None] & (h <= i[:, None])
                x = CL * LL + h * L + e[:, None]
                y = CL * LL + h * L + i[:, None]
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            o_left, do_left = lse_finish(m, acc, dacc, False, DUAL)
            # O_S(i, e) = O_I←(i, e) ⊗ s[e, i]  ⊕  O_I→(i, e) ⊗ s[i, e]
            s_left = tl.load(s + e * L + i, mask=ok, other=0.0)
            s_right = tl.load(s + i * L + e, mask=ok, other=0.0)
            t1, t2 = o_left + s_left, o_right + s_right
            top = tl.maximum(t1, t2)
            safe = tl.where(top == NEG_INF, 0.0, top)
            e1, e2 = tl.exp(t1 - safe), tl.exp(t2 - safe)
            o_split = tl.where(top == NEG_INF, NEG_INF, safe + tl.log(tl.where(top == NEG_INF, 1.0, e1 + e2)))
            tl.store(out + SS * LL + i * L + e, o_split, mask=ok)
            # μ(i→e) = exp(I→(i, e) ⊗ O_I→(i, e) - log Z), μ(e→i) likewise (no arc into ROOT)
            in_right = tl.load(ch + IR * LL + i * L + e, mask=ok, other=0.0)
            in_left = tl.load(ch + IL * LL + i * L + e, mask=ok, other=0.0)
            mu_right = tl.exp(in_right + o_right - log_z)
            mu_left = tl.where(i > 0, tl.exp(in_left + o_left - log_z), 0.0)
            tl.store(mu + i * L + e, mu_right, mask=ok)
            tl.store(mu + e * L + i, mu_left, mask=ok)
            if DUAL:
                total = e1 + e2
                g_left = tl.load(g + e * L + i, mask=ok, other=0.0)
                g_right = tl.load(g + i * L + e, mask=ok, other=0.0)
                d_split = tl.where(total > 0, (e1 * (do_left + g_left) + e2 * (do_right + g_right))
                                   / tl.where(total > 0, total, 1.0), 0.0)
                tl.store(dout + SS * LL + i * L + e, d_split, mask=ok)
                d_in_right = tl.load(dch + IR * LL + i * L + e, mask=ok, other=0.0)
                d_in_left = tl.load(dch + IL * LL + i * L + e, mask=ok, other=0.0)
                tl.store(dmu + i * L + e, tl.where(mu_right > 0, mu_right * (d_in_right + do_right - dlog_z),
                                                   0.0), mask=ok)
                tl.store(dmu + e * L + i, tl.where(mu_left > 0, mu_left * (d_in_left + do_left - dlog_z),
                                                   0.0), mask=ok)
        tl.debug_barrier()


@triton.jit
def _best_split(ch, x_base, y_base, x_row, x_col, y_row, y_col, ok, count, L,
                DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    """The first ``k < count`` maximising ``X[x_row, x_col + k] + Y[y_row + k, y_col]`` per row
    (rows where ``ok``)."""
    rk = tl.arange(0, BK)
    best = tl.full([BI], NEG_INF, DTYPE)
    where = tl.zeros([BI], tl.int32)
    for k0 in range(0, count, BK):
        k = (k0 + rk)[None, :]
        mask = ok[:, None] & (k < count)
        t = (tl.load(ch + x_base + x_row[:, None] * L + x_col[:, None] + k, mask=mask, other=NEG_INF)
             + tl.load(ch + y_base + (y_row[:, None] + k) * L + y_col[:, None], mask=mask, other=NEG_INF))
        chunk_best = tl.max(t, 1)
        chunk_at = tl.argmax(t, 1).to(tl.int32) + k0
        better = chunk_best > best
        where = tl.where(better, chunk_at, where)
        best = tl.where(better, chunk_best, best)
    return where


@triton.jit
def _backtrack(LEN, CH, FLAG, ARCS, L, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    """The best tree from the max-semiring chart: ``FLAG [B, 4, L, L]`` (zeros on entry) marks the
    items used, ``ARCS [B, L, L]`` (zeros on entry) gets 1 at each arc ``h → d``."""
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    LL = L * L
    ch, flag, arcs = CH + b * 4 * LL, FLAG + b * 4 * LL, ARCS + b * LL
    ri = tl.arange(0, BI)
    tl.store(flag + CR * LL + n, 1.0)  # C→(0, n) is used (FLAG is zeros on entry)
    tl.debug_barrier()
    one = tl.full([BI], 1.0, DTYPE)
    for w in range(n, 0, -1):
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            e = i + w
            # C→(i, e) = I→(i, r) ⊗ C→(r, e) at its best r in (i, e]
            used = (i <= n - w) & (tl.load(flag + CR * LL + i * L + e, mask=i <= n - w, other=0.0) > 0)
            r = i + 1 + _best_split(ch, IR * LL, CR * LL, i, i + 1, i + 1, e, used, w, L, DTYPE, BI, BK)
            tl.store(flag + IR * LL + i * L + r, one, mask=used)
            tl.store(flag + CR * LL + r * L + e, one, mask=used & (r < e))
            # C←(i, e) = C←(i, r) ⊗ I←(r, e) at its best r in [i, e)
            used = (i <= n - w) & (tl.load(flag + CL * LL + i * L + e, mask=i <= n - w, other=0.0) > 0)
            r = i + _best_split(ch, CL * LL, IL * LL, i, i, i, e, used, w, L, DTYPE, BI, BK)
            tl.store(flag + IL * LL + r * L + e, one, mask=used)
            tl.store(flag + CL * LL + i * L + r, one, mask=used & (r > i))
        tl.debug_barrier()
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            e = i + w
            ok = i <= n - w
            to_right = ok & (tl.load(flag + IR * LL + i * L + e, mask=ok, other=0.0) > 0)
            to_left = ok & (tl.load(flag + IL * LL + i * L + e, mask=ok, other=0.0) > 0)
            tl.store(arcs + i * L + e, one, mask=to_right)
            tl.store(arcs + e * L + i, one, mask=to_left)
            # S(i, e) = C→(i, r) ⊗ C←(r+1, e) at its best r in [i, e)
            used = to_right | to_left
            r = i + _best_split(ch, CR * LL, CL * LL, i, i, i + 1, e, used, w, L, DTYPE, BI, BK)
            tl.store(flag + CR * LL + i * L + r, one, mask=used & (r > i))
            tl.store(flag + CL * LL + (r + 1) * L + e, one, mask=used & (r + 1 < e))
        tl.debug_barrier()


def _launch_inside(scores, lengths, multiroot, viterbi=False, direction=None):
    B, L, _ = scores.shape
    block = tile(L)
    charts = torch.empty(B, 4, L, L, dtype=scores.dtype, device=scores.device)
    log_z = torch.empty(B, dtype=scores.dtype, device=scores.device)
    dual = direction is not None
    d_charts = torch.empty_like(charts) if dual else charts
    d_log_z = torch.empty_like(log_z) if dual else log_z
    _inside[(B,)](scores, direction if dual else scores, lengths, charts, d_charts, log_z, d_log_z, L,
                  MULTIROOT=multiroot, VITERBI=viterbi, DUAL=dual, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return log_z, charts, d_log_z, d_charts


def _prepare(scores: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return scores.detach().contiguous(), lengths.to(device=scores.device, dtype=torch.int32).contiguous()


def log_partition(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """``[B]`` ``log Z`` (one launch)."""
    scores, lengths = _prepare(scores, lengths)
    return _launch_inside(scores, lengths, multiroot)[0]


def marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
              direction: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """``(log Z [B], μ [B, L, L])``, and with ``direction`` (a tensor like ``scores``) also
    ``H·direction [B, L, L]``, the marginals' derivative in that direction (two launches and
    the zeroed outputs)."""
    scores, lengths = _prepare(scores, lengths)
    B, L, _ = scores.shape
    dual = direction is not None
    if direction is not None:
        direction = direction.detach().to(scores.dtype).contiguous()
    log_z, charts, d_log_z, d_charts = _launch_inside(scores, lengths, multiroot, direction=direction)
    outside = torch.empty(B, 5, L, L, dtype=scores.dtype, device=scores.device)
    mu = torch.zeros_like(scores)
    d_outside = torch.empty_like(outside) if dual else outside
    d_mu = torch.zeros_like(scores) if dual else mu
    block = tile(L)
    _outside[(B,)](scores, direction if dual else scores, lengths, charts, d_charts, outside, d_outside, log_z,
                   d_log_z, mu, d_mu, L, MULTIROOT=multiroot, DUAL=dual, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return (log_z, mu, d_mu) if dual else (log_z, mu)


def best_tree(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(best score [B], arcs [B, L, L])``: the max-semiring inside pass and the backtrack."""
    scores, lengths = _prepare(scores, lengths)
    B, L, _ = scores.shape
    best, charts, _, _ = _launch_inside(scores, lengths, multiroot, viterbi=True)
    flags = torch.zeros_like(charts)
    arcs = torch.zeros_like(scores)
    block = tile(L)
    _backtrack[(B,)](lengths, charts, flags, arcs, L, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return best, arcs


class LogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the marginals of the outside kernel (computed with the inside
    pass when a gradient may be asked for)."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
        ctx.multiroot = multiroot
        if not ctx.needs_input_grad[0]:
            return log_partition(scores, lengths, multiroot)
        log_z, mu = marginals(scores, lengths, multiroot)
        ctx.save_for_backward(scores, lengths, mu)
        return log_z

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, mu = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = Marginals.apply(scores, lengths, ctx.multiroot)
        return mu * g[:, None, None], None, None


class Marginals(torch.autograd.Function):
    """Arc marginals; backward ``H g`` by the inside and outside kernels on dual numbers."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
        ctx.save_for_backward(scores, lengths)
        ctx.multiroot = multiroot
        return marginals(scores, lengths, multiroot)[1]

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths = ctx.saved_tensors
        if torch.is_grad_enabled():  # a third derivative: autograd through the PyTorch path
            from ..dependency.eisner import marginals_vjp_by_autograd

            return marginals_vjp_by_autograd(scores, lengths, ctx.multiroot, g), None, None
        return marginals(scores, lengths, ctx.multiroot, direction=g)[2], None, None


# Variants compiled for a GPU by the tests (no GPU needed: Triton compiles to a cubin on any
# machine): each kernel in its most demanding settings. ``(kernel, argument types, constexprs)``.
COMPILE_CHECKS = [
    (kernel, signature(kernel, LEN="*i32", L="i32"),
     {"DTYPE": tl.float32, "BI": 32, "BK": 32, **extra})
    for kernel, extra in [(_inside, {"MULTIROOT": False, "VITERBI": False, "DUAL": True}),
                          (_inside, {"MULTIROOT": True, "VITERBI": True, "DUAL": False}),
                          (_outside, {"MULTIROOT": False, "DUAL": True}), (_backtrack, {})]
]
