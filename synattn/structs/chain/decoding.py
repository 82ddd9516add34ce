"""Constraints and exact sampling for :class:`synattn.structs.LinearChainCRF` (k-best is the
generic :meth:`synattn.structs.distribution.Decoding.kbest`)."""

from __future__ import annotations

import torch

from ..constants import NEG
from ..distribution import _gumbel_argmax
from .dp import forward_backward, transfer_matrices


def constrained_unary(unary: torch.Tensor, labels: torch.Tensor | None,
                      allowed: torch.Tensor | None) -> torch.Tensor:
    """``unary [B, n, C]`` with every label excluded by ``labels`` (``[B, n]``, ``-1`` free) or
    ``allowed`` (``[B, n, C]`` bool) set to :data:`~synattn.structs.constants.NEG`."""
    keep = torch.ones_like(unary, dtype=torch.bool)
    if allowed is not None:
        if allowed.shape != unary.shape:
            raise ValueError(f"constrain: allowed must be {tuple(unary.shape)}, got {tuple(allowed.shape)}")
        keep = keep & allowed.to(keep.device).bool()
    if labels is not None:
        if labels.shape != unary.shape[:2]:
            raise ValueError(f"constrain: labels must be {tuple(unary.shape[:2])}, got {tuple(labels.shape)}")
        labels = labels.to(keep.device).long()
        C = unary.shape[-1]
        if bool(((labels < -1) | (labels >= C)).any()):
            raise ValueError(f"constrain: labels must be -1 (free) or in 0..{C - 1}")
        keep = keep & ((torch.arange(C, device=keep.device) == labels.unsqueeze(-1))
                       | (labels < 0).unsqueeze(-1))
    return torch.where(keep, unary, torch.full_like(unary, NEG))


def ffbs(crf, count: int, generator: torch.Generator | None) -> torch.Tensor:
    """``[count, B, n]`` exact samples of ``crf`` by forward filtering, backward sampling.

    The forward log-vectors ``alpha`` (float64, PyTorch path) give the last label,
    ``p(y_{n-1} = c) ∝ exp(alpha[c, n-1])``, then right to left
    ``p(y_i = p | y_{i+1} = c) ∝ exp(alpha[p, i] + T[p, c, i])``. Padded positions carry the
    identity transfer matrix, so a chain's last label is drawn at the padded end and copied back.
    """
    with torch.no_grad():
        u0, T = transfer_matrices(crf.unary.detach().double(), crf.edge.detach().double(), crf.mask)
        alpha, _ = forward_backward(u0, T, scan=False)  # [C, n, B]
        C, n, batch = alpha.shape
        out = torch.empty(count, batch, n, dtype=torch.long, device=alpha.device)
        y = _gumbel_argmax(alpha[:, -1].t().expand(count, batch, C), generator)  # [count, B]
        out[:, :, -1] = y
        for i in range(n - 2, -1, -1):
            trans = T[:, :, i].permute(2, 0, 1)  # [B, C(p), C(c)]
            into = trans.unsqueeze(0).expand(count, -1, -1, -1).gather(
                3, y[:, :, None, None].expand(count, batch, C, 1)).squeeze(-1)  # [count, B, C]
            y = _gumbel_argmax(alpha[:, i].t() + into, generator)
            out[:, :, i] = y
        none = crf.log_partition.detach() == -float("inf")
        return out.masked_fill(~crf.mask | none.unsqueeze(-1), -1)
