"""Arc-score conventions shared by the dependency CRFs.

**Layout:** ``scores[b, h, d]`` is the log-score of the arc head ``h`` → dependent ``d`` for a
sentence with ROOT at index 0 and words ``1..n`` (tensor ``[batch_size, n+1, n+1]``). Arcs into
ROOT (``scores[:, :, 0]``), self-loops and entries past a sentence's length are ignored. Arc
marginals use the same layout. A tree is given as ``heads [batch_size, n]``: the head of word
``d`` is ``heads[:, d-1]`` (0 = ROOT, as in CoNLL-U), ``-1`` past the sentence's length.
"""

from __future__ import annotations

import torch

from functools import cached_property

from .distribution import StructDistribution
from .semiring import (IMPOSSIBLE, NEG, check_score_range, float_dtype, fp32_inside, has_masked,
                       mask_impossible)


def check_arc_scores(scores: torch.Tensor,
                     lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate arc scores and lengths.

    Args:
        scores: ``[batch_size, n+1, n+1]`` arc scores (any float dtype).
        lengths: ``[batch_size]`` word counts in ``1..n``, or None for all ``n``.

    Returns:
        Scores in float32/float64 with every entry that no tree uses set to 0 (so that padding
        may hold anything, even NaN), entries ``<= NEG`` (``-inf``, ``finfo.min``...) set to
        :data:`~synattn.structs.semiring.NEG` (masked arcs), and the lengths as a long tensor on
        the scores' device.

    Raises:
        ValueError: bad shapes or lengths, or finite scores too large for masks to stay
            impossible (:func:`~synattn.structs.semiring.check_score_range`).
    """
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 2:
        raise ValueError(f"scores must be [B, n+1, n+1] with n >= 1, got {tuple(scores.shape)}")
    batch, L, _ = scores.shape
    if lengths is None:
        lengths = torch.full((batch,), L - 1, dtype=torch.long, device=scores.device)
    lengths = torch.as_tensor(lengths, device=scores.device).long()
    if lengths.shape != (batch,) or bool((lengths < 1).any()) or bool((lengths > L - 1).any()):
        raise ValueError(f"lengths must be [B] with values in 1..{L - 1}, got {lengths.tolist()}")
    scores = mask_impossible(scores.to(float_dtype(scores)))
    usable = usable_arcs(lengths, L)
    check_score_range(scores, usable, L - 1, "scores")
    return torch.where(usable, scores, scores.new_zeros(())), lengths


def usable_arcs(lengths: torch.Tensor, L: int) -> torch.Tensor:
    """``[batch_size, L, L]`` True for the arcs ``h -> d`` some tree can use (``d >= 1``, ``h != d``)."""
    pos = torch.arange(L, device=lengths.device)
    heads = pos <= lengths.unsqueeze(-1)  # [B, L]: ROOT and the words
    usable = heads.unsqueeze(2) & (heads & (pos > 0)).unsqueeze(1)  # [B, L(h), L(d)]
    return usable & (pos.unsqueeze(1) != pos)


def tree_score(scores: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``Σ_d scores[b, heads[b, d-1], d]`` over the words of each sentence.

    Args:
        scores: ``[batch_size, n+1, n+1]`` arc scores.
        heads: ``[batch_size, n]`` heads of words ``1..n`` (entries past lengths are ignored).
        lengths: ``[batch_size]``.

    Returns:
        ``[batch_size]`` tree scores.
    """
    n = heads.shape[1]
    valid = torch.arange(n, device=heads.device) < lengths[:, None]
    arc = scores[:, :, 1:].gather(1, heads.clamp_min(0).unsqueeze(1)).squeeze(1)  # [B, n]
    return torch.where(valid, arc, arc.new_zeros(())).sum(1)


def heads_from_arcs(arcs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[batch_size, n]`` heads from 0/1 arc indicators ``[batch_size, n+1, n+1]``; ``-1`` padding."""
    heads = arcs[:, :, 1:].argmax(1)  # [B, n]
    n = heads.shape[1]
    return heads.masked_fill(torch.arange(n, device=heads.device) >= lengths[:, None], -1)


class ArcCRF(StructDistribution):
    """What the dependency CRFs share: validated arc scores, ``log_partition`` and ``marginals``
    by the subclass's autograd Functions, ``score``, and (from
    :class:`~synattn.structs.distribution.StructDistribution`) ``log_prob``, ``entropy``,
    ``cross_entropy`` and ``kl``.

    Args:
        scores: ``[batch_size, n+1, n+1]`` arc log-scores, ``scores[b, h, d]`` for head ``h`` →
            dependent ``d``; index 0 is ROOT. Entries past a sentence's length, the diagonal and
            ``scores[:, :, 0]`` are ignored.
        lengths: ``[batch_size]`` number of words, in ``1..n``; default all ``n``.
        multiroot: if False, exactly one word attaches to ROOT.
    """

    log_partition_fn: type[torch.autograd.Function]
    """Called as ``apply(scores, lengths, multiroot)`` → ``[batch_size]``."""
    marginals_fn: type[torch.autograd.Function]
    """Called as ``apply(scores, lengths, multiroot)`` → ``[batch_size, n+1, n+1]``."""

    def __init__(self, scores: torch.Tensor, lengths: torch.Tensor | None = None,
                 multiroot: bool = True):
        self.multiroot = multiroot
        self.scores, self.lengths = check_arc_scores(scores, lengths)
        self.masked = has_masked(self.scores)
        """Whether some usable arc is masked (``<= NEG``): only then can a sentence have no tree."""

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[batch_size]`` log-sum of the scores of all trees; differentiable. ``-inf`` (with a
        zero gradient) for a sentence whose masks leave no tree."""
        log_z = self.log_partition_fn.apply(self.scores, self.lengths, self.multiroot)
        if not self.masked:
            return log_z
        return torch.where(log_z > IMPOSSIBLE, log_z, torch.full_like(log_z, -float("inf")))

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[batch_size, n+1, n+1]`` arc marginals ``p(h -> d)``; differentiable. All 0 for a
        sentence whose masks leave no tree."""
        mu = self.marginals_fn.apply(self.scores, self.lengths, self.multiroot)
        if not self.masked:
            return mu
        return torch.where(self.feasible[:, None, None], mu, mu.new_zeros(()))

    @property
    def feasible(self) -> torch.Tensor:
        """``[batch_size]`` bool: the sentence has at least one tree that avoids masked arcs."""
        return self.log_partition.detach() > -float("inf")

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.scores, self.marginals)]

    def score(self, heads: torch.Tensor) -> torch.Tensor:
        """``[batch_size]`` score of trees given as heads ``[batch_size, n]`` (padding ignored);
        ``-inf`` for a tree that uses a masked arc."""
        total = tree_score(self.scores, heads, self.lengths)
        if not self.masked:
            return total
        return torch.where(total > IMPOSSIBLE, total, torch.full_like(total, -float("inf")))
