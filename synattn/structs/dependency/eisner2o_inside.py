"""Second-order (adjacent-sibling) Eisner in PyTorch, and the compiled path's autograd Functions.

The recursion of :mod:`synattn.structs.dependency.eisner2o` (written plainly, for any semiring, in
:func:`synattn.structs.reference.eisner2o`) vectorised over the spans of one width and the batch:
:func:`eisner2o_inside` takes one Python step per width and gathers by index from charts
``[5, N+1, N+1, B]``; its gradient by autograd gives the marginals (log semiring), the best tree
(``viterbi``: max semiring) or one exact sample's arcs (``sampled``: the sampled ``⊕``,
:func:`eisner2o_sample`), and its double backward the marginals' backward. On CPU tensors
:class:`_LogPartition2o` and :class:`_Marginals2o` run the compiled kernels
(:mod:`synattn.structs.dependency._eisner2o_kernels`: explicit outside pass) instead, with
autograd's double backward of :func:`eisner2o_inside` for the marginals' own backward.
"""

from __future__ import annotations

import torch

from .. import reference
from ..backend import kernels, requested_backend
from ..constants import NEG
from .arc_scores import heads_from_arcs

# channels of the chart [5, L, L, B]: chart[c, i, j] for the span (i, j), i <= j
CR, CL, IR, IL, SIB = range(5)


class _SampledLogSumExp(torch.autograd.Function):
    """Log-sum-exp over ``dim`` whose backward sends all of its adjoint to one term drawn with its
    posterior weight (Gumbel-max with ``generator``): the sampled semiring's ``⊕`` (Goodman 1999),
    so that the gradient of ``log Z`` is one exact sample's arcs."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int, generator: torch.Generator | None) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.dim, ctx.generator = dim, generator
        return torch.logsumexp(x, dim)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (x,) = ctx.saved_tensors
        u = torch.rand(x.shape, generator=ctx.generator, dtype=x.dtype, device=x.device)
        pick = (x - torch.log(-torch.log(u.clamp_min(1e-30)))).max(ctx.dim, keepdim=True).indices  # (= argmax)
        return torch.zeros_like(x).scatter_(ctx.dim, pick, g.unsqueeze(ctx.dim)), None, None


def eisner2o_inside(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                    multiroot: bool = True, viterbi: bool = False, sampled: bool = False,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """``[B]`` ``log Z`` (or the best tree's score with ``viterbi``) of the recursion in the module
    docstring, differentiable by autograd (also twice); with ``sampled``, its gradient is a
    sample's arcs instead of the marginals (:class:`_SampledLogSumExp`, draws from ``generator``).

    Args:
        scores: ``[B, L, L]`` checked arc scores ``[b, h, d]`` (``L = n+1``).
        siblings: ``[B, L, L, L]`` checked sibling scores ``[b, h, s, m]``.
        lengths: ``[B]`` word counts in ``1..n``.
        multiroot: several words may attach to ROOT.
        viterbi: the max semiring instead of log-sum-exp.
        sampled, generator: the sampled log-sum-exp instead (see above).
    """

    def _semiring_sum(x: torch.Tensor, dim: int, viterbi: bool) -> torch.Tensor:
        if sampled:
            return _SampledLogSumExp.apply(x, dim, generator)
        return x.max(dim).values if viterbi else torch.logsumexp(x, dim)

    B, L, _ = scores.shape
    dev = scores.device
    arc = scores.permute(1, 2, 0)  # [L(h), L(d), B]
    sib = siblings.permute(1, 2, 3, 0)  # [L(h), L(s), L(m), B]
    chart = torch.full((5, L, L, B), NEG, dtype=scores.dtype, device=dev)
    diag = torch.arange(L, device=dev)
    chart[CR, diag, diag] = 0.0
    chart[CL, diag, diag] = 0.0
    for w in range(1, L):
        n = L - w
        i = torch.arange(n, device=dev)  # span starts
        j = i + w
        I, J = i[:, None], j[:, None]  # noqa: E741 (the span ends i, j as columns) [n, 1]
        t = torch.arange(w, device=dev)[None, :]  # [1, w] split offsets
        # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
        s_ij = _semiring_sum(chart[CR, I, I + t] + chart[CL, I + t + 1, J], 1, viterbi)  # [n, B]
        r = (I + t)[:, 1:]  # [n, w-1] inner siblings i < r < j
        # I→(i, j): nearest child (C←(i+1, j)) or I→(i, r) ⊗ S(r, j) ⊗ sib[i, r, j]
        inner_r = chart[IR, I, r] + chart[SIB, r, J] + sib[I, r, J]  # [n, w-1, B]
        if not multiroot and w > 1:
            inner_r[0] = NEG  # ROOT's only child has no sibling
        right = torch.cat([chart[CL, i + 1, j].unsqueeze(1), inner_r], 1)
        ir = arc[i, j] + _semiring_sum(right, 1, viterbi)
        # I←(i, j): nearest child (C→(i, j-1)) or I←(r, j) ⊗ S(i, r) ⊗ sib[j, r, i]
        inner_l = chart[IL, r, J] + chart[SIB, I, r] + sib[J, r, I]
        left = torch.cat([chart[CR, i, j - 1].unsqueeze(1), inner_l], 1)
        il = arc[j, i] + _semiring_sum(left, 1, viterbi)
        chart[SIB, i, j] = s_ij
        chart[IR, i, j] = ir
        chart[IL, i, j] = il
        # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j);  C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
        cr = _semiring_sum(chart[IR, I, I + t + 1] + chart[CR, I + t + 1, J], 1, viterbi)
        cl = _semiring_sum(chart[CL, I, I + t] + chart[IL, I + t, J], 1, viterbi)
        chart[CR, i, j] = cr
        chart[CL, i, j] = cl
    return chart[CR, 0, lengths, torch.arange(B, device=dev)]


def eisner2o_sample(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                    multiroot: bool, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[count, B, n]`` heads (``-1`` padding) of exact samples, top-down from the inside chart:
    the gradient of one :func:`eisner2o_inside` pass over ``count`` copies of the batch under the
    sampled ``⊕`` (float64; the PyTorch path of ``Dependency2oCRF.sample``)."""
    B = scores.shape[0]
    with torch.enable_grad():
        x = scores.detach().double().repeat(count, 1, 1).requires_grad_()
        y = siblings.detach().double().repeat(count, 1, 1, 1)
        log_z = eisner2o_inside(x, y, lengths.repeat(count), multiroot, sampled=True, generator=generator)
        (arcs,) = torch.autograd.grad(log_z.sum(), x)
    return heads_from_arcs(arcs, lengths.repeat(count)).view(count, B, scores.shape[-1] - 1)


def eisner2o_log_partition(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                           multiroot: bool = True) -> torch.Tensor:
    """``[B]`` ``log Z``: the plain reference
    (:func:`synattn.structs.reference.eisner2o_log_partition`) under ``use_backend("reference")``,
    else :func:`eisner2o_inside`."""
    if requested_backend() == "reference":
        return reference.eisner2o_log_partition(scores, siblings, lengths, multiroot)
    return eisner2o_inside(scores, siblings, lengths, multiroot)


def _gradients(fn, scores: torch.Tensor, siblings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``fn(scores, siblings) [B]`` and its gradients with respect to both, differentiable when
    gradients are enabled and either input requires them."""
    graph = torch.is_grad_enabled() and (scores.requires_grad or siblings.requires_grad)
    with torch.enable_grad():
        x = scores if scores.requires_grad and graph else scores.detach().requires_grad_()
        y = siblings if siblings.requires_grad and graph else siblings.detach().requires_grad_()
        value = fn(x, y)
        gx, gy = torch.autograd.grad(value.sum(), (x, y), create_graph=graph, allow_unused=True)
    gx = torch.zeros_like(scores) if gx is None else gx
    gy = torch.zeros_like(siblings) if gy is None else gy
    return value if graph else value.detach(), gx, gy


class _LogPartition2o(torch.autograd.Function):
    """``log Z`` by the compiled kernels; backward: their marginals (explicit outside pass), or
    :class:`_Marginals2o` when a second derivative is being built."""

    @staticmethod
    def forward(ctx, scores, siblings, lengths, multiroot):
        ctx.multiroot = multiroot
        if not any(ctx.needs_input_grad[:2]):
            return kernels("dependency._eisner2o_kernels").log_partition(scores, siblings, lengths, multiroot)
        log_z, mu, mu_sib = kernels("dependency._eisner2o_kernels").marginals(scores, siblings, lengths, multiroot)
        ctx.save_for_backward(scores, siblings, lengths, mu, mu_sib)
        return log_z

    @staticmethod
    def backward(ctx, g):
        scores, siblings, lengths, mu, mu_sib = ctx.saved_tensors
        if torch.is_grad_enabled():
            mu, mu_sib = _Marginals2o.apply(scores, siblings, lengths, ctx.multiroot)
        return mu * g[:, None, None], mu_sib * g[:, None, None, None], None, None


class _Marginals2o(torch.autograd.Function):
    """Arc and sibling marginals by the compiled inside-outside pass; their backward (the Hessian
    of ``log Z`` times the incoming gradients) by autograd's double backward of
    :func:`eisner2o_inside` (PyTorch path)."""

    @staticmethod
    def forward(ctx, scores, siblings, lengths, multiroot):
        ctx.multiroot = multiroot
        ctx.save_for_backward(scores, siblings, lengths)
        return kernels("dependency._eisner2o_kernels").marginals(scores, siblings, lengths, multiroot)[1:]

    @staticmethod
    def backward(ctx, g, g_sib):
        scores, siblings, lengths = ctx.saved_tensors
        return (*marginals_vjp_by_autograd(scores, siblings, lengths, ctx.multiroot, g, g_sib), None, None)


def marginals_vjp_by_autograd(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                              multiroot: bool, g: torch.Tensor, g_sib: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The vector-Jacobian product of the arc and sibling marginals with ``(g, g_sib)`` by
    autograd's double backward of :func:`eisner2o_inside` (differentiable again when gradients are
    enabled: a third derivative)."""
    graph = torch.is_grad_enabled()
    with torch.enable_grad():
        x = scores if graph and scores.requires_grad else scores.detach().requires_grad_()
        y = siblings if graph and siblings.requires_grad else siblings.detach().requires_grad_()
        log_z = eisner2o_inside(x, y, lengths, multiroot)
        mu = torch.autograd.grad(log_z.sum(), (x, y), create_graph=True)
        hx, hy = torch.autograd.grad(mu, (x, y), (g, g_sib), create_graph=graph, allow_unused=True)
    hx = torch.zeros_like(scores) if hx is None else hx
    hy = torch.zeros_like(siblings) if hy is None else hy
    return hx, hy
