"""Matrix-Tree on a GPU: a fixed number of launches whatever ``N``, nothing read back to the host.

The PyTorch path of :mod:`synattn.structs.dependency.matrix_tree` was written for the CPU: it
checks LAPACK's result sentence by sentence on the host (three reads back per call), takes the
GTH elimination for ``N >= LAPACK_MAX_N`` (a CPU LAPACK quirk; the elimination runs one Python
step per pivot, several launches each) and computes the marginals' backward by forward-mode
differentiation of that elimination (again one step per pivot). On a GPU each of those steps is
a kernel launch or a synchronisation, which is why the path was launch-bound there.

This path keeps the same numbers with device-sized steps only:

- ``log Z`` and the marginals from Koo et al.'s matrix (Koo et al. 2007) by batched LU and
  solve on the device (:func:`~synattn.structs.dependency.matrix_tree_gth._lapack_inverse`, at
  any ``N``), with the certificate computed on the device (pivots against their columns,
  marginals in ``[0, 1]``, column sums 1 to ``1e-9``, no column wider than ``SAFE_SPREAD``);
- the marginals' backward in closed form from the inverse ``X`` the forward kept:
  ``H v = v * mu - w * K(X P X)`` with ``P`` Koo's matrix of the weights ``v * w`` (the
  derivation is at :func:`~synattn.structs.dependency.matrix_tree_gth._compiled_closed_form_tangent`):
  two batched matrix products;
- a sentence that fails the certificate (extreme score scales, masks that starve a pivot) is
  computed by the log-space elimination of :mod:`synattn.structs.dependency.matrix_tree_log`, its
  adjoint for the marginals, and both on dual numbers for their backward, in one Triton kernel
  (:mod:`synattn.structs.triton_kernels.matrix_tree`) launched for the whole batch: a program
  whose sentence is certified returns at once, so the choice is made on the device and nothing
  is read back to the host. Without Triton (or with the ``torch`` backend), one boolean is read
  back per forward ("is every sentence certified?"; the marginals' backward reuses it) and those
  sentences take :func:`~synattn.structs.dependency.matrix_tree._marginals`, which reads back more.

It runs for CUDA tensors (registered as the ``device`` acceleration of ``nonprojective``,
ahead of the CPU-oriented PyTorch path); on CPU tensors the same functions give the same numbers
(the kernel under Triton's interpreter), which is how the tests check it.
"""

from __future__ import annotations

import torch

from ..backend import kernels, requested_backend, triton_available, triton_interpreted
from .arc_scores import usable_arcs
from .matrix_tree_gth import _koo_gradient, _koo_matrix, _lapack_inverse, _scaled_arcs
from .matrix_tree_log import _wide_columns


def device_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool
                     ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None, bool | None]:
    """``log Z [B]`` (float64), marginals ``[B, N+1, N+1]`` (float64, or None), ``[B]`` True
    where the LU result is certified, the inverses ``X [B, N, N]`` (certified rows) and whether
    every row is certified: None when the robust kernel decided on the device (no read back),
    else read back once, here (a backward reuses it)."""
    log_z, mu, ok, inverse = _lapack_inverse(scores, lengths, multiroot, need_marginals)
    ok = ok & ~_wide_columns(scores, lengths)
    if _on_device(scores):
        z, m = robust_marginals(scores, lengths, multiroot, ok, need_marginals)
        log_z = torch.where(ok, log_z, z)
        if mu is not None and m is not None:
            mu = torch.where(ok[:, None, None], mu, m)
        return log_z, mu, ok, inverse, None
    if bool(ok.all()):  # the one read back to the host (without Triton)
        return log_z, mu, ok, inverse, True
    from .matrix_tree import _marginals  # (the robust path, for the rows that fail the certificate)

    redo = (~ok).nonzero().squeeze(1)
    z, m = _marginals(scores[redo], lengths[redo], multiroot, need_marginals)[:2]
    log_z = log_z.index_copy(0, redo, z.to(log_z.dtype))
    if mu is not None and m is not None:
        mu = mu.index_copy(0, redo, m.to(mu.dtype))
    return log_z, mu, ok, inverse, False


def _on_device(scores: torch.Tensor) -> bool:
    """Whether the rows that fail the certificate take the Triton kernel, gated on the device:
    when triton imports (on CPU tensors: under its interpreter), unless the ``torch`` backend
    was asked for."""
    if requested_backend() == "torch" or not triton_available():
        return False
    return scores.device.type == "cuda" or (scores.device.type == "cpu" and triton_interpreted())


def robust_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, ok: torch.Tensor,
                     need_marginals: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log Z [B]`` and marginals ``[B, N+1, N+1]`` (float64, or None) by the log-space
    elimination in one Triton launch (:mod:`synattn.structs.triton_kernels.matrix_tree`), for
    the rows where ``ok [B]`` is False (the others: unspecified). A sentence whose masks leave no
    tree gets ``log Z = 2·NEG`` and zero marginals, as on the CPU paths."""
    return kernels("triton_kernels.matrix_tree").robust(scores, lengths, ok, multiroot, need_marginals)


def robust_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, ok: torch.Tensor,
                   direction: torch.Tensor) -> torch.Tensor:
    """The Hessian of ``log Z`` times ``direction``, ``[B, N+1, N+1]`` float64, by the log-space
    elimination and its adjoint on dual numbers, for the rows where ``ok`` is False (0 where
    no tree)."""
    hv = kernels("triton_kernels.matrix_tree").robust(scores, lengths, ok, multiroot, True, direction)[1]
    assert hv is not None
    return hv


def closed_form_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, mu: torch.Tensor,
                        inverse: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """The Hessian of ``log Z`` times ``direction``, ``[B, N+1, N+1]`` float64, from the marginals
    and the inverses of Koo's matrices: ``H v = v * mu - w * K(X P X)``, ``P = L(v * w)``."""
    root, words, _, _ = _scaled_arcs(scores, lengths)  # [B, N], [B, N(h), N(d)]
    v = direction.double()
    P = _koo_matrix(root * v[:, 0, 1:], words * v[:, 1:, 1:], multiroot)  # [B, N, N]
    second = torch.cat((root.unsqueeze(1), words), 1) * _koo_gradient(inverse @ P @ inverse, multiroot)
    hv = v * mu.double() - torch.cat((second.new_zeros(second.shape[0], second.shape[1], 1), second), 2)
    return torch.where(usable_arcs(lengths, hv.shape[-1]), hv, 0.0)


class DeviceLogPartition(torch.autograd.Function):
    """``log Z``; its backward is the marginals, computed with it when a gradient may come."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
        ctx.multiroot = multiroot
        log_z, mu = device_marginals(scores, lengths, multiroot, ctx.needs_input_grad[0])[:2]
        ctx.save_for_backward(scores, lengths, mu if mu is not None else scores.new_zeros(0))
        return log_z.to(scores.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, mu = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = DeviceMarginals.apply(scores, lengths, ctx.multiroot)
        return mu.to(scores.dtype) * g[:, None, None], None, None


class DeviceMarginals(torch.autograd.Function):
    """Arc marginals; backward ``H g`` in closed form (certified rows) or by the robust path."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
        ctx.multiroot = multiroot
        _, mu, ok, inverse, ctx.certified = device_marginals(scores, lengths, multiroot, True)
        assert mu is not None and inverse is not None
        ctx.save_for_backward(scores, lengths, mu, ok, inverse)
        return mu.to(scores.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, mu, ok, inverse = ctx.saved_tensors
        from .matrix_tree import MatrixTreeMarginals, marginals_vjp_by_autograd

        if torch.is_grad_enabled():  # a third derivative: autograd through the log-space elimination
            return marginals_vjp_by_autograd(scores, lengths, ctx.multiroot, g), None, None
        hv = closed_form_tangent(scores, lengths, ctx.multiroot, mu, inverse, g)
        if ctx.certified is None:  # the rows that failed the certificate: the kernel, gated on the device
            robust = robust_tangent(scores, lengths, ctx.multiroot, ok, g)
            hv = torch.where(ok[:, None, None], hv, robust)
        elif not ctx.certified:  # rows the forward recomputed: the robust path's backward
            redo = (~ok).nonzero().squeeze(1)
            with torch.enable_grad():
                x = scores[redo].detach().requires_grad_()
                m = MatrixTreeMarginals.apply(x, lengths[redo], ctx.multiroot, False)
                (h,) = torch.autograd.grad(m, x, g[redo].to(m.dtype))
            hv = hv.index_copy(0, redo, h.to(hv.dtype))
        return hv.to(scores.dtype), None, None
