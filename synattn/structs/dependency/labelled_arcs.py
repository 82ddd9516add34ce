"""Labelled arcs for the dependency CRFs: scores ``[B, n+1, n+1, R]`` over (arc, label) pairs.

A labelled tree is a tree with one label per arc; its score is ``Σ_d s[h(d), d, l(d)]``. The
labels of different arcs are independent given the tree, so every quantity reduces to the
unlabelled CRF over one arc score per arc (as in torch-struct's labelled ``DependencyCRF``):

- ``log Z`` and sampling: the tree CRF over ``logsumexp_l s[h, d, l]``; a sampled tree's labels
  are then drawn from ``softmax_l s[h, d, :]``;
- marginals: ``p(h → d, l) = p(h → d) · softmax_l s[h, d, l]``;
- ``max``/``argmax``: the tree CRF over ``max_l s[h, d, l]``, each arc with its best label;
- ``kbest``: Lawler's scheme (:class:`~synattn.structs.distribution.Decoding`) with one choice
  per word among its ``(n+1) · R`` (head, label) pairs, so the list is exact (the second best
  may differ from the best in one label only).

A labelled tree is a long tensor ``[B, n, 2]``: ``[..., 0]`` the heads (0 = ROOT), ``[..., 1]``
the labels, ``-1`` past each length (``heads, labels = crf.argmax.unbind(-1)``); ``score`` and
``log_prob`` also take a ``(heads, labels)`` pair.

``DependencyCRF`` and ``NonProjectiveDependencyCRF`` (any :class:`~synattn.structs.dependency.arc_scores.ArcCRF`)
become labelled when given 4-d scores: the instance is then of the subclass
:func:`labelled_class` makes (``ArcCRF._labelled_version`` calls it), which mixes
:class:`LabelledArcs` in front of the class.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import TYPE_CHECKING

import torch

from ..arguments import score_tensor
from ..constants import NEG
from ..distribution import _gumbel_argmax, check_count
from ..scores import check_scores, float_dtype, fp32_inside, impossible_as_inf, mask_impossible

if TYPE_CHECKING:  # the mixin sits in front of an ArcCRF subclass (see labelled_class)
    from .arc_scores import ArcCRF

    _Mixed = ArcCRF
else:
    _Mixed = object


class LabelledArcs(_Mixed):
    """Mixin in front of an :class:`~synattn.structs.dependency.arc_scores.ArcCRF` subclass (see the module
    docstring). ``self.scores`` are the reduced arc scores ``[B, n+1, n+1]`` (log-sum-exp over
    the labels), ``self.labelled_scores`` the validated ``[B, n+1, n+1, R]``."""

    _base: type[ArcCRF]  # the unlabelled class

    def __init__(self, scores: torch.Tensor, lengths: torch.Tensor | None = None,
                 multiroot: bool = True):
        name = self._base.__name__
        score_tensor(scores, "scores", name)
        if scores.dim() != 4 or scores.shape[1] != scores.shape[2] or scores.shape[-1] < 1:
            raise ValueError(f"{name}: labelled scores must be [B, n+1, n+1, labels] with labels "
                             f">= 1, got {tuple(scores.shape)}")
        labelled = mask_impossible(scores.to(float_dtype(scores)), scores.dtype)
        dead = (labelled <= NEG).all(-1)  # every label of the arc masked: the arc is masked
        reduced = torch.logsumexp(labelled, -1).masked_fill(dead, NEG)
        super().__init__(reduced, lengths, multiroot)  # validates lengths, NaN, scale
        usable = self._usable().unsqueeze(-1)
        self.labelled_scores = torch.where(usable, labelled, labelled.new_zeros(()))
        """``[B, n+1, n+1, R]`` labelled arc scores; masked labels ``NEG``, unusable entries 0."""
        self.masked = check_scores([(self.labelled_scores, usable)], labelled.shape[1] - 1,
                                   "scores") or self.masked

    @property
    def num_labels(self) -> int:
        return self.labelled_scores.shape[-1]

    # --- marginals -----------------------------------------------------------------------------

    @cached_property
    def arc_marginals(self) -> torch.Tensor:
        """``[B, n+1, n+1]`` unlabelled arc marginals ``p(h → d)``; differentiable."""
        # the base class's cached_property (mypy types a cached_property read on a class as its getter)
        return self._base.marginals.func(self)  # type: ignore[attr-defined]

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[B, n+1, n+1, R]`` ``p(h → d with label l)``; differentiable. 0 outside each
        sentence and where no tree exists."""
        return self.arc_marginals.unsqueeze(-1) * torch.softmax(self.labelled_scores, -1)

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.labelled_scores, self.marginals)]

    # --- best trees and samples ----------------------------------------------------------------

    @cached_property
    def _best_labels(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, n+1, n+1]`` best label score of each arc and ``[B, n+1, n+1]`` that label."""
        return self.labelled_scores.detach().max(-1)

    @cached_property
    def _max_crf(self) -> ArcCRF:
        """The unlabelled CRF whose arc scores are each arc's best label score."""
        return self._base(self._best_labels[0], self.lengths, self.multiroot)

    @property
    def max(self) -> torch.Tensor:
        """``[B]`` score of the best labelled tree (not differentiable); ``-inf`` if none."""
        return self._max_crf.max

    @property
    def argmax(self) -> torch.Tensor:
        """``[B, n, 2]`` the best labelled tree: heads and labels, ``-1`` padding (and all
        ``-1`` where masks leave no tree)."""
        return self._with_labels(self._max_crf.argmax, self._best_labels[1])

    def _with_labels(self, heads: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``[..., B, n, 2]`` heads ``[..., B, n]`` with ``labels[b, heads[b, d-1], d]``
        (``labels [..., B, n+1, n+1]``)."""
        picked = labels[..., 1:].gather(-2, heads.clamp_min(0).unsqueeze(-2)).squeeze(-2)
        return torch.stack((heads, picked.masked_fill(heads < 0, -1)), -1)

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, n, 2]`` exact samples of labelled trees: trees from the unlabelled CRF
        over the labels' log-sum-exp (its own exact sampler), then each arc's label from
        ``softmax_l s[h, d, l]``. Not differentiable."""
        check_count(count)
        heads = self._base(self.scores.detach(), self.lengths, self.multiroot).sample(count, generator)
        logits = self.labelled_scores.detach().double()
        logits = logits.masked_fill(logits <= NEG, -float("inf"))
        labels = _gumbel_argmax(logits.expand(count, *logits.shape), generator)  # [count, B, L, L]
        return self._with_labels(heads, labels)

    # --- scores of given trees -----------------------------------------------------------------

    def _split(self, structure) -> tuple[torch.Tensor, torch.Tensor]:
        """``(heads, labels)`` ``[B, n]`` each from ``[B, n, 2]`` or a pair, labels checked."""
        if isinstance(structure, (tuple, list)):
            heads, labels = structure
        else:
            structure = torch.as_tensor(structure)
            if structure.dim() != 3 or structure.shape[-1] != 2:
                raise ValueError(f"{self._base.__name__}: a labelled tree is [B, n, 2] (heads, "
                                 f"labels) or a (heads, labels) pair, got {tuple(structure.shape)}")
            heads, labels = structure.unbind(-1)
        heads = self._check_heads(heads)
        labels = torch.as_tensor(labels, device=heads.device)
        if labels.shape != heads.shape or labels.is_floating_point():
            raise ValueError(f"labels must be an integer tensor {list(heads.shape)}, got "
                             f"{labels.dtype} {tuple(labels.shape)}")
        labels = labels.long()
        within = torch.arange(heads.shape[1], device=heads.device) < self.lengths[:, None]
        bad = within & ((labels < 0) | (labels >= self.num_labels))
        if bool(bad.any()):
            b, d = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"labels[{b}, {d}] = {int(labels[b, d])}: labels must be in "
                             f"0..{self.num_labels - 1}")
        return heads, labels

    def score(self, structure) -> torch.Tensor:
        """``[B]`` score ``Σ_d s[h(d), d, l(d)]`` of labelled trees (padding ignored); ``-inf``
        for one that uses a masked arc or label."""
        heads, labels = self._split(structure)
        s = self.labelled_scores[:, :, 1:]  # [B, L(h), n(d), R]
        arc = s.gather(1, heads.clamp_min(0)[:, None, :, None].expand(-1, 1, -1, s.shape[-1]))
        arc = arc.squeeze(1).gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)  # [B, n]
        within = torch.arange(heads.shape[1], device=heads.device) < self.lengths[:, None]
        total = torch.where(within, arc, arc.new_zeros(())).sum(1)
        return impossible_as_inf(total)

    def log_prob(self, structure) -> torch.Tensor:
        """``[B]`` ``log p(heads, labels)``; ``-inf`` for a masked arc or label or heads that are
        no tree of this CRF. Differentiable."""
        heads, labels = self._split(structure)
        score, log_z = self.score((heads, labels)), self.log_partition
        out = score - torch.where(log_z > -float("inf"), log_z, log_z.new_zeros(()))
        ok = (score > -float("inf")) & (log_z > -float("inf")) & self._is_tree(heads)
        return torch.where(ok, out, torch.full_like(out, -float("inf")))

    def is_tree(self, structure) -> torch.Tensor:
        """``[B]`` bool: whether the heads of ``structure`` are a tree of this CRF."""
        return self._is_tree(self._split(structure)[0])

    # --- constraints and k-best ----------------------------------------------------------------

    def constrain(self, heads: torch.Tensor | None = None,  # type: ignore[override]  # labels before allowed
                  labels: torch.Tensor | None = None, allowed: torch.Tensor | None = None) -> LabelledArcs:
        """The same labelled CRF restricted to consistent labelled trees: ``heads``/``labels``
        ``[B, n]`` known heads and labels (``-1`` free), ``allowed`` a bool mask ``[B, n+1,
        n+1]`` (arcs) or ``[B, n+1, n+1, R]`` ((arc, label) pairs)."""
        s = self.labelled_scores
        keep = torch.ones_like(s, dtype=torch.bool)
        if allowed is not None:
            allowed = allowed.to(keep.device).bool()
            if allowed.shape == s.shape[:-1]:
                allowed = allowed.unsqueeze(-1)
            if allowed.shape[:-1] != s.shape[:-1] or allowed.shape[-1] not in (1, s.shape[-1]):
                raise ValueError(f"constrain: allowed must be {tuple(s.shape[:-1])} or "
                                 f"{tuple(s.shape)}, got {tuple(allowed.shape)}")
            keep = keep & allowed
        if heads is not None:
            keep = keep & self._head_mask(torch.as_tensor(heads)).unsqueeze(-1)
        if labels is not None:
            labels = torch.as_tensor(labels, device=keep.device)
            if labels.shape != s.shape[:1] + (s.shape[1] - 1,) or labels.is_floating_point():
                raise ValueError(f"constrain: labels must be an integer tensor "
                                 f"[{s.shape[0]}, {s.shape[1] - 1}], got {tuple(labels.shape)}")
            labels = labels.long()
            if bool(((labels < -1) | (labels >= self.num_labels)).any()):
                raise ValueError(f"constrain: labels must be -1 (free) or in 0..{self.num_labels - 1}")
            pick = torch.arange(self.num_labels, device=keep.device) == labels.unsqueeze(-1)  # [B, n, R]
            fixed = pick | (labels < 0).unsqueeze(-1)
            keep[:, :, 1:] &= fixed.unsqueeze(1)
        return type(self)(torch.where(keep, s, torch.full_like(s, NEG)), self.lengths,
                          self.multiroot)

    def _event_shape(self) -> tuple[int, int]:
        return (self._num_positions(), 2)

    def _num_choices(self) -> int:
        return self.labelled_scores.shape[1] * self.num_labels

    def _to_choices(self, structure: torch.Tensor) -> torch.Tensor:
        heads, labels = structure.unbind(-1)
        return torch.where(heads >= 0, heads * self.num_labels + labels, heads)

    def _from_choices(self, choices: torch.Tensor) -> torch.Tensor:
        R = self.num_labels
        pad = choices < 0
        return torch.stack((choices.div(R, rounding_mode="floor").masked_fill(pad, -1),
                            (choices % R).masked_fill(pad, -1)), -1)

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor) -> LabelledArcs:
        s = self.labelled_scores.detach()[index]  # [M, L, L, R]
        M, L, _, R = s.shape
        allowed = allowed.view(M, L - 1, L, R).transpose(1, 2)  # [M, L(h), n(d), R]
        keep = torch.cat((torch.ones_like(allowed[:, :, :1]), allowed), 2)
        return type(self)(torch.where(keep, s, torch.full_like(s, NEG)), self.lengths[index],
                          self.multiroot)


@cache
def labelled_class(base: type) -> type:
    """The labelled version of an :class:`~synattn.structs.dependency.arc_scores.ArcCRF` subclass (a
    subclass of it, so ``isinstance(crf, base)`` holds)."""
    return type(base.__name__, (LabelledArcs, base),
                {"_base": base, "__module__": base.__module__, "__qualname__": base.__qualname__,
                 "__doc__": f"{base.__name__} over labelled arcs (see "
                            f":mod:`synattn.structs.dependency.labelled_arcs`)."})
