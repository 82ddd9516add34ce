"""Arc-score conventions shared by the dependency CRFs.

**Layout:** ``scores[b, h, d]`` is the log-score of the arc head ``h`` → dependent ``d`` for a
sentence with ROOT at index 0 and words ``1..n`` (tensor ``[batch_size, n+1, n+1]``). Arcs into
ROOT (``scores[:, :, 0]``), self-loops and entries past a sentence's length are ignored. Arc
marginals use the same layout. A tree is given as ``heads [batch_size, n]``: the head of word
``d`` is ``heads[:, d-1]`` (0 = ROOT, as in CoNLL-U), ``-1`` past the sentence's length.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal, overload

import torch

from .. import registry
from ..arguments import flag, length_tensor, score_tensor
from ..constants import NEG
from ..distribution import Decoding, ExactCRF, LabelledByShape, check_count
from ..scores import check_scores, float_dtype, fp32_inside, impossible_as_inf, in_range_and_zero, mask_impossible
from .labelled_arcs import labelled_class


@overload
def check_arc_scores(scores: torch.Tensor, lengths: torch.Tensor | None,
                     with_masked: Literal[False] = False, fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def check_arc_scores(scores: torch.Tensor, lengths: torch.Tensor | None,
                     with_masked: Literal[True], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, bool]: ...
def check_arc_scores(scores: torch.Tensor, lengths: torch.Tensor | None, with_masked: bool = False,
                     fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, bool]:
    """Validate arc scores and lengths.

    Args:
        scores: ``[batch_size, n+1, n+1]`` arc scores (any float dtype).
        lengths: ``[batch_size]`` word counts in ``1..n``, or None for all ``n``.
        fill: the value of the entries no tree uses in the result (after the checks).

    Returns:
        Scores in float32/float64 with every entry that no tree uses set to ``fill`` (so that padding
        may hold anything, even NaN), entries ``<= NEG`` (``-inf``, ``finfo.min``...) set to
        :data:`~synattn.structs.constants.NEG` (masked arcs), the lengths as a long tensor on
        the scores' device and, if ``with_masked``, whether any usable arc is masked.

    Raises:
        ValueError: not a floating-point tensor, bad shapes or lengths, NaN among the usable
            scores, or finite scores too large for masks to stay impossible
            (:func:`~synattn.structs.scores.check_scores`).
    """
    score_tensor(scores, "scores", "dependency CRF")
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 2:
        raise ValueError(f"scores must be [B, n+1, n+1] with n >= 1, got {tuple(scores.shape)}")
    batch, L, _ = scores.shape
    if lengths is None:
        lengths = torch.full((batch,), L - 1, dtype=torch.long, device=scores.device)
    lengths = length_tensor(lengths, scores.device)

    def bad_lengths() -> str:
        return f"lengths must be [B] with values in 1..{L - 1}, got {lengths.tolist()}"
    if lengths.shape != (batch,):
        raise ValueError(bad_lengths())
    usable = usable_arcs(lengths, L)
    bad = ((lengths < 1) | (lengths > L - 1)).any()
    # fast path: every entry, padding included, finite, unmasked and in range (one reduction, read
    # with the lengths' range in one host synchronisation): then mask_impossible and the check of
    # the zeroed scores would change and find nothing
    in_range, clear = in_range_and_zero([scores], L - 1, [bad.to(torch.float64).reshape(1)])
    if not clear[0]:
        raise ValueError(bad_lengths())
    source, scores = scores.dtype, scores.to(float_dtype(scores))
    if not in_range:
        scores = mask_impossible(scores, source)
    scores = torch.where(usable, scores, scores.new_zeros(()))
    masked = not in_range and check_scores([(scores, None)], L - 1, "scores")
    if fill != 0.0:
        scores = torch.where(usable, scores, scores.new_full((), fill))
    return (scores, lengths, masked) if with_masked else (scores, lengths)


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
    heads = arcs[:, :, 1:].max(1).indices  # [B, n] (argmax's first index, faster on the CPU)
    n = heads.shape[1]
    return heads.masked_fill(torch.arange(n, device=heads.device) >= lengths[:, None], -1)


class ArcCRF(LabelledByShape, ExactCRF, Decoding):
    """What the dependency CRFs share: validated arc scores, ``log_partition`` and ``marginals``
    by the implementation :mod:`synattn.structs.registry` chooses for the subclass's
    ``structure``, ``score``, ``max`` and ``argmax`` from the subclass's best tree ``_best``
    (:class:`~synattn.structs.distribution.ExactCRF`), and ``log_prob``, ``entropy``,
    ``cross_entropy`` and ``kl``.

    Args:
        scores: ``[batch_size, n+1, n+1]`` arc log-scores, ``scores[b, h, d]`` for head ``h`` →
            dependent ``d``; index 0 is ROOT. Entries past a sentence's length, the diagonal and
            ``scores[:, :, 0]`` are ignored. Labelled scores ``[batch_size, n+1, n+1, R]`` make the
            CRF one over labelled trees (:mod:`synattn.structs.dependency.labelled_arcs`).
        lengths: ``[batch_size]`` number of words, in ``1..n``; default all ``n``.
        multiroot: if False, exactly one word attaches to ROOT.
    """

    structure: str
    """The name under which :mod:`synattn.structs.registry` keeps the reference and the
    accelerations of ``log_partition(scores, lengths, multiroot)`` and ``marginals(...)``."""

    @classmethod
    def _labelled_version(cls) -> type:
        base: type = cls
        return labelled_class(base)

    def _usable(self) -> torch.Tensor:
        """``[batch_size, n+1, n+1]`` True for the arcs some tree can use (:func:`usable_arcs`)."""
        return usable_arcs(self.lengths, self.scores.shape[-1])

    def __init__(self, scores: torch.Tensor, lengths: torch.Tensor | None = None,
                 multiroot: bool = True):
        self.multiroot = flag(multiroot, "multiroot", type(self).__name__)
        self.scores, self.lengths, self.masked = check_arc_scores(scores, lengths, True)
        """Whether some usable arc is masked (``<= NEG``): only then can a sentence have no tree."""

    def _log_partition(self) -> torch.Tensor:
        return registry.log_partition(self.structure, self.scores, self.lengths, self.multiroot)

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[batch_size, n+1, n+1]`` arc marginals ``p(h -> d)``; differentiable. All 0 for a
        sentence whose masks leave no tree."""
        return self._feasible_only(registry.marginals(self.structure, self.scores, self.lengths,
                                                      self.multiroot))

    def _decoded(self, best: torch.Tensor) -> torch.Tensor:
        """Heads ``[batch_size, n]`` (``-1`` padding) of the best tree's 0/1 arcs."""
        return heads_from_arcs(best, self.lengths)

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.scores, self.marginals)]

    # --- constraints, sampling, k-best ---------------------------------------------------------

    def constrain(self, heads: torch.Tensor | None = None,
                  allowed: torch.Tensor | None = None) -> ArcCRF:
        """The same CRF restricted to the trees consistent with a partial annotation.

        Args:
            heads: ``[batch_size, n]`` known heads (0 = ROOT), ``-1`` where free: every other
                head of such a word is masked.
            allowed: ``[batch_size, n+1, n+1]`` bool, False for arcs ``h -> d`` to exclude.

        Returns:
            A CRF of the same class whose ``log_partition`` is the log-sum over consistent trees
            and whose ``marginals`` are the constrained marginals (both differentiable with
            respect to the original scores; ``-inf``/0 where nothing is consistent). The loss of
            partial-annotation training is ``log_partition - constrain(...).log_partition``.
        """
        keep = torch.ones_like(self.scores, dtype=torch.bool)
        if allowed is not None:
            if allowed.shape != self.scores.shape:
                raise ValueError(f"constrain: allowed must be {tuple(self.scores.shape)}, "
                                 f"got {tuple(allowed.shape)}")
            keep = keep & allowed.to(keep.device).bool()
        if heads is not None:
            keep = keep & self._head_mask(heads)
        scores = torch.where(keep, self.scores, torch.full_like(self.scores, NEG))
        return type(self)(scores, self.lengths, self.multiroot)

    def _head_mask(self, heads: torch.Tensor) -> torch.Tensor:
        """``[batch_size, n+1, n+1]`` bool: False for the arcs into a word whose head ``heads``
        fixes (``[batch_size, n]``, ``-1`` free) from any other head."""
        L = self.scores.shape[-1]
        if heads.shape != (self.scores.shape[0], L - 1):
            raise ValueError(f"constrain: heads must be [{self.scores.shape[0]}, {L - 1}], "
                             f"got {tuple(heads.shape)}")
        heads = heads.to(self.scores.device).long()
        if bool(((heads < -1) | (heads >= L)).any()):
            raise ValueError(f"constrain: heads must be -1 (free) or in 0..{L - 1}")
        pos = torch.arange(L, device=heads.device)
        fixed = (pos.view(1, L, 1) == heads.unsqueeze(1)) | (heads < 0).unsqueeze(1)  # [B, L, n]
        return torch.cat((torch.ones_like(fixed[:, :, :1]), fixed), 2)

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, batch_size, n]`` exact samples of trees as heads (``-1`` padding, and all
        ``-1`` where no tree exists), by conditioning word by word on the constrained marginals
        (:meth:`~synattn.structs.distribution.Decoding._sequential_sample`; ``n`` marginal
        passes over ``count × batch_size`` sentences). Not differentiable."""
        check_count(count, 8 * self.scores[..., 0, 0].numel() * self.scores.shape[-1])
        return self._sequential_sample(count, generator)

    def _num_choices(self) -> int:
        return self.scores.shape[-1]

    def _num_positions(self) -> int:
        return self.scores.shape[-1] - 1

    def _with_scores(self, scores: torch.Tensor) -> ArcCRF:
        """The same class, lengths and ``multiroot`` with other arc scores (the semirings'
        ``count``)."""
        return type(self)(scores, self.lengths, self.multiroot)

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor) -> ArcCRF:
        s = self.scores.detach()[index]  # [M, L, L]
        keep = torch.cat((torch.ones_like(allowed[:, :1]), allowed), 1).transpose(1, 2)  # [M, L, L]
        return type(self)(torch.where(keep, s, torch.full_like(s, NEG)), self.lengths[index],
                          self.multiroot)

    @staticmethod
    def _choice_marginals(crf, i: int) -> torch.Tensor:
        # (without the feasibility pass of ``marginals``: the sampler checks it once at the end)
        return registry.marginals(crf.structure, crf.scores, crf.lengths, crf.multiroot)[:, :, i + 1]

    def log_prob(self, heads: torch.Tensor) -> torch.Tensor:
        """``[batch_size]`` ``log p(heads)``: ``-inf`` for a tree that uses a masked arc, and for
        heads that are not a tree of this distribution (a cycle, no or several roots when
        ``multiroot`` is False, crossing arcs for projective trees). Differentiable.

        Raises:
            ValueError: ``heads`` not ``[batch_size, n]``, or a head outside ``0..length`` within
                a sentence's length.
        """
        heads = self._check_heads(heads)
        out = super().log_prob(heads)
        return torch.where(self._is_tree(heads), out, torch.full_like(out, -float("inf")))

    def _check_heads(self, heads: torch.Tensor) -> torch.Tensor:
        batch, n = self.scores.shape[0], self.scores.shape[-1] - 1
        heads = torch.as_tensor(heads, device=self.scores.device)
        if heads.shape != (batch, n) or heads.is_floating_point():
            raise ValueError(f"heads must be an integer tensor [{batch}, {n}] (the head of words 1..{n}, "
                             f"-1 past a sentence's length), got {heads.dtype} {tuple(heads.shape)}")
        heads = heads.long()
        within = torch.arange(n, device=heads.device) < self.lengths[:, None]  # [B, n]
        bad = within & ((heads < 0) | (heads > self.lengths[:, None]))
        if bool(bad.any()):
            b, d = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"heads[{b}, {d}] = {int(heads[b, d])}: the head of word {d + 1} of sentence {b} "
                             f"must be in 0..{int(self.lengths[b])} (its length)")
        return heads

    def is_tree(self, heads: torch.Tensor) -> torch.Tensor:
        """``[batch_size]`` bool: whether ``heads`` (checked as in :meth:`log_prob`) are a tree this
        distribution gives mass to, masks aside: every word reaches ROOT, one root word unless
        ``multiroot``, and no crossing arcs (ROOT's included) for projective trees."""
        return self._is_tree(self._check_heads(heads))

    def _is_tree(self, heads: torch.Tensor) -> torch.Tensor:
        batch, n = heads.shape
        within = torch.arange(n, device=heads.device) < self.lengths[:, None]  # [B, n]
        h = torch.where(within, heads, heads.new_zeros(()))  # padding hangs from ROOT
        parent = torch.cat([h.new_zeros(batch, 1), h], 1)  # [B, n+1]: ROOT is its own parent
        for _ in range(max(1, n).bit_length() + 1):  # pointer jumping: 2^k steps up
            parent = parent.gather(1, parent)
        ok = (parent == 0).all(1)  # a word on a cycle never reaches ROOT
        if not self.multiroot:
            ok &= ((h == 0) & within).sum(1) == 1
        if self.structure == "projective":
            dep = torch.arange(1, n + 1, device=heads.device).expand(batch, n)
            lo, hi = torch.minimum(h, dep), torch.maximum(h, dep)  # [B, n] each arc's span
            crossing = ((lo[:, :, None] < lo[:, None, :]) & (lo[:, None, :] < hi[:, :, None])
                        & (hi[:, :, None] < hi[:, None, :]))  # [B, n, n] arc j starts inside arc i, ends outside
            ok &= ~(crossing & within[:, :, None] & within[:, None, :]).flatten(1).any(1)
        return ok

    def score(self, heads: torch.Tensor) -> torch.Tensor:
        """``[batch_size]`` score of trees given as heads ``[batch_size, n]`` (padding ignored);
        ``-inf`` for a tree that uses a masked arc.

        Raises:
            ValueError: as :meth:`log_prob` (``heads`` checked the same way).
        """
        total = tree_score(self.scores, self._check_heads(heads), self.lengths)
        if not self.masked:
            return total
        return impossible_as_inf(total)
