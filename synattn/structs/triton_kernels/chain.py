"""The linear-chain CRF as Triton kernels: forward-backward in two launches, Viterbi in two.

The recursions are those of :mod:`synattn.structs.chain.crf` (layout ``edge[b, i, p, c]``: label
``p`` at ``i`` followed by ``c`` at ``i+1``), one program per sentence, the positions in a loop
inside the kernel, the labels in tiles ``[BI, BK]`` (``C`` in chunks of a power of two, masked):

- :func:`_forward` — the forward vectors and ``log Z`` (the best score under ``VITERBI``), and on
  dual numbers (``DUAL``) their tangents in a direction ``(u̇, ė)``;
- :func:`_adjoint` — the backward pass, written as pulls from position ``i+1`` to ``i``, giving the
  node marginals ``μ_i(c) = exp(α_i(c) + β_i(c) - log Z)`` and the pair marginals
  ``ξ_i(p, c) = exp(α_i(p) + e_i(p, c) + u_{i+1}(c) + β_{i+1}(c) - log Z)``, with under ``DUAL``
  their tangents (the Hessian-vector product that is the marginals' backward);
- :func:`_backtrack` — the best labelling from the max-semiring vectors, right to left, first best
  on ties (the rule of the other backends).

Precision: the forward vectors are kept shifted, ``a_i = α_i - Σ_{j<i} s_j`` with ``s_j`` the
largest entry of ``a_j``, and stored without the position's own scores, ``l_i = a_i - u_i``
(the log-sum over the predecessors): every stored value stays within a few potentials of 0 and
``a_i - s_i = l_i + (u_i - s_i)`` cancels the large parts first, so float32 keeps its digits on
long chains with large scores (as the PyTorch path's normalised vectors do). The backward pass
runs in probability space, ``μ_i(p) = Σ_c ξ_i(p, c)``, ``ξ_i(p, c) = μ_{i+1}(c)·w_{i+1}(p, c)``
with ``w`` the softmax weights of the forward step (what backpropagation through the forward
pass computes): no large log value is ever subtracted from another. The shifts are constants to
the dual numbers (the tangents are those of the true ``α``).

Scratch: ``A [B, N, C]`` (``l``), ``SH [B, N]`` (the shifts), and their tangents; only positions
inside a sentence are read, so nothing needs initialising (``torch.empty``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import NEG_INF, fold, lse_accumulate, lse_finish, signature, tile, tl_dtype


@triton.jit
def _better(v, offset, best, arg):
    """The running first maximum ``(best, arg)`` updated with the chunk ``v`` (indices from
    ``offset``): a later chunk wins only if strictly better."""
    chunk_best = tl.max(v, 0)
    chunk_at = tl.argmax(v, 0).to(tl.int32) + offset
    better = chunk_best > best
    return tl.where(better, chunk_best, best), tl.where(better, chunk_at, arg)


@triton.jit
def _shifted(L, U, DL, DU, at, mask, shift, DUAL: tl.constexpr):
    """``a_i - s_i = l_i + (u_i - s_i)`` at the offsets ``at`` of position ``i``'s labels
    (``-inf`` where not ``mask``), and its tangent ``l̇_i + u̇_i`` (0 there; read only if ``DUAL``).
    The large parts cancel first: ``u_i - s_i`` is small when ``u_i`` is large."""
    x = tl.load(L + at, mask=mask, other=NEG_INF) + (tl.load(U + at, mask=mask, other=0.0) - shift)
    dx = x
    if DUAL:
        dx = tl.load(DL + at, mask=mask, other=0.0) + tl.load(DU + at, mask=mask, other=0.0)
    return x, dx


@triton.jit
def _forward(U, E, DU, DE, LEN, A, DA, SH, LOGZ, DLOGZ, N, C, VITERBI: tl.constexpr,
             DUAL: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    u, du = U + b * N * C, DU + b * N * C
    e, de = E + b * (N - 1) * C * C, DE + b * (N - 1) * C * C
    a, da, sh = A + b * N * C, DA + b * N * C, SH + b * N
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    # l_0(c) = 0, a_0(c) = α_0(c) = u_0(c);  s_0 = max_c a_0(c)  (no shifts under VITERBI)
    top = tl.full([], NEG_INF, DTYPE)
    for c0 in range(0, C, BI):
        c = c0 + ri
        ok = c < C
        tl.store(a + c, zero, mask=ok)
        if DUAL:
            tl.store(da + c, zero, mask=ok)
        top = tl.maximum(top, tl.max(tl.load(u + c, mask=ok, other=NEG_INF), 0))
    if VITERBI:
        top = tl.zeros([], DTYPE)
    tl.store(sh, top)
    total = top  # Σ_{j<=i} s_j
    shift = top  # s_{i-1}
    tl.debug_barrier()
    for i in range(1, n):
        top = tl.full([], NEG_INF, DTYPE)
        for c0 in range(0, C, BI):
            c = c0 + ri
            ok = c < C
            # l_i(c) = ⊕_p (a_{i-1}(p) - s_{i-1}) ⊗ e_{i-1}(p, c);  a_i(c) = l_i(c) ⊗ u_i(c)
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            for p0 in range(0, C, BK):
                p = (p0 + rk)[None, :]
                mask = ok[:, None] & (p < C)
                x, dx = _shifted(a, u, da, du, (i - 1) * C + p, p < C, shift, DUAL)
                t = x + tl.load(e + (i - 1) * C * C + p * C + c[:, None], mask=mask, other=NEG_INF)
                dt = t
                if DUAL:
                    dt = dx + tl.load(de + (i - 1) * C * C + p * C + c[:, None], mask=mask, other=0.0)
                m, acc, dacc = lse_accumulate(t, dt, m, acc, dacc, VITERBI, DUAL)
            value, d_value = lse_finish(m, acc, dacc, VITERBI, DUAL)
            tl.store(a + i * C + c, value, mask=ok)
            if DUAL:
                tl.store(da + i * C + c, d_value, mask=ok)
            # s_i = max_c a_i(c)
            top = tl.maximum(top, tl.max(tl.where(ok, value + tl.load(u + i * C + c, mask=ok, other=0.0),
                                                  NEG_INF), 0))
        if VITERBI:
            top = tl.zeros([], DTYPE)
        tl.store(sh + i, top)
        total += top
        shift = top
        tl.debug_barrier()
    # log Z = Σ_{j<n} s_j + ⊕_c (a_{n-1}(c) - s_{n-1});  its tangent Σ_c μ_{n-1}(c) ȧ_{n-1}(c)
    m, acc, dacc = tl.full([], NEG_INF, DTYPE), tl.zeros([], DTYPE), tl.zeros([], DTYPE)
    for c0 in range(0, C, BI):
        c = c0 + ri
        x, dx = _shifted(a, u, da, du, (n - 1) * C + c, c < C, shift, DUAL)
        m, acc, dacc = fold(x, dx, m, acc, dacc, VITERBI, DUAL)
    value, d_value = lse_finish(m, acc, dacc, VITERBI, DUAL)
    tl.store(LOGZ + b, total + value)
    if DUAL:
        tl.store(DLOGZ + b, d_value)


@triton.jit
def _adjoint(U, E, DU, DE, LEN, A, DA, SH, MU, DMU, XI, DXI, N, C, DUAL: tl.constexpr,
             DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    u, du = U + b * N * C, DU + b * N * C
    e, de = E + b * (N - 1) * C * C, DE + b * (N - 1) * C * C
    xi, dxi = XI + b * (N - 1) * C * C, DXI + b * (N - 1) * C * C
    a, da, sh = A + b * N * C, DA + b * N * C, SH + b * N
    mu, dmu = MU + b * N * C, DMU + b * N * C
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    last = tl.load(sh + n - 1)
    # λ = ⊕_c (a_{n-1}(c) - s_{n-1});  μ_{n-1}(c) = exp(a_{n-1}(c) - s_{n-1} - λ)
    m, acc, dacc = tl.full([], NEG_INF, DTYPE), tl.zeros([], DTYPE), tl.zeros([], DTYPE)
    for c0 in range(0, C, BI):
        c = c0 + ri
        x, dx = _shifted(a, u, da, du, (n - 1) * C + c, c < C, last, DUAL)
        m, acc, dacc = fold(x, dx, m, acc, dacc, False, DUAL)
    lam, d_lam = lse_finish(m, acc, dacc, False, DUAL)
    for c0 in range(0, C, BI):
        c = c0 + ri
        ok = c < C
        x, dx = _shifted(a, u, da, du, (n - 1) * C + c, ok, last, DUAL)
        p_last = tl.exp(x - lam)
        tl.store(mu + (n - 1) * C + c, p_last, mask=ok)
        if DUAL:  # μ̇ = μ (ȧ - λ̇)
            tl.store(dmu + (n - 1) * C + c, p_last * (dx - d_lam), mask=ok)
    tl.debug_barrier()
    for i in range(n - 2, -1, -1):
        shift = tl.load(sh + i)
        for p0 in range(0, C, BI):
            p = p0 + ri
            ok = p < C
            a_p, da_p = _shifted(a, u, da, du, i * C + p, ok, shift, DUAL)
            total, d_total = zero, zero
            for c0 in range(0, C, BK):
                c = (c0 + rk)[None, :]
                mask = ok[:, None] & (c < C)
                pc = i * C * C + p[:, None] * C + c
                # w(p, c) = exp(a_i(p) - s_i + e_i(p, c) - l_{i+1}(c)) <= 1, the weight of p in
                # l_{i+1}(c);  ξ_i(p, c) = μ_{i+1}(c) w(p, c)
                x = (tl.where(ok, a_p, 0.0)[:, None] + tl.load(e + pc, mask=mask, other=0.0)
                     - tl.load(a + (i + 1) * C + c, mask=c < C, other=0.0))
                w = tl.where(mask, tl.exp(tl.minimum(x, 0.0)), 0.0)
                pair = w * tl.load(mu + (i + 1) * C + c, mask=c < C, other=0.0)
                tl.store(xi + pc, pair, mask=mask)
                total += tl.sum(pair, 1)
                if DUAL:
                    # ξ̇ = μ̇_{i+1}(c) w + ξ (ȧ_i(p) + ė_i(p, c) - l̇_{i+1}(c))
                    step = (da_p[:, None] + tl.load(de + pc, mask=mask, other=0.0)
                            - tl.load(da + (i + 1) * C + c, mask=c < C, other=0.0))
                    d_pair = tl.where(mask, w * tl.load(dmu + (i + 1) * C + c, mask=c < C, other=0.0)
                                      + pair * step, 0.0)
                    tl.store(dxi + pc, d_pair, mask=mask)
                    d_total += tl.sum(d_pair, 1)
            # μ_i(p) = Σ_c ξ_i(p, c)
            tl.store(mu + i * C + p, total, mask=ok)
            if DUAL:
                tl.store(dmu + i * C + p, d_total, mask=ok)
        tl.debug_barrier()


@triton.jit
def _backtrack(U, E, LEN, A, OUT, N, C, DTYPE: tl.constexpr, BK: tl.constexpr):
    """The best labelling from the max-semiring vectors ``A`` (unshifted): ``OUT [B, N]`` gets
    the labels of the positions inside each sentence."""
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    u, e, a, out = U + b * N * C, E + b * (N - 1) * C * C, A + b * N * C, OUT + b * N
    rk = tl.arange(0, BK)
    # y_{n-1} = argmax_c a_{n-1}(c),  a = l + u
    best, y = tl.full([], NEG_INF, DTYPE), tl.zeros([], tl.int32)
    for c0 in range(0, C, BK):
        c = c0 + rk
        v = tl.load(a + (n - 1) * C + c, mask=c < C, other=NEG_INF) + tl.load(u + (n - 1) * C + c, mask=c < C,
                                                                                other=0.0)
        best, y = _better(v, c0, best, y)
    tl.store(out + n - 1, y.to(tl.int64))
    for i in range(n - 1, 0, -1):
        # y_{i-1} = argmax_p a_{i-1}(p) + e_{i-1}(p, y_i)
        best, arg = tl.full([], NEG_INF, DTYPE), tl.zeros([], tl.int32)
        for p0 in range(0, C, BK):
            p = p0 + rk
            ok = p < C
            v = (tl.load(a + (i - 1) * C + p, mask=ok, other=NEG_INF) + tl.load(u + (i - 1) * C + p, mask=ok, other=0.0)
                 + tl.load(e + (i - 1) * C * C + p * C + y, mask=ok, other=NEG_INF))
            best, arg = _better(v, p0, best, arg)
        y = arg
        tl.store(out + i - 1, y.to(tl.int64))


def _nonempty(x: torch.Tensor) -> torch.Tensor:
    """``x``, or one element of its type where it has none (the kernel never reads it then)."""
    return x if x.numel() else x.new_zeros(1)


def _prepare(unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
    unary = unary.detach().contiguous()
    return (unary, _nonempty(edge.detach().to(unary.dtype).contiguous()),
            lengths.to(device=unary.device, dtype=torch.int32).contiguous())


def _launch_forward(unary, edge, lengths, viterbi=False, direction=None):
    B, N, C = unary.shape
    block = tile(C)
    alpha = torch.empty(B, N, C, dtype=unary.dtype, device=unary.device)
    shifts = torch.empty(B, N, dtype=unary.dtype, device=unary.device)
    log_z = torch.empty(B, dtype=unary.dtype, device=unary.device)
    dual = direction is not None
    d_unary, d_edge = direction if dual else (unary, edge)
    d_alpha = torch.empty_like(alpha) if dual else alpha
    d_log_z = torch.empty_like(log_z) if dual else log_z
    _forward[(B,)](unary, edge, d_unary, d_edge, lengths, alpha, d_alpha, shifts, log_z, d_log_z, N, C,
                   VITERBI=viterbi, DUAL=dual, DTYPE=tl_dtype(unary), BI=block, BK=block)
    return log_z, alpha, shifts, d_log_z, d_alpha


def log_partition(unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` ``log Z`` (one launch)."""
    return _launch_forward(*_prepare(unary, edge, lengths))[0]


def marginals(unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor,
              direction: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    """``(log Z [B], μ [B, N, C], ξ [B, N-1, C, C])`` (node and pair marginals: ``∂ log Z`` by
    ``unary`` and ``edge``), zero past each length; with ``direction = (u̇, ė)`` (tensors like
    ``unary`` and ``edge``) also their derivatives ``(μ̇, ξ̇)`` in that direction (two launches)."""
    B, N, C = unary.shape
    unary, edge, lengths = _prepare(unary, edge, lengths)
    dual = direction is not None
    d_unary, d_edge = unary, edge
    if direction is not None:
        d_unary = direction[0].detach().to(unary.dtype).contiguous()
        d_edge = _nonempty(direction[1].detach().to(unary.dtype).contiguous())
    log_z, alpha, shifts, _, d_alpha = _launch_forward(unary, edge, lengths,
                                                       direction=(d_unary, d_edge) if dual else None)
    mu = torch.zeros_like(unary)
    xi = torch.zeros(B, N - 1, C, C, dtype=unary.dtype, device=unary.device)
    d_mu = torch.zeros_like(mu) if dual else mu
    d_xi = torch.zeros_like(xi) if dual else xi
    block = tile(C)
    _adjoint[(B,)](unary, edge, d_unary, d_edge, lengths, alpha, d_alpha, shifts, mu, d_mu,
                   _nonempty(xi), _nonempty(d_xi), N, C, DUAL=dual, DTYPE=tl_dtype(unary), BI=block, BK=block)
    return (log_z, mu, xi, d_mu, d_xi) if dual else (log_z, mu, xi)


def viterbi(unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(best score [B], labels [B, N])``, labels ``-1`` past each length: the max-semiring
    forward pass and the backtrack."""
    unary, edge, lengths = _prepare(unary, edge, lengths)
    B, N, C = unary.shape
    best, alpha, _, _, _ = _launch_forward(unary, edge, lengths, viterbi=True)
    labels = torch.full((B, N), -1, dtype=torch.long, device=unary.device)
    _backtrack[(B,)](unary, edge, lengths, alpha, labels, N, C, DTYPE=tl_dtype(unary), BK=tile(C))
    return best, labels


def _autograd_hvp(unary, edge, lengths, g_mu, g_xi):
    """``(μ̇, ξ̇)`` in the direction ``(g_mu, g_xi)`` by autograd through the reference, itself
    differentiable (a third derivative)."""
    from ..reference import linear_chain_log_partition

    with torch.enable_grad():
        x = [t if t.requires_grad else t.detach().requires_grad_() for t in (unary, edge)]
        log_z = linear_chain_log_partition(x[0], x[1], lengths)
        grads = torch.autograd.grad(log_z.sum(), x, create_graph=True)
        return torch.autograd.grad(grads, x, (g_mu, g_xi), create_graph=True, allow_unused=True)


class LogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the node and pair marginals of the adjoint kernel (computed
    with the forward pass when a gradient may be asked for)."""

    @staticmethod
    def forward(ctx, unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return log_partition(unary, edge, lengths)
        log_z, mu, xi = marginals(unary, edge, lengths)
        ctx.save_for_backward(unary, edge, lengths, mu, xi)
        return log_z

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        unary, edge, lengths, mu, xi = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu, xi = Marginals.apply(unary, edge, lengths)
        return mu * g[:, None, None], xi * g[:, None, None, None], None


class Marginals(torch.autograd.Function):
    """Node and pair marginals ``(μ, ξ)``; backward ``H (g_μ, g_ξ)`` by the forward and adjoint
    kernels on dual numbers (a third derivative: autograd through the reference)."""

    @staticmethod
    def forward(ctx, unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(unary, edge, lengths)
        return marginals(unary, edge, lengths)[1:]

    @staticmethod
    def backward(ctx, g_mu: torch.Tensor | None, g_xi: torch.Tensor | None):
        unary, edge, lengths = ctx.saved_tensors
        if g_mu is None and g_xi is None:
            return None, None, None
        g_mu = torch.zeros_like(unary) if g_mu is None else g_mu
        g_xi = torch.zeros(edge.shape, dtype=unary.dtype, device=unary.device) if g_xi is None else g_xi
        if torch.is_grad_enabled():
            return (*_autograd_hvp(unary, edge, lengths, g_mu, g_xi), None)
        d_mu, d_xi = marginals(unary, edge, lengths, direction=(g_mu, g_xi))[3:]
        return d_mu, d_xi, None


def registry_log_partition(unary, edge, lengths, scan=None):
    """``log Z`` with the registry's signature (``scan`` is the PyTorch path's and ignored)."""
    return LogPartition.apply(unary, edge, lengths)


def registry_marginals(unary, edge, lengths, scan=None):
    """Node marginals ``∂ log Z / ∂ unary`` with the registry's signature, differentiable."""
    return Marginals.apply(unary, edge, lengths)[0]


# Variants compiled for a GPU by the tests (no GPU needed: Triton compiles to a cubin on any
# machine): each kernel in its most demanding settings. ``(kernel, argument types, constexprs)``.
_INTS = {"LEN": "*i32", "N": "i32", "C": "i32", "OUT": "*i64"}
COMPILE_CHECKS = [
    (kernel, signature(kernel, "*fp64" if dtype == tl.float64 else "*fp32", **_INTS),
     {"DTYPE": dtype, "BK": 32, **extra})
    for kernel, dtype, extra in [
        (_forward, tl.float32, {"BI": 32, "VITERBI": False, "DUAL": True}),
        (_forward, tl.float64, {"BI": 32, "VITERBI": True, "DUAL": False}),
        (_adjoint, tl.float32, {"BI": 32, "DUAL": True}),
        (_backtrack, tl.float32, {})]
]
