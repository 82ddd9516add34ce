"""The exact k best binary trees of a :class:`~synattn.structs.cky.crf.TreeCRF`: Lawler's scheme
(:func:`~synattn.structs.kbest.lawler`) over masked CKY argmaxes."""

from __future__ import annotations

import torch

from ..constants import NEG
from ..kbest import Constraints, lawler


def tree_kbest(crf, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best binary trees of a :class:`~synattn.structs.cky.crf.TreeCRF`: ``scores [B, k]``
    and 0/1 span charts ``[B, k, N, N]`` (all 0 where fewer than ``k`` trees exist; ``k`` columns
    at most, as many as the largest list when every element has fewer, see :func:`~synattn.structs.kbest.lawler`).

    A subspace is ``(allowed [N, N], included [N, N])``. A tree's free parts are its spans other
    than the one-word spans and the whole sentence (those are in every tree), ordered by start
    and end, minus those its subspace already includes. Keeping a span = forbidding every span
    that crosses it: a binary bracketing of ``n`` words has ``2n - 1`` spans, the most a
    non-crossing set can have, so a span that crosses none of a tree's spans is one of them.
    """
    scores, lengths = crf.scores.detach(), crf.lengths
    batch, N, _ = scores.shape
    device = scores.device
    sizes = lengths.tolist()
    a, c = torch.arange(N).view(1, N, 1), torch.arange(N).view(1, 1, N)

    def solve(sents: torch.Tensor, constraints: Constraints) -> tuple[list[float], torch.Tensor]:
        allowed = constraints[0].to(device)
        sub = type(crf)(torch.where(allowed, scores[sents.to(device)], NEG), lengths[sents.to(device)])
        return sub.max.detach().double().cpu().tolist(), sub.argmax.cpu()

    def split(b: int, y: torch.Tensor, constraint: Constraints) -> Constraints:
        allowed, included = constraint
        width = c - a  # [1, N, N]
        free = (y[None] > 0.5) & (width >= 1) & (width <= sizes[b] - 2) & ~included[None]
        _, i, j = free.nonzero(as_tuple=True)  # [m] spans, ordered by start then end
        i, j = i.view(-1, 1, 1), j.view(-1, 1, 1)
        cross = ((a < i) & (i <= c) & (c < j)) | ((i < a) & (a <= j) & (j < c))  # [m, N, N]
        span = (a == i) & (c == j)  # [m, N, N]
        # sub-problem t keeps spans 0..t-1 (forbids what crosses them) and forbids span t
        kept_cross = (cross.cumsum(0) - cross.long()) > 0
        kept = (span.cumsum(0) - span.long()) > 0
        return allowed & ~kept_cross & ~span, included | kept

    initial = (torch.ones(batch, N, N, dtype=torch.bool), torch.zeros(batch, N, N, dtype=torch.bool))
    best, charts = lawler(k, initial, solve, split, torch.zeros(N, N, dtype=scores.dtype))
    return best.to(device), charts.to(device)
