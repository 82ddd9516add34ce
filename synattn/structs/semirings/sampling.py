"""Sampling semirings: the log semiring forward, a draw in the backward pass.

Each ``⊕`` is a log-sum-exp whose backward sends all of its incoming adjoint to *one* term drawn
with its posterior weight (``exp(t_k - ⊕ t)``) instead of spreading it over all terms. Run
top-down from the final cell, this is forward filtering, backward sampling on any dynamic
program (Goodman 1999's sampling semiring; torch-struct's ``SampledSemiring``): the gradient of
the value with respect to the potentials is the 0/1 indicator of one exact sample.

- :data:`SampledSemiring`: one sample per backward.
- :data:`MultiSampledSemiring`: 16 samples with replacement per backward, coded in the bits of
  the gradient (sample ``j`` is ``MultiSampledSemiring.to_discrete(grad, j)``, ``j = 0..15``),
  as torch-struct's.
- :func:`GumbelCRFSemiring` ``(temperature)``: a sample by perturb-and-max per ``⊕`` (Gumbel
  noise, independent for every row; torch-struct 0.5 draws one noise vector per ``⊕`` call and
  shares it between rows) whose own backward, when the sample is differentiated in turn, is
  the softmax of the perturbed terms at ``temperature``: the straight-through Gumbel-CRF
  estimator of Fu et al. (2020).

The draws use PyTorch's global generator (``torch.manual_seed`` makes them repeatable).
"""

from __future__ import annotations

import torch

from .generic import LogSemiring

__all__ = ["GumbelCRFSemiring", "MultiSampledSemiring", "SampledSemiring"]

BITS = 16
"""Samples per backward of :class:`MultiSampledSemiring`."""


def _draw(logits: torch.Tensor, dim: int, count: int) -> torch.Tensor:
    """``[count, *logits.shape]`` one-hot draws along ``dim`` from ``softmax(logits, dim)``."""
    x = logits.detach().movedim(dim, -1)
    probs = torch.softmax(x.double(), -1).reshape(-1, x.shape[-1])
    picks = torch.multinomial(probs, count, replacement=True).t()  # [count, rows]
    hot = torch.nn.functional.one_hot(picks, x.shape[-1]).to(logits.dtype)
    return hot.view(count, *x.shape).movedim(-1, dim if dim < 0 else dim + 1)


class _LogSumExp(torch.autograd.Function):
    """Log-sum-exp over ``dim`` that keeps ``x`` and ``dim``; each subclass gives its backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.dim = dim
        return torch.logsumexp(x, dim)


class _SampledLogSumExp(_LogSumExp):
    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (x,) = ctx.saved_tensors
        return g.unsqueeze(ctx.dim) * _draw(x, ctx.dim, 1)[0], None


class SampledSemiring(LogSemiring):
    """Log-sum-exp forward; the gradient of the value is one exact sample (see the module)."""

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
        return _SampledLogSumExp.apply(x, dim)


class _MultiSampledLogSumExp(_LogSumExp):
    """The incoming adjoint ``g`` is a set of samples coded as bits: bit ``j + 1`` set (value
    ``2^(j+1)``) when sample ``j`` passes through this cell, or ``g = 1`` at the top (all
    samples). Each sample that passes picks its own term."""

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (x,) = ctx.saved_tensors
        draws = _draw(x, ctx.dim, BITS)  # [BITS, ...]
        code = g.double().round().long()
        weights = 2 ** torch.arange(1, BITS + 1, device=g.device)  # [BITS]
        shape = (BITS, *[1] * g.dim())
        top = code == 1
        passes = ((code.unsqueeze(0) & weights.view(shape)) != 0) | top.unsqueeze(0)
        w = torch.where(passes, weights.view(shape), 0).to(x.dtype)
        return (w.unsqueeze(ctx.dim + 1 if ctx.dim >= 0 else ctx.dim) * draws).sum(0), None


class MultiSampledSemiring(LogSemiring):
    """Log-sum-exp forward; the gradient of the value codes 16 exact samples with replacement
    in its bits (see the module); run it in float64 (the codes reach ``2^17``)."""

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
        return _MultiSampledLogSumExp.apply(x, dim)

    @staticmethod
    def to_discrete(grad: torch.Tensor, j: int) -> torch.Tensor:
        """Sample ``j`` (``0..15``) as 0/1 parts from the coded gradient ``grad`` (an odd code:
        a part above the first ``⊕``, in every sample)."""
        if not 0 <= j < BITS:
            raise ValueError(f"MultiSampledSemiring.to_discrete: j must be in 0..{BITS - 1}, got {j}")
        code = grad.double().round().long()
        return (((code >> (j + 1)) | code) & 1).to(grad.dtype)


def GumbelCRFSemiring(temperature: float) -> type[LogSemiring]:
    """Log-sum-exp forward; the gradient of the value is a sample drawn by Gumbel-max at each
    ``⊕``, and the gradient of that sample (``create_graph=True``) is the straight-through
    softmax of the perturbed terms divided by ``temperature`` (Fu et al. 2020)."""
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"GumbelCRFSemiring: temperature must be a number > 0, got {temperature!r}")

    class _StraightThrough(torch.autograd.Function):
        @staticmethod
        def forward(ctx, perturbed: torch.Tensor, dim: int) -> torch.Tensor:
            hot = torch.nn.functional.one_hot(perturbed.argmax(dim), perturbed.shape[dim])
            hot = hot.movedim(-1, dim).to(perturbed.dtype)
            ctx.save_for_backward(perturbed, hot)
            ctx.dim = dim
            return hot

        @staticmethod
        def backward(ctx, g: torch.Tensor):
            perturbed, hot = ctx.saved_tensors
            with torch.enable_grad():
                x = perturbed.detach().requires_grad_()
                soft = torch.softmax(x / temperature, ctx.dim)
                return torch.autograd.grad(soft, x, hot * g)[0], None

    class _GumbelLogSumExp(_LogSumExp):
        @staticmethod
        def backward(ctx, g: torch.Tensor):
            (x,) = ctx.saved_tensors
            u = torch.rand_like(x).clamp_min(torch.finfo(x.dtype).tiny)
            perturbed = x - torch.log(-torch.log(u))
            return g.unsqueeze(ctx.dim) * _StraightThrough.apply(perturbed, ctx.dim), None

    class _GumbelCRF(LogSemiring):
        @classmethod
        def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
            return _GumbelLogSumExp.apply(x, dim)

    _GumbelCRF.__name__ = _GumbelCRF.__qualname__ = f"GumbelCRFSemiring({temperature})"
    return _GumbelCRF
