"""Constituency tree CRF: CKY inside-outside over binary bracketings (span scores, no labels).

**Layout.** ``scores[b, i, j]`` (``i <= j``) is the log-score of the span of words ``i..j``
*inclusive* (0-based) of sentence ``b``, tensor ``[batch_size, N, N]``. A tree over ``n`` words
is a binary bracketing: its ``2n - 1`` spans are the ``n`` one-word spans, the whole sentence
``(0, n-1)`` and ``n - 2`` others, nested or disjoint. Its score is the sum of its spans' scores,
so the one-word spans and the whole-sentence span (in every tree) only shift ``log Z``; they are
included as in torch-struct's ``TreeCRF``. Entries with ``i > j`` or ``j >= lengths[b]`` are
ignored (they may hold anything, even NaN). A span scored ``-inf`` (or ``<= NEG = -1e9``) is
forbidden (constrained parsing); a sentence with no tree of allowed spans has ``log Z = -inf``,
zero marginals and zero gradients. Marginals, best trees and samples use the same layout as 0/1
(or probability) charts ``[..., batch_size, N, N]``. :mod:`synattn.structs.convert` maps the
layout to torch-struct's ``[B, N, N, NT]`` and supar's fencepost ``[B, N+1, N+1]``.

**Recursion** (Cocke–Kasami–Younger; Baker 1979 for inside-outside; Stern et al. 2017 and Zhang
et al. 2020 for span-based CRF parsers)::

    beta(i, i) = s(i, i)
    beta(i, j) = s(i, j) + S(i, j),    S(i, j) = logsumexp_{i <= k < j} beta(i, k) + beta(k+1, j)

and ``log Z = beta(0, n-1)``. The outside pass is its adjoint, written out (widths in decreasing
order): ``O(B·N²)`` memory. The marginals' backward is the Hessian-vector product of ``log Z``
computed as a forward-mode derivative of inside-outside, as for Eisner (see
:mod:`synattn.structs.dependency.eisner`).

**Charts** (PyTorch path): ``K [2, N, N, B]``, width-major with the batch innermost:
``K[0, w, i] = beta(i, i+w)`` by span start and ``K[1, N-1-w, j] = beta(j-w, j)`` by span end
with reversed width, so that for one width ``w`` the terms of all splits and starts are the two
slices ``K[0, :w, :N-w] + K[1, N-w:, w:]`` ``[w, N-w, B]``, reduced over the first dimension. One
Python iteration per width. On CPU tensors the same passes run as compiled numba kernels
(:mod:`synattn.structs.cky._kernels`), on CUDA tensors as Triton kernels with the loop over widths
inside the kernel (:mod:`synattn.structs.triton_kernels.cky`).
"""

from __future__ import annotations

from functools import cached_property

import torch

from .. import registry
from ..backend import kernels, use_numba, use_triton
from ..constants import NEG
from ..distribution import LabelledByShape, PeerNames, check_count
from ..scores import fp32_inside
from ..semirings.log_max import MaxSemiring
from .dp import (
    DEAD,
    CKYMarginals,
    _zero_dead,
    check_span_scores,
    cky_inside,
    cky_marginals,
    from_width_major,
    span_mask,
    to_width_major,
)
from .labelled_spans import labelled_class

__all__ = ["DEAD", "CKYMarginals", "TreeCRF", "chart_to_spans", "check_span_scores",
           "cky_inside", "cky_marginals", "sample_trees", "span_mask", "spans_to_chart"]


class TreeCRF(LabelledByShape, PeerNames):
    """Binary constituency trees (unlabelled bracketings) with span scores, by CKY.

    Args:
        scores: ``[batch_size, N, N]`` span log-scores, ``scores[b, i, j]`` for words ``i..j``
            (inclusive, ``i <= j``); ``-inf`` forbids a span. Entries with ``i > j`` or past a
            sentence's length are ignored. Labelled scores ``[batch_size, N, N, NT]`` make the
            CRF one over labelled trees (:mod:`synattn.structs.cky.labelled_spans`).
        lengths: ``[batch_size]`` number of words in ``1..N``; default all ``N``.

    Example:
        >>> crf = TreeCRF(torch.randn(2, 5, 5), torch.tensor([5, 3]))
        >>> crf.marginals.shape     # p(span (i, j) in the tree), 0 outside each sentence
        torch.Size([2, 5, 5])
        >>> crf.argmax.sum((1, 2))  # 2n - 1 spans per tree
        tensor([9., 5.])

    Results are float32 for half inputs (the dynamic program runs in float32 or float64, also
    under autocast). Distribution methods: ``log_prob``, ``entropy``, ``cross_entropy``, ``kl``,
    ``sample``.
    """

    scores: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def _labelled_version(cls) -> type:
        base: type = cls
        return labelled_class(base)

    def __init__(self, scores: torch.Tensor, lengths: torch.Tensor | None = None):
        self.scores, self.lengths = check_span_scores(scores, lengths)

    @classmethod
    def _from_checked(cls, scores: torch.Tensor, lengths: torch.Tensor) -> TreeCRF:
        """The CRF over scores :func:`check_span_scores` would return as they are (masks ``NEG``,
        0 outside the sentences, in range) and checked lengths, without checking them again."""
        crf = super().__new__(cls)
        crf.scores, crf.lengths = scores, lengths
        return crf

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[batch_size]`` log-sum of the scores of all trees; ``-inf`` if none is allowed."""
        return registry.log_partition("cky", self.scores, self.lengths)

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[batch_size, N, N]`` span marginals ``p((i, j) in tree)``; differentiable."""
        return registry.marginals("cky", self.scores, self.lengths)

    @cached_property
    @fp32_inside
    def _best(self) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            if use_triton(self.scores):
                return kernels("triton_kernels.cky").best_tree(self.scores, self.lengths)
            return cky_marginals(self.scores, self.lengths, MaxSemiring,
                                 compiled=use_numba(self.scores))

    @property
    def max(self) -> torch.Tensor:
        """``[batch_size]`` score of the best tree (``-inf`` if none); not differentiable."""
        return self._best[0]

    @property
    def argmax(self) -> torch.Tensor:
        """``[batch_size, N, N]`` the best tree's spans as 0/1 (all 0 if there is no tree)."""
        return self._best[1]

    @cached_property
    def forbidden(self) -> torch.Tensor:
        """``[batch_size, N, N]`` True at the forbidden spans of each sentence."""
        return (self.scores <= NEG) & span_mask(self.lengths, self.scores.shape[-1])

    def score(self, trees: torch.Tensor) -> torch.Tensor:
        """``[..., batch_size]`` score of trees given as 0/1 span charts ``[..., batch_size, N, N]``
        (``-inf`` for a tree with a forbidden span; entries outside the sentences are ignored)."""
        trees = torch.as_tensor(trees, device=self.scores.device)
        if trees.shape[max(trees.dim() - 3, 0):] != self.scores.shape:
            raise ValueError(f"TreeCRF: trees must be 0/1 charts [..., {', '.join(map(str, self.scores.shape))}], "
                             f"got {tuple(trees.shape)}")
        trees = trees.to(self.scores.dtype) * span_mask(self.lengths, self.scores.shape[-1])
        total = (trees * self.scores).sum((-1, -2))
        bad = ((trees > 0) & self.forbidden).any(-1).any(-1)
        return torch.where(bad, float("-inf"), total)

    def log_prob(self, trees: torch.Tensor) -> torch.Tensor:
        """``[..., batch_size]`` ``log p(tree)`` of 0/1 span charts ``[..., batch_size, N, N]``;
        ``-inf`` for a tree with a forbidden span or a sentence without a tree."""
        score, log_z = self.score(trees), self.log_partition
        alive = torch.isfinite(log_z)
        out = score - torch.where(alive, log_z, 0.0)
        return torch.where(alive & torch.isfinite(score), out, float("-inf"))

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``[(θ, μ)]``: span scores (``NEG`` where forbidden, 0 outside the sentences) and span
        marginals, so that ``score(T) = Σ θ φ(T)`` and ``μ = E[φ(T)]``."""
        return [(self.scores, self.marginals)]

    def _inner(self, theta: torch.Tensor) -> torch.Tensor:
        """``Σ θ μ`` over the allowed spans (forbidden ones have μ = 0 and are left out, so that
        no gradient flows through ``NEG``)."""
        return (torch.where(theta > NEG, theta, 0.0) * self.marginals).sum((-1, -2))

    @property
    def entropy(self) -> torch.Tensor:
        """``[batch_size]`` ``H(p) = log Z - <θ, μ>`` in nats; 0 for a sentence without a tree."""
        log_z = self.log_partition
        alive = torch.isfinite(log_z)
        h = torch.where(alive, log_z, 0.0) - self._inner(self.scores)
        return torch.where(alive, h.clamp_min(0.0), 0.0)

    def cross_entropy(self, other: TreeCRF) -> torch.Tensor:
        """``[batch_size]`` ``H(p, q) = -E_p[log q(T)] = log Z_q - <θ_q, μ_p>`` for ``p = self``,
        ``q = other`` (a TreeCRF of the same shape and lengths): ``+inf`` where ``p`` reaches a
        span that ``q`` forbids or ``q`` has no tree, 0 where ``p`` has none."""
        if not isinstance(other, TreeCRF) or other.scores.shape != self.scores.shape \
                or not torch.equal(other.lengths, self.lengths):
            raise ValueError("TreeCRF: cross_entropy/kl need another TreeCRF with the same shape "
                             "and lengths")
        log_zq = other.log_partition
        h = torch.where(torch.isfinite(log_zq), log_zq, 0.0) - self._inner(other.scores)
        lost = ((self.marginals > 0) & other.forbidden).flatten(1).any(1) | ~torch.isfinite(log_zq)
        h = torch.where(lost, float("inf"), h)
        return torch.where(torch.isfinite(self.log_partition), h, 0.0)

    def kl(self, other: TreeCRF) -> torch.Tensor:
        """``[batch_size]`` ``KL(p || q) = H(p, q) - H(p)`` for ``p = self``, ``q = other``."""
        d = self.cross_entropy(other) - self.entropy
        return torch.where(torch.isinf(d), d, d.clamp_min(0.0))

    def _semiring_program(self) -> tuple[str, list[torch.Tensor], tuple]:
        """``(program, potentials, extra)`` for :mod:`synattn.structs.semirings.programs`: the name
        of its generic program, the potentials ``[B, ...]`` a semiring converts, the other arguments."""
        return "cky", [self.scores], (self.lengths,)

    def _with_scores(self, scores: torch.Tensor) -> TreeCRF:
        """The same lengths with other span scores (the semirings' ``count``)."""
        return type(self)(scores, self.lengths)

    def kbest(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best trees, exactly, best first: ``scores [batch_size, k]`` (``-inf`` where
        fewer than ``k`` exist) and 0/1 span charts ``[batch_size, k, N, N]`` (all 0 for the
        missing ones; fewer columns when every batch element has fewer than ``k`` trees: as many
        as the largest list). Lawler's partition scheme over masked CKY argmaxes
        (:func:`~synattn.structs.cky.kbest.tree_kbest`)."""
        from .kbest import tree_kbest

        return tree_kbest(self, k)

    @fp32_inside
    def sample(self, n: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[n, batch_size, N, N]`` trees drawn from the CRF as 0/1 span charts (no gradient).

        Top-down sampling on the inside chart: the whole sentence is a span of every tree; a
        chosen span ``(i, j)`` splits at ``k`` with probability
        ``exp(beta(i, k) + beta(k+1, j) - S(i, j))`` (Gumbel-max, widths in decreasing order).
        Sentences without a tree give all-zero charts.
        """
        check_count(n, 9 * self.scores[..., 0, 0].numel() * self.scores.shape[-1] ** 2)  # charts
        with torch.no_grad():
            return sample_trees(self.scores, self.lengths, n, generator)


def sample_trees(scores: torch.Tensor, lengths: torch.Tensor, n: int,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """See :meth:`TreeCRF.sample` (checked scores, no autograd)."""
    sd = to_width_major(scores)
    N, _, batch = sd.shape
    log_z, K, _ = cky_inside(sd, lengths)
    chosen = torch.zeros((n, 2, N, N, batch), dtype=torch.bool, device=sd.device)
    chosen[:, 0, lengths - 1, 0, torch.arange(batch, device=sd.device)] = True
    out = torch.zeros((n, N, N, batch), dtype=sd.dtype, device=sd.device)
    for w in range(N - 1, 0, -1):
        sel = chosen[:, 0, w, :N - w] | chosen[:, 1, N - 1 - w, w:]  # [n, N-w, B]
        out[:, w, :N - w] = sel.to(sd.dtype)
        t = (K[0, :w, :N - w] + K[1, N - w:, w:]).unsqueeze(0)  # [1, w, N-w, B]
        u = torch.rand((n, *t.shape[1:]), generator=generator, dtype=sd.dtype, device=sd.device)
        gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(sd.dtype).tiny)))
        split = (t + gumbel).max(1, keepdim=True).indices  # [n, 1, N-w, B] (argmax, 3-5x faster)
        pick = torch.zeros((n, w, N - w, batch), dtype=torch.bool, device=sd.device)
        pick.scatter_(1, split, sel.unsqueeze(1))
        chosen[:, 0, :w, :N - w] |= pick
        chosen[:, 1, N - w:, w:] |= pick
    out[:, 0] = (chosen[:, 0, 0] | chosen[:, 1, N - 1]).to(sd.dtype)
    charts = (torch.stack([from_width_major(o) for o in out]) if n
              else scores.new_zeros(0, batch, N, N))
    charts = _zero_dead(charts.reshape(-1, N, N), log_z.repeat(n), lengths.repeat(n))
    return charts.view(n, batch, N, N)


def chart_to_spans(chart: torch.Tensor) -> list[list[tuple[int, int]]]:
    """0/1 span charts ``[batch_size, N, N]`` → per sentence the spans ``(i, j)``, sorted."""
    return [[(int(i), int(j)) for i, j in torch.nonzero(c > 0.5).tolist()] for c in chart]


def spans_to_chart(spans: list[list[tuple[int, int]]], N: int,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-sentence lists of inclusive spans ``(i, j)`` → 0/1 charts ``[batch_size, N, N]``."""
    chart = torch.zeros(len(spans), N, N, dtype=dtype)
    for b, sentence in enumerate(spans):
        for i, j in sentence:
            chart[b, i, j] = 1
    return chart
