"""The semi-Markov (segmental) CRF as Triton kernels: ``log Z`` in one launch, marginals in two.

The recursion is that of :func:`synattn.structs.reference.semi_markov_log_partition` (Sarawagi
and Cohen 2004; layout ``edge[b, s, k, p, c]``: a segment of ``k`` positions ``s+1..s+k``
labelled ``c`` after a predecessor labelled ``p``), one program per sequence, the positions in a
loop inside the kernel, the widths ``k < K`` in a loop per position, the labels in tiles
``[BI, BK]`` (``C`` in chunks of a power of two, masked):

- :func:`_forward` — ``α_t(c)``, the log-sum of the segmentations of ``0..t`` whose last segment
  ends at ``t`` labelled ``c``, and ``log Z`` (the best score under ``VITERBI``), and on dual
  numbers (``DUAL``) their tangents in a direction ``ė``;
- :func:`_adjoint` — the outside pass in probability space, as pulls from the later ends:
  ``γ_t(p)``, the probability that a segment boundary at ``t`` carries label ``p``, and the
  segment marginals ``μ(s, k, p, c) = exp(α_s(p) + edge(s, k, p, c) + β_{s+k}(c) - log Z)``,
  with under ``DUAL`` their tangents (the Hessian-vector product that is the marginals' backward);
- :func:`_backtrack` — the best structure from the max-semiring vectors, right to left, first
  best over ``(k, p)`` on ties (the rule of :class:`~synattn.structs.SemiMarkovCRF`).

As in :mod:`synattn.structs.triton_kernels.chain`, the forward vectors are stored shifted,
``a_t = α_t - Σ_{j<t} s_j`` with ``s_j`` the largest entry of ``a_j`` (a segment from ``t-k``
then subtracts ``d = s_{t-k} + .. + s_{t-1}``), the outside pass multiplies probabilities by the
softmax weights ``w ≤ 1`` of the forward step, and the shifts are constants to the dual numbers.
The marginals' backward runs the kernels on dual numbers; a third derivative goes through
autograd of the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .chain import _better, _nonempty
from .common import NEG_INF, fold, lse_accumulate, lse_finish, signature, tile, tl_dtype


@triton.jit
def _forward(E, DE, INIT, LEN, A, DA, SH, LOGZ, DLOGZ, N, K, C, VITERBI: tl.constexpr,
             DUAL: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    KCC = K * C * C
    e, de = E + b * (N - 1) * KCC, DE + b * (N - 1) * KCC
    a, da, sh = A + b * N * C, DA + b * N * C, SH + b * N
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    # a_0(c) = α_0(c) = init(c), the label of position 0;  s_0 = max_c a_0(c)  (0 under VITERBI)
    top = tl.full([], NEG_INF, DTYPE)
    for c0 in range(0, C, BI):
        c = c0 + ri
        ok = c < C
        x = tl.load(INIT + b * C + c, mask=ok, other=NEG_INF)
        tl.store(a + c, x, mask=ok)
        if DUAL:
            tl.store(da + c, zero, mask=ok)
        top = tl.maximum(top, tl.max(x, 0))
    if VITERBI:
        top = tl.zeros([], DTYPE)
    tl.store(sh, top)
    total = top  # Σ_{j<=t} s_j
    tl.debug_barrier()
    for t in range(1, n):
        top = tl.full([], NEG_INF, DTYPE)
        for c0 in range(0, C, BI):
            c = c0 + ri
            ok = c < C
            # a_t(c) = ⊕_{1<=k<K, k<=t} ⊕_p (a_{t-k}(p) - d_k) ⊗ edge(t-k, k, p, c),
            # d_k = s_{t-k} + .. + s_{t-1}: the last segment ends at t, has k positions, label c
            m, acc, dacc = tl.full([BI], NEG_INF, DTYPE), zero, zero
            d = tl.zeros([], DTYPE)
            for k in range(1, tl.minimum(K - 1, t) + 1):
                s = t - k
                d += tl.load(sh + s)
                for p0 in range(0, C, BK):
                    p = (p0 + rk)[None, :]
                    mask = ok[:, None] & (p < C)
                    at = s * KCC + k * C * C + p * C + c[:, None]
                    x = tl.load(a + s * C + p, mask=p < C, other=NEG_INF) - d + tl.load(e + at, mask=mask,
                                                                                   other=NEG_INF)
                    dx = x
                    if DUAL:
                        dx = tl.load(da + s * C + p, mask=p < C, other=0.0) + tl.load(de + at, mask=mask, other=0.0)
                    m, acc, dacc = lse_accumulate(x, dx, m, acc, dacc, VITERBI, DUAL)
            value, d_value = lse_finish(m, acc, dacc, VITERBI, DUAL)
            tl.store(a + t * C + c, value, mask=ok)
            if DUAL:
                tl.store(da + t * C + c, d_value, mask=ok)
            top = tl.maximum(top, tl.max(tl.where(ok, value, NEG_INF), 0))
        if VITERBI:
            top = tl.zeros([], DTYPE)
        tl.store(sh + t, top)
        total += top
        tl.debug_barrier()
    # log Z = Σ_{j<n} s_j + ⊕_c (a_{n-1}(c) - s_{n-1}): a segment ends at the last position
    last = tl.load(sh + n - 1)
    m, acc, dacc = tl.full([], NEG_INF, DTYPE), tl.zeros([], DTYPE), tl.zeros([], DTYPE)
    for c0 in range(0, C, BI):
        c = c0 + ri
        ok = c < C
        x = tl.load(a + (n - 1) * C + c, mask=ok, other=NEG_INF) - last
        dx = x
        if DUAL:
            dx = tl.load(da + (n - 1) * C + c, mask=ok, other=0.0)
        m, acc, dacc = fold(x, dx, m, acc, dacc, VITERBI, DUAL)
    value, d_value = lse_finish(m, acc, dacc, VITERBI, DUAL)
    tl.store(LOGZ + b, total + value)
    if DUAL:
        tl.store(DLOGZ + b, d_value)


@triton.jit
def _adjoint(E, DE, LEN, A, DA, SH, G, DG, MU, DMU, N, K, C, DUAL: tl.constexpr,
             DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    KCC = K * C * C
    e, de = E + b * (N - 1) * KCC, DE + b * (N - 1) * KCC
    mu, dmu = MU + b * (N - 1) * KCC, DMU + b * (N - 1) * KCC
    a, da, sh = A + b * N * C, DA + b * N * C, SH + b * N
    g, dg = G + b * N * C, DG + b * N * C
    ri, rk = tl.arange(0, BI), tl.arange(0, BK)
    zero = tl.zeros([BI], DTYPE)
    last = tl.load(sh + n - 1)
    # λ = ⊕_c (a_{n-1}(c) - s_{n-1});  γ_{n-1}(c) = exp(a_{n-1}(c) - s_{n-1} - λ)
    m, acc, dacc = tl.full([], NEG_INF, DTYPE), tl.zeros([], DTYPE), tl.zeros([], DTYPE)
    for c0 in range(0, C, BI):
        c = c0 + ri
        ok = c < C
        x = tl.load(a + (n - 1) * C + c, mask=ok, other=NEG_INF) - last
        dx = x
        if DUAL:
            dx = tl.load(da + (n - 1) * C + c, mask=ok, other=0.0)
        m, acc, dacc = fold(x, dx, m, acc, dacc, False, DUAL)
    lam, d_lam = lse_finish(m, acc, dacc, False, DUAL)
    for c0 in range(0, C, BI):
        c = c0 + ri
        ok = c < C
        p_last = tl.exp(tl.load(a + (n - 1) * C + c, mask=ok, other=NEG_INF) - last - lam)
        tl.store(g + (n - 1) * C + c, p_last, mask=ok)
        if DUAL:  # γ̇ = γ (ȧ - λ̇)
            tl.store(dg + (n - 1) * C + c,
                     p_last * (tl.load(da + (n - 1) * C + c, mask=ok, other=0.0) - d_lam), mask=ok)
    tl.debug_barrier()
    for s in range(n - 2, -1, -1):
        for p0 in range(0, C, BI):
            p = p0 + ri
            ok = p < C
            a_p = tl.load(a + s * C + p, mask=ok, other=0.0)
            da_p = a_p
            if DUAL:
                da_p = tl.load(da + s * C + p, mask=ok, other=0.0)
            total, d_total = zero, zero
            d = tl.zeros([], DTYPE)
            for k in range(1, tl.minimum(K - 1, n - 1 - s) + 1):
                t = s + k
                d += tl.load(sh + t - 1)  # d_k = s_s + .. + s_{t-1}
                for c0 in range(0, C, BK):
                    c = (c0 + rk)[None, :]
                    mask = ok[:, None] & (c < C)
                    at = s * KCC + k * C * C + p[:, None] * C + c
                    # w = exp(a_s(p) - d_k + edge(s, k, p, c) - a_t(c)) <= 1: the weight of (k, p)
                    # in a_t(c);  μ(s, k, p, c) = γ_t(c) w
                    x = (a_p[:, None] - d + tl.load(e + at, mask=mask, other=0.0)
                         - tl.load(a + t * C + c, mask=c < C, other=0.0))
                    w = tl.where(mask, tl.exp(tl.minimum(x, 0.0)), 0.0)
                    seg = w * tl.load(g + t * C + c, mask=c < C, other=0.0)
                    tl.store(mu + at, seg, mask=mask)
                    total += tl.sum(seg, 1)
                    if DUAL:
                        # μ̇ = γ̇_t(c) w + μ (ȧ_s(p) + ė(s, k, p, c) - ȧ_t(c))
                        step = (da_p[:, None] + tl.load(de + at, mask=mask, other=0.0)
                                - tl.load(da + t * C + c, mask=c < C, other=0.0))
                        d_seg = tl.where(mask, w * tl.load(dg + t * C + c, mask=c < C, other=0.0)
                                         + seg * step, 0.0)
                        tl.store(dmu + at, d_seg, mask=mask)
                        d_total += tl.sum(d_seg, 1)
            # γ_s(p) = Σ_{k, c} μ(s, k, p, c)
            tl.store(g + s * C + p, total, mask=ok)
            if DUAL:
                tl.store(dg + s * C + p, d_total, mask=ok)
        tl.debug_barrier()


@triton.jit
def _backtrack(E, LEN, A, OUT, N, K, C, DTYPE: tl.constexpr, BK: tl.constexpr):
    """The best structure from the max-semiring vectors ``A`` (unshifted): ``OUT [B, N]`` (``-1``
    on entry) gets the label of position 0 and of the last position of every segment."""
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    KCC = K * C * C
    e, a, out = E + b * (N - 1) * KCC, A + b * N * C, OUT + b * N
    rk = tl.arange(0, BK)
    # the label c at t = n-1: argmax_c a_{n-1}(c)
    best, c = tl.full([], NEG_INF, DTYPE), tl.zeros([], tl.int32)
    for c0 in range(0, C, BK):
        cc = c0 + rk
        best, c = _better(tl.load(a + (n - 1) * C + cc, mask=cc < C, other=NEG_INF), c0, best, c)
    t = n - 1
    tl.store(out + t, c.to(tl.int64))
    for _step in range(0, n - 1):  # (at most n-1 segments; done once t = 0)
        active = t > 0
        # the segment ending at t labelled c: argmax_{(k, p)} a_{t-k}(p) + edge(t-k, k, p, c)
        best = tl.full([], NEG_INF, DTYPE)
        best_k, best_p = tl.zeros([], tl.int32), tl.zeros([], tl.int32)
        for k in range(1, K):
            labels = tl.where(active & (k <= t), C, 0)  # (a scalar mask as a bound on p)
            s = tl.maximum(t - k, 0)
            for p0 in range(0, C, BK):
                p = p0 + rk
                ok = p < labels
                v = (tl.load(a + s * C + p, mask=ok, other=NEG_INF)
                     + tl.load(e + s * KCC + k * C * C + p * C + c, mask=ok, other=NEG_INF))
                before = best
                best, best_p = _better(v, p0, best, best_p)
                best_k = tl.where(best > before, k, best_k)
        t = tl.where(active, t - best_k, t)
        c = tl.where(active, best_p, c)
        tl.store(out + t, c.to(tl.int64), mask=active)


def _prepare(edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Size]:
    """The kernels' arguments: ``edge`` (one element if empty), int32 lengths, ``init`` (0 if
    None) and the shape of ``edge``."""
    edge = edge.detach().contiguous()
    B, _, _, C, _ = edge.shape
    init = edge.new_zeros(B, C) if init is None else init.detach().to(edge.dtype).contiguous()
    return (_nonempty(edge), lengths.to(device=edge.device, dtype=torch.int32).contiguous(), init,
            edge.shape)


def _launch_forward(edge, lengths, init, shape, viterbi=False, direction=None):
    B, M, K, C, _ = shape
    N = M + 1
    block = tile(C)
    alpha = torch.empty(B, N, C, dtype=edge.dtype, device=edge.device)
    shifts = torch.empty(B, N, dtype=edge.dtype, device=edge.device)
    log_z = torch.empty(B, dtype=edge.dtype, device=edge.device)
    dual = direction is not None
    d_alpha = torch.empty_like(alpha) if dual else alpha
    d_log_z = torch.empty_like(log_z) if dual else log_z
    _forward[(B,)](edge, direction if dual else edge, init, lengths, alpha, d_alpha, shifts, log_z, d_log_z,
                   N, K, C, VITERBI=viterbi, DUAL=dual, DTYPE=tl_dtype(edge), BI=block, BK=block)
    return log_z, alpha, shifts, d_log_z, d_alpha


def log_partition(edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor | None = None) -> torch.Tensor:
    """``[B]`` ``log Z`` (one launch); ``init [B, C]`` scores position 0's label (default 0)."""
    return _launch_forward(*_prepare(edge, lengths, init))[0]


def marginals(edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor | None = None,
              direction: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """``(log Z [B], μ [B, n-1, K, C, C])`` (``∂ log Z / ∂ edge``, zero for segments past a
    length), and with ``direction`` (a tensor like ``edge``) also ``μ̇``, the marginals'
    derivative in that direction (two launches)."""
    edge, lengths, init, shape = _prepare(edge, lengths, init)
    B, M, K, C, _ = shape
    dual = direction is not None
    if direction is not None:
        direction = _nonempty(direction.detach().to(edge.dtype).contiguous())
    log_z, alpha, shifts, _, d_alpha = _launch_forward(edge, lengths, init, shape, direction=direction)
    gamma = torch.empty_like(alpha)
    d_gamma = torch.empty_like(alpha) if dual else gamma
    mu = torch.zeros(shape, dtype=edge.dtype, device=edge.device)
    d_mu = torch.zeros_like(mu) if dual else mu
    block = tile(C)
    _adjoint[(B,)](edge, direction if dual else edge, lengths, alpha, d_alpha, shifts, gamma, d_gamma,
                   _nonempty(mu), _nonempty(d_mu), M + 1, K, C, DUAL=dual, DTYPE=tl_dtype(edge),
                   BI=block, BK=block)
    return (log_z, mu, d_mu) if dual else (log_z, mu)


def best(edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor | None = None
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(best score [B], labels [B, n])`` in compact form (``-1`` inside segments and past each
    length): the max-semiring forward pass and the backtrack, in float64 as the PyTorch path."""
    dtype = edge.dtype
    edge, lengths, init, shape = _prepare(edge.double(), lengths, None if init is None else init.double())
    B, M, K, C, _ = shape
    score, alpha, _, _, _ = _launch_forward(edge, lengths, init, shape, viterbi=True)
    labels = torch.full((B, M + 1), -1, dtype=torch.long, device=edge.device)
    _backtrack[(B,)](edge, lengths, alpha, labels, M + 1, K, C, DTYPE=tl.float64, BK=tile(C))
    return score.to(dtype), labels


class LogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the segment marginals of the outside kernel (computed with the
    forward pass when a gradient may be asked for); ``init`` is a constant."""

    @staticmethod
    def forward(ctx, edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor | None) -> torch.Tensor:
        if not ctx.needs_input_grad[0]:
            return log_partition(edge, lengths, init)
        log_z, mu = marginals(edge, lengths, init)
        ctx.save_for_backward(edge, lengths, init, mu)
        return log_z

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        edge, lengths, init, mu = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = Marginals.apply(edge, lengths, init)
        return mu * g.view(-1, 1, 1, 1, 1), None, None


class Marginals(torch.autograd.Function):
    """Segment marginals; backward ``H g`` by the forward and outside kernels on dual numbers (a
    third derivative: autograd through the reference); ``init`` is a constant."""

    @staticmethod
    def forward(ctx, edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(edge, lengths, init)
        return marginals(edge, lengths, init)[1]

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        edge, lengths, init = ctx.saved_tensors
        if torch.is_grad_enabled():
            from ..reference import semi_markov_log_partition

            with torch.enable_grad():
                x = edge if edge.requires_grad else edge.detach().requires_grad_()
                (mu,) = torch.autograd.grad(semi_markov_log_partition(x, lengths, init).sum(), x,
                                            create_graph=True)
                (hg,) = torch.autograd.grad(mu, x, g, create_graph=True, allow_unused=True)
            return hg, None, None
        return marginals(edge, lengths, init, direction=g)[2], None, None


def registry_log_partition(edge, lengths, init=None):
    """``log Z`` with the registry's signature."""
    return LogPartition.apply(edge, lengths, init)


def registry_marginals(edge, lengths, init=None):
    """Segment marginals ``∂ log Z / ∂ edge`` with the registry's signature, differentiable."""
    return Marginals.apply(edge, lengths, init)


# Variants compiled for a GPU by the tests (no GPU needed: Triton compiles to a cubin on any
# machine): each kernel in its most demanding settings. ``(kernel, argument types, constexprs)``.
_INTS = {"LEN": "*i32", "N": "i32", "K": "i32", "C": "i32", "OUT": "*i64"}
COMPILE_CHECKS = [
    (kernel, signature(kernel, "*fp64" if dtype == tl.float64 else "*fp32", **_INTS),
     {"DTYPE": dtype, "BK": 32, **extra})
    for kernel, dtype, extra in [
        (_forward, tl.float32, {"BI": 32, "VITERBI": False, "DUAL": True}),
        (_forward, tl.float64, {"BI": 32, "VITERBI": True, "DUAL": False}),
        (_adjoint, tl.float32, {"BI": 32, "DUAL": True}),
        (_backtrack, tl.float64, {})]
]
