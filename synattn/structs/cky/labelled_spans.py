"""Labelled spans for the tree CRF: scores ``[B, N, N, NT]`` over (span, label) pairs.

A labelled tree is a binary bracketing with one label per span (its ``2n - 1`` spans, the
one-word spans and the whole sentence included); its score is ``Σ_(i, j) s[i, j, l(i, j)]``
(torch-struct's ``TreeCRF``). The labels of different spans are independent given the
bracketing, so every quantity reduces to the unlabelled :class:`~synattn.structs.cky.crf.TreeCRF`
over one score per span, as for labelled arcs (:mod:`synattn.structs.dependency.labelled_arcs`):

- ``log Z`` and sampling: the tree CRF over ``logsumexp_l s[i, j, l]``; a sampled tree's labels
  are then drawn from ``softmax_l s[i, j, :]``;
- marginals: ``p((i, j) with l) = p((i, j)) · softmax_l s[i, j, l]``;
- ``max``/``argmax``: the tree CRF over ``max_l s[i, j, l]``, each span with its best label;
- ``kbest``: exact; on CPU tensors with numba one compiled k-best CKY pass whose span lists also
  rank the span's labels (:mod:`synattn.structs.cky._kbest_kernels`, shared with the unlabelled
  CRF), otherwise Lawler's scheme over (span, label) pairs
  (:func:`~synattn.structs.cky.kbest.labelled_kbest`, shared with
  :class:`~synattn.structs.cky.cfg.SentCFG`); the second best may differ from the best in one
  label only;
- the semiring programs: CKY over ``⊕_l s[i, j, l]`` (any semiring: the labels are independent).

On CPU tensors one compiled pass over the labelled scores (:mod:`synattn.structs._label_kernels`)
checks them (NaN, range) and reduces each span's labels (log-sum-exp, best label) for the compiled
unlabelled kernels; the labelled marginals are a second pass, and the gradient of ``log Z`` is the
label softmax (:class:`_LabelLogSumExp`, differentiable again). The masked copy
``labelled_scores`` is then only built when asked for (k-best, sampling, scores of given trees).

A labelled tree is a 0/1 chart ``[B, N, N, NT]`` (the layout of the marginals and of
torch-struct's parts): 1 at ``(i, j, l)`` for each span ``(i, j)`` of the tree with label ``l``.

``TreeCRF`` given 4-d scores is an instance of the subclass :func:`labelled_class` makes, which
mixes :class:`LabelledSpans` (and the exponential-family identities of
:class:`~synattn.structs.distribution.StructDistribution`) in front of it.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import TYPE_CHECKING, cast

import torch

from ..arguments import score_tensor
from ..backend import kernels, use_numba
from ..constants import NEG
from ..distribution import StructDistribution, _gumbel_argmax, check_count
from ..scores import check_range, check_scores, float_dtype, fp32_inside, mask_impossible, mask_limit
from ..semirings import programs
from .dp import _dead_to_inf, check_lengths, span_mask

if TYPE_CHECKING:  # the mixin sits in front of TreeCRF (see labelled_class)
    from .crf import TreeCRF

    _Mixed = TreeCRF
else:
    _Mixed = object


class LabelledSpans(StructDistribution, _Mixed):
    """Mixin in front of :class:`~synattn.structs.cky.crf.TreeCRF` (see the module docstring).
    ``self.scores`` are the reduced span scores ``[B, N, N]`` (log-sum-exp over the labels),
    ``self.labelled_scores`` the validated ``[B, N, N, NT]`` (masked labels ``NEG``, entries
    outside the sentences 0)."""

    _base: type[TreeCRF]
    _reduction: tuple[torch.Tensor, float, torch.Tensor] | None = None
    """Compiled path: ``(usable spans [B, N, N], mask limit, float64 log-sum-exp [B, N, N])``."""

    def __init__(self, scores: torch.Tensor, lengths: torch.Tensor | None = None):
        score_tensor(scores, "scores", "TreeCRF")
        if scores.dim() != 4 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 1 \
                or scores.shape[-1] < 1:
            raise ValueError(f"TreeCRF: labelled span scores must be [B, N, N, labels] with N, "
                             f"labels >= 1, got {tuple(scores.shape)}")
        batch, N = scores.shape[:2]
        self.lengths = check_lengths(lengths, batch, N, scores.device)
        self._labels, self._source = scores.to(float_dtype(scores)), scores.dtype
        if use_numba(self._labels):  # one compiled pass: check and reduce (module docstring)
            usable, limit = span_mask(self.lengths, N), mask_limit(scores.dtype)
            lse, best, arg, nan, top = kernels("_label_kernels").reduce_labels(
                self._labels.detach(), usable, limit)
            check_range("scores", nan, top, 2 * N - 1)
            reduced = lse.to(self._labels.dtype)
            if torch.is_grad_enabled() and self._labels.requires_grad:
                reduced = _LabelLogSumExp.apply(self._labels, reduced, usable, limit)
            self.scores = reduced  # (as check_span_scores would return it)
            self._reduction, self._best_labels = (usable, limit, lse), (best, arg)
            return
        labelled = self.labelled_scores
        check_scores([(labelled, None)], 2 * N - 1, "scores")
        dead = (labelled <= NEG).all(-1)  # every label of the span masked: the span is forbidden
        super().__init__(torch.logsumexp(labelled, -1).masked_fill(dead, NEG), self.lengths)

    @cached_property
    def labelled_scores(self) -> torch.Tensor:
        """``[B, N, N, NT]`` labelled span scores; masked labels ``NEG``, unusable entries 0."""
        within = span_mask(self.lengths, self._labels.shape[1]).unsqueeze(-1)
        labelled = mask_impossible(self._labels, self._source)
        return torch.where(within, labelled, labelled.new_zeros(()))  # (NaN outside: no gradient)

    @property
    def num_labels(self) -> int:
        return self._labels.shape[-1]

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[B]`` log-sum of the scores of all labelled trees; ``-inf`` if none is allowed."""
        if self._reduction is None or self.scores.requires_grad:
            return self._base.log_partition.func(self)  # type: ignore[attr-defined]
        log_z = kernels("cky._kernels").log_partition(self._reduction[2], self.lengths)
        return _dead_to_inf(log_z.to(self.scores.dtype))  # (the compiled CKY on the float64 reduction)

    # --- marginals -----------------------------------------------------------------------------

    @cached_property
    def span_marginals(self) -> torch.Tensor:
        """``[B, N, N]`` unlabelled span marginals ``p((i, j) in the tree)``; differentiable."""
        return self._base.marginals.func(self)  # type: ignore[attr-defined]

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[B, N, N, NT]`` ``p((i, j) in the tree with label l)``; differentiable. 0 outside
        each sentence and where no tree exists."""
        mu = self.span_marginals
        if self._reduction is not None and not mu.requires_grad:  # (one compiled pass)
            return kernels("_label_kernels").label_marginals(self._labels.detach(), *self._reduction, mu)
        return mu.unsqueeze(-1) * torch.softmax(self.labelled_scores, -1)

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.labelled_scores, self.marginals)]

    def cross_entropy(self, other: TreeCRF | StructDistribution) -> torch.Tensor:
        """``[B]`` ``H(p, q)`` with ``q`` another labelled TreeCRF of the same shapes and lengths
        (:meth:`StructDistribution.cross_entropy <synattn.structs.distribution.StructDistribution.cross_entropy>`)."""
        return StructDistribution.cross_entropy(self, cast(StructDistribution, other))

    def kl(self, other: TreeCRF | StructDistribution) -> torch.Tensor:
        """``[B]`` ``KL(p || q) = H(p, q) - H(p)``."""
        return StructDistribution.kl(self, cast(StructDistribution, other))

    # --- best trees and samples ----------------------------------------------------------------

    @cached_property
    def _best_labels(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, N, N]`` best label score of each span and ``[B, N, N]`` that label."""
        return self.labelled_scores.detach().max(-1)

    @cached_property
    def _max_crf(self) -> TreeCRF:
        """The unlabelled CRF whose span scores are each span's best label score."""
        return self._base._from_checked(self._best_labels[0], self.lengths)

    @property
    def max(self) -> torch.Tensor:
        """``[B]`` score of the best labelled tree (not differentiable); ``-inf`` if none."""
        return self._max_crf.max

    @property
    def argmax(self) -> torch.Tensor:
        """``[B, N, N, NT]`` the best labelled tree as a 0/1 chart (all 0 if there is none)."""
        return self._with_labels(self._max_crf.argmax, self._best_labels[1])

    def _with_labels(self, trees: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """0/1 charts ``[..., B, N, N]`` with ``labels [..., B, N, N]`` → ``[..., B, N, N, NT]``."""
        out = trees.new_zeros(*trees.shape, self.num_labels)
        return out.scatter_(-1, labels.expand(trees.shape).unsqueeze(-1), trees.unsqueeze(-1))

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, N, N, NT]`` exact samples of labelled trees: trees of the unlabelled CRF
        over the labels' log-sum-exp (its own exact sampler), then each span's label from
        ``softmax_l s[i, j, l]``. Not differentiable."""
        check_count(count, self.labelled_scores[:1].numel() * 8 * self.lengths.shape[0])
        trees = self._base(self.scores.detach(), self.lengths).sample(count, generator)
        logits = self.labelled_scores.detach().double()
        logits = logits.masked_fill(logits <= NEG, -float("inf"))
        labels = _gumbel_argmax(logits.expand(count, *logits.shape), generator)  # [count, B, N, N]
        return self._with_labels(trees, labels)

    def kbest(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best labelled trees, exactly, best first: ``scores [B, k]`` (``-inf`` where
        fewer than ``k`` exist) and 0/1 charts ``[B, k, N, N, NT]`` (all 0 for the missing ones;
        fewer columns when every batch element has fewer than ``k`` trees): the compiled k-best
        pass on CPU tensors with numba, else Lawler's scheme."""
        from .kbest import compiled_kbest, labelled_kbest

        s, lengths, device = self.labelled_scores.detach(), self.lengths, self.labelled_scores.device
        if use_numba(s):
            return compiled_kbest(s, lengths, k)

        def solve(sents: torch.Tensor, allowed: torch.Tensor) -> tuple[list[float], torch.Tensor]:
            sents = sents.to(device)
            sub = type(self)(torch.where(allowed.to(device), s[sents], NEG), lengths[sents])
            return sub.max.detach().double().cpu().tolist(), sub.argmax.cpu()

        usable = torch.ones(s.shape, dtype=torch.bool)
        best, charts = labelled_kbest(k, lengths, usable, solve, s.dtype)
        return best.to(device), charts.to(device)

    # --- scores of given trees -----------------------------------------------------------------

    @cached_property
    def forbidden_labels(self) -> torch.Tensor:
        """``[B, N, N, NT]`` True at the masked (span, label) pairs of each sentence."""
        return (self.labelled_scores <= NEG) & span_mask(self.lengths, self.scores.shape[-1]).unsqueeze(-1)

    def score(self, trees: torch.Tensor) -> torch.Tensor:
        """``[..., B]`` score of labelled trees given as 0/1 charts ``[..., B, N, N, NT]``
        (``-inf`` for one with a masked (span, label) pair; entries outside the sentences are
        ignored)."""
        trees = torch.as_tensor(trees, device=self.labelled_scores.device)
        if trees.shape[max(trees.dim() - 4, 0):] != self.labelled_scores.shape:
            raise ValueError(f"TreeCRF: labelled trees must be 0/1 charts [..., "
                             f"{', '.join(map(str, self.labelled_scores.shape))}], got {tuple(trees.shape)}")
        within = span_mask(self.lengths, self.scores.shape[-1]).unsqueeze(-1)
        trees = trees.to(self.labelled_scores.dtype) * within
        s = self.labelled_scores
        total = (trees * torch.where(s > NEG, s, s.new_zeros(()))).flatten(-3).sum(-1)
        bad = ((trees > 0) & self.forbidden_labels).flatten(-3).any(-1)
        return torch.where(bad, float("-inf"), total)

    def _event_shape(self) -> tuple[int, ...]:
        """One labelled tree's shape ``(N, N, NT)`` (for :mod:`synattn.structs.torch_distribution`)."""
        return tuple(self._labels.shape[1:])

    # --- semiring programs and count -------------------------------------------------------------

    def _semiring_program(self) -> tuple[str, list[torch.Tensor], tuple]:
        return "labelled_cky", [self.labelled_scores], (self.lengths,)

    def _with_scores(self, scores: torch.Tensor) -> TreeCRF:
        return type(self)(scores, self.lengths)


class _LabelLogSumExp(torch.autograd.Function):
    """``[B, N, N]`` span scores reduced by the compiled pass (``reduced``), with the gradient of
    ``logsumexp_l x[..., l]``: the label softmax ``exp(x - reduced)`` over the usable unmasked
    labels of live spans, 0 elsewhere, written in PyTorch so that it is differentiable again."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, reduced: torch.Tensor, usable: torch.Tensor,
                limit: float) -> torch.Tensor:
        out = reduced.clone()
        ctx.save_for_backward(x, out)
        ctx.usable, ctx.limit = usable, limit
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, out = ctx.saved_tensors
        z = out.unsqueeze(-1)
        valid = (ctx.usable & (out > NEG)).unsqueeze(-1) & (x > ctx.limit)  # (False at NaN)
        p = torch.where(valid, torch.exp(torch.where(valid, x, z) - z), 0.0)
        return grad.unsqueeze(-1) * p, None, None, None


def labelled_cky(sr, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """CKY over labelled span scores ``[S, B, N, N, NT]``: :func:`~synattn.structs.semirings.programs.cky`
    over ``⊕_l s[i, j, l]`` (the labels of a tree's spans are independent given it)."""
    return programs.cky(sr, sr.sum(scores, -1), lengths)


programs.PROGRAMS["labelled_cky"] = labelled_cky  # (programs.py imports no structure)


@cache
def labelled_class(base: type) -> type:
    """The labelled version of :class:`~synattn.structs.cky.crf.TreeCRF` (or a subclass): a
    subclass of it, so ``isinstance(crf, TreeCRF)`` holds."""
    return type(base.__name__, (LabelledSpans, base),
                {"_base": base, "__module__": base.__module__, "__qualname__": base.__qualname__,
                 "__doc__": f"{base.__name__} over labelled spans (see "
                            f":mod:`synattn.structs.cky.labelled_spans`)."})
