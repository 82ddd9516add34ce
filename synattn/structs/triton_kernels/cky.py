"""CKY inside-outside (the tree CRF over binary bracketings) as Triton kernels: one or two launches a call.

The recursion is that of :mod:`synattn.structs.cky.crf` (Cocke–Kasami–Younger; Baker 1979 for
inside-outside), one program per sentence, the span widths in a loop inside the kernel, each width
computed in tiles of spans × split points with the online log-sum-exp of
:mod:`~synattn.structs.triton_kernels.common`:

- :func:`_inside` — ``β`` and the split sums ``S`` of every span, ``log Z = β(0, n-1)`` (or the
  best score, ``VITERBI``), and on dual numbers (``DUAL``) their tangents in a direction ``g``;
- :func:`_outside` — the outside scores in log space, each span pulling from the wider spans that
  use it as a child (no scatter, no atomics), and the span marginals
  ``μ(i, j) = exp(β(i, j) + O(i, j) - log Z)`` with, under ``DUAL``, their tangent ``H g`` (the
  Hessian-vector product that is the marginals' backward);
- :func:`_backtrack` — the best tree from the max-semiring chart, top-down, each used span split
  at its first best split point (the tie rule of the PyTorch and numba paths).

Charts (``N`` the padded length; only items inside a sentence are ever read, so they need no
initialisation): ``CH [B, 3, N, N]`` holds ``β[i, j]``, the same transposed ``βᵀ[j, i]`` (so that
both children of a split are read along rows) and ``S[i, j]``; ``OUT [B, 2, N, N]`` holds
``OS(i, j) = O(i, j) + s(i, j)``, the outside score of the split sum ``S(i, j)``, and its
transpose. Sentences without a tree (``log Z`` below :data:`~synattn.structs.cky.dp.DEAD`) get
``-inf`` and zero marginals, gradients and best trees, as on the other paths.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..cky.dp import _dead_to_inf, _zero_dead, marginals_vjp_by_autograd
from .common import NEG_INF, gather_pair, lse_finish, signature, tile, tl_dtype

BETA, BETA_T, SPLIT = (tl.constexpr(c) for c in range(3))  # inside chart channels
OS, OS_T = (tl.constexpr(c) for c in range(2))  # outside chart channels


@triton.jit
def _inside(S, G, LEN, CH, DCH, LOGZ, DLOGZ, N, VITERBI: tl.constexpr, DUAL: tl.constexpr,
            DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    NN = N * N
    s, g = S + b * NN, G + b * NN
    ch, dch = CH + b * 3 * NN, DCH + b * 3 * NN
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    for i0 in range(0, n, BI):  # width 0: β(i, i) = s(i, i), S(i, i) = 0 (the empty product)
        i = i0 + ri
        ok = i < n
        at = i * N + i
        leaf = tl.load(s + at, mask=ok, other=0.0)
        tl.store(ch + BETA * NN + at, leaf, mask=ok)
        tl.store(ch + BETA_T * NN + at, leaf, mask=ok)
        tl.store(ch + SPLIT * NN + at, zero, mask=ok)
        if DUAL:
            d_leaf = tl.load(g + at, mask=ok, other=0.0)
            tl.store(dch + BETA * NN + at, d_leaf, mask=ok)
            tl.store(dch + BETA_T * NN + at, d_leaf, mask=ok)
            tl.store(dch + SPLIT * NN + at, zero, mask=ok)
    tl.debug_barrier()
    for w in range(1, n):
        for i0 in range(0, n - w, BI):
            i = i0 + ri
            ok = i < n - w
            j = i + w
            # S(i, j) = ⊕_{0<=q<w} β(i, i+q) ⊗ β(i+q+1, j)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, w, BK):
                q = (k0 + rk)[None, :]
                mask = ok[:, None] & (q < w)
                x = BETA * NN + i[:, None] * N + i[:, None] + q
                y = BETA_T * NN + j[:, None] * N + i[:, None] + q + 1
                m, acc, dacc = gather_pair(ch + x, ch + y, dch + x, dch + y, mask, m, acc, dacc,
                                       VITERBI, DUAL)
            split, d_split = lse_finish(m, acc, dacc, VITERBI, DUAL)
            # β(i, j) = s(i, j) ⊗ S(i, j)
            beta = tl.load(s + i * N + j, mask=ok, other=0.0) + split
            tl.store(ch + BETA * NN + i * N + j, beta, mask=ok)
            tl.store(ch + BETA_T * NN + j * N + i, beta, mask=ok)
            tl.store(ch + SPLIT * NN + i * N + j, split, mask=ok)
            if DUAL:
                d_beta = tl.load(g + i * N + j, mask=ok, other=0.0) + d_split
                tl.store(dch + BETA * NN + i * N + j, d_beta, mask=ok)
                tl.store(dch + BETA_T * NN + j * N + i, d_beta, mask=ok)
                tl.store(dch + SPLIT * NN + i * N + j, d_split, mask=ok)
        tl.debug_barrier()
    tl.store(LOGZ + b, tl.load(ch + BETA * NN + n - 1))  # log Z = β(0, n-1)
    if DUAL:
        tl.store(DLOGZ + b, tl.load(dch + BETA * NN + n - 1))


@triton.jit
def _outside(S, G, LEN, CH, DCH, OUT, DOUT, LOGZ, DLOGZ, MU, DMU, N, DUAL: tl.constexpr,
             DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    NN = N * N
    s, g, mu, dmu = S + b * NN, G + b * NN, MU + b * NN, DMU + b * NN
    ch, dch = CH + b * 3 * NN, DCH + b * 3 * NN
    out, dout = OUT + b * 2 * NN, DOUT + b * 2 * NN
    log_z = tl.load(LOGZ + b)
    dlog_z = log_z
    if DUAL:
        dlog_z = tl.load(DLOGZ + b)
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    for w in range(n - 1, -1, -1):
        for i0 in range(0, n - w, BI):
            i = i0 + ri
            ok = i < n - w
            j = i + w
            # O(i, j) = ⊕_{j<e<n} OS(i, e) ⊗ β(j+1, e)     (left child of (i, e))
            #         ⊕ ⊕_{0<=h<i} OS(h, j) ⊗ β(h, i-1)    (right child of (h, j))
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for k0 in range(0, n - 1 - i0 - w, BK):
                e = j[:, None] + 1 + (k0 + rk)[None, :]
                mask = ok[:, None] & (e < n)
                x = OS * NN + i[:, None] * N + e
                y = BETA * NN + (j[:, None] + 1) * N + e
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            for k0 in range(0, i0 + BI, BK):
                h = (k0 + rk)[None, :]
                mask = ok[:, None] & (h < i[:, None])
                x = OS_T * NN + j[:, None] * N + h
                y = BETA_T * NN + (i[:, None] - 1) * N + h
                m, acc, dacc = gather_pair(out + x, ch + y, dout + x, dch + y, mask, m, acc, dacc,
                                       False, DUAL)
            o, d_o = lse_finish(m, acc, dacc, False, DUAL)
            top = (i == 0) & (w == n - 1)  # O(0, n-1) = 0: the whole sentence is in every tree
            o = tl.where(top, 0.0, o)
            # OS(i, j) = O(i, j) ⊗ s(i, j)
            o_split = o + tl.load(s + i * N + j, mask=ok, other=0.0)
            tl.store(out + OS * NN + i * N + j, o_split, mask=ok)
            tl.store(out + OS_T * NN + j * N + i, o_split, mask=ok)
            # μ(i, j) = exp(β(i, j) ⊗ O(i, j) - log Z) = exp(S(i, j) ⊗ OS(i, j) - log Z)
            split = tl.load(ch + SPLIT * NN + i * N + j, mask=ok, other=0.0)
            marginal = tl.exp(split + o_split - log_z)
            tl.store(mu + i * N + j, marginal, mask=ok)
            if DUAL:
                d_o = tl.where(top, 0.0, d_o)
                d_o_split = d_o + tl.load(g + i * N + j, mask=ok, other=0.0)
                tl.store(dout + OS * NN + i * N + j, d_o_split, mask=ok)
                tl.store(dout + OS_T * NN + j * N + i, d_o_split, mask=ok)
                d_split = tl.load(dch + SPLIT * NN + i * N + j, mask=ok, other=0.0)
                tl.store(dmu + i * N + j, tl.where(marginal > 0, marginal * (d_split + d_o_split - dlog_z),
                                                   0.0), mask=ok)
        tl.debug_barrier()


@triton.jit
def _backtrack(LEN, CH, TREE, N, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    """The best tree from the max-semiring chart: ``TREE [B, N, N]`` (zeros on entry) gets 1 at
    each of its spans, widest first."""
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    NN = N * N
    ch, tree = CH + b * 3 * NN, TREE + b * NN
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    one = tl.full([BI], 1.0, DTYPE)
    tl.store(tree + ri * 0 + n - 1, one, mask=ri == 0)  # (0, n-1) is in every tree
    tl.debug_barrier()
    for w in range(n - 1, 0, -1):
        for i0 in range(0, n - w, BI):
            i = i0 + ri
            ok = i < n - w
            j = i + w
            used = ok & (tl.load(tree + i * N + j, mask=ok, other=0.0) > 0)
            # β(i, j) = s(i, j) ⊗ β(i, i+q) ⊗ β(i+q+1, j) at its first best q in [0, w)
            best = tl.full([BI], NEG_INF, DTYPE)
            at = tl.zeros([BI], tl.int32)
            for k0 in range(0, w, BK):
                q = (k0 + rk)[None, :]
                mask = used[:, None] & (q < w)
                t = (tl.load(ch + BETA * NN + i[:, None] * N + i[:, None] + q, mask=mask, other=NEG_INF)
                     + tl.load(ch + BETA_T * NN + j[:, None] * N + i[:, None] + q + 1, mask=mask,
                               other=NEG_INF))
                chunk_best = tl.max(t, 1)
                chunk_at = tl.argmax(t, 1).to(tl.int32) + k0
                better = chunk_best > best
                at = tl.where(better, chunk_at, at)
                best = tl.where(better, chunk_best, best)
            k = i + at
            tl.store(tree + i * N + k, one, mask=used)
            tl.store(tree + (k + 1) * N + j, one, mask=used)
        tl.debug_barrier()


def _prepare(scores: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return scores.detach().contiguous(), lengths.to(device=scores.device, dtype=torch.int32).contiguous()


def _launch_inside(scores, lengths, block, viterbi=False, direction=None):
    B, N, _ = scores.shape
    charts = torch.empty(B, 3, N, N, dtype=scores.dtype, device=scores.device)
    log_z = torch.empty(B, dtype=scores.dtype, device=scores.device)
    dual = direction is not None
    d_charts = torch.empty_like(charts) if dual else charts
    d_log_z = torch.empty_like(log_z) if dual else log_z
    _inside[(B,)](scores, direction if dual else scores, lengths, charts, d_charts, log_z, d_log_z, N,
                  VITERBI=viterbi, DUAL=dual, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return log_z, charts, d_log_z, d_charts


def log_partition(scores: torch.Tensor, lengths: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """``[B]`` ``log Z`` of checked span scores ``[B, N, N]`` (one launch; a sentence without a
    tree gets a value near ``NEG``). ``block``: the tile edge (a power of two; default
    :func:`~synattn.structs.triton_kernels.common.tile` of ``N``), here and below."""
    scores, lengths = _prepare(scores, lengths)
    return _launch_inside(scores, lengths, block or tile(scores.shape[-1]))[0]


def marginals(scores: torch.Tensor, lengths: torch.Tensor, direction: torch.Tensor | None = None,
              block: int | None = None) -> tuple[torch.Tensor, ...]:
    """``(log Z [B], μ [B, N, N])``, and with ``direction`` (a tensor like ``scores``) also
    ``H·direction [B, N, N]``, the marginals' derivative in that direction (two launches and the
    zeroed outputs; 0 outside each sentence's spans, dead sentences not yet zeroed)."""
    scores, lengths = _prepare(scores, lengths)
    B, N, _ = scores.shape
    dual = direction is not None
    if direction is not None:
        direction = direction.detach().to(scores.dtype).contiguous()
    block = block or tile(N)
    log_z, charts, d_log_z, d_charts = _launch_inside(scores, lengths, block, direction=direction)
    outside = torch.empty(B, 2, N, N, dtype=scores.dtype, device=scores.device)
    mu = torch.zeros_like(scores)
    d_outside = torch.empty_like(outside) if dual else outside
    d_mu = torch.zeros_like(scores) if dual else mu
    _outside[(B,)](scores, direction if dual else scores, lengths, charts, d_charts, outside, d_outside,
                   log_z, d_log_z, mu, d_mu, N, DUAL=dual, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return (log_z, mu, d_mu) if dual else (log_z, mu)


def best_tree(scores: torch.Tensor, lengths: torch.Tensor,
              block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(best score [B], spans [B, N, N])``: the max-semiring inside pass and the backtrack, as
    :attr:`TreeCRF.max <synattn.structs.cky.crf.TreeCRF.max>` and ``argmax`` give them (``-inf``
    and all 0 for a sentence without a tree)."""
    scores, lengths = _prepare(scores, lengths)
    B, N, _ = scores.shape
    block = block or tile(N)
    best, charts, _, _ = _launch_inside(scores, lengths, block, viterbi=True)
    tree = torch.zeros_like(scores)
    _backtrack[(B,)](lengths, charts, tree, N, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return _dead_to_inf(best), _zero_dead(tree, best, lengths)


class LogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the marginals of the outside kernel (computed with the inside
    pass when a gradient may be asked for); ``-inf`` and a zero gradient without a tree."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if not ctx.needs_input_grad[0]:
            return _dead_to_inf(log_partition(scores, lengths))
        log_z, mu = marginals(scores, lengths)
        mu = _zero_dead(mu, log_z, lengths)
        log_z = _dead_to_inf(log_z)
        ctx.save_for_backward(scores, lengths, mu, log_z)
        return log_z

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, mu, log_z = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = Marginals.apply(scores, lengths)
        g = torch.where(torch.isfinite(log_z), g, 0.0)  # no tree: zero gradient, whatever g is
        return mu * g[:, None, None], None


class Marginals(torch.autograd.Function):
    """Span marginals; backward ``H g`` by the inside and outside kernels on dual numbers."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        log_z, mu = marginals(scores, lengths)
        ctx.save_for_backward(scores, lengths, log_z)
        return _zero_dead(mu, log_z, lengths)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, log_z = ctx.saved_tensors
        if torch.is_grad_enabled():  # a third derivative: autograd through the PyTorch path
            return _zero_dead(marginals_vjp_by_autograd(scores, lengths, g), log_z, lengths), None
        d_mu = marginals(scores, lengths, direction=g)[2]
        return _zero_dead(d_mu, log_z, lengths), None


# Variants compiled for a GPU by the tests (no GPU needed: Triton compiles to a cubin on any
# machine): each kernel in its most demanding settings. ``(kernel, argument types, constexprs)``.
COMPILE_CHECKS = [
    (kernel, signature(kernel, "*fp64" if dtype == tl.float64 else "*fp32", LEN="*i32", N="i32"),
     {"DTYPE": dtype, "BI": 32, "BK": 32, **extra})
    for kernel, dtype, extra in [(_inside, tl.float32, {"VITERBI": False, "DUAL": True}),
                                 (_inside, tl.float64, {"VITERBI": True, "DUAL": False}),
                                 (_outside, tl.float32, {"DUAL": True}),
                                 (_outside, tl.float64, {"DUAL": True}),
                                 (_backtrack, tl.float32, {})]
]
