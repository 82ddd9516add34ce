"""The signed log-space semifield (Li and Eisner 2009): a real number ``a`` is the pair
``(log|a|, sign a)``, so that gradients that may be negative go through log-space recursions
without overflow. Kim et al. (2017, "Backpropagating through Forward-Backward") backpropagate
through forward-backward in it (:class:`~synattn.structs.chain.ChainMarginals`).
"""

from __future__ import annotations

import torch

from ..constants import NEG


def signed_log(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log|x|, sign x)``; zero maps to ``(NEG, +1)`` so that it stays finite."""
    zero = x == 0
    logabs = torch.where(zero, torch.full_like(x, NEG), x.abs().log())
    sign = torch.where(x < 0, -torch.ones_like(x), torch.ones_like(x))
    return logabs, sign


def signed_exp(logabs: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """Back to ordinary numbers: ``sign * exp(logabs)``."""
    return sign * logabs.exp()


def signed_logsumexp(logabs: torch.Tensor, sign: torch.Tensor,
                     dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The semifield sum ``⊕`` over ``dim``: ``(log|Σ s exp(l)|, sign Σ s exp(l))``.

    This is the table of Li and Eisner (2009) applied to a whole dimension at once: shift by the
    largest ``l``, add signed terms, take the log of the magnitude. An exact cancellation gives
    ``(NEG + max, +1)``: a finite stand-in for zero.
    """
    m = logabs.amax(dim, keepdim=True)
    total = (sign * (logabs - m).exp()).sum(dim)
    m = m.squeeze(dim)
    out_sign = torch.where(total < 0, -torch.ones_like(total), torch.ones_like(total))
    mag = total.abs()
    out = torch.where(mag > 0, mag.clamp_min(torch.finfo(mag.dtype).tiny).log() + m, m + NEG)
    return out, out_sign
