"""Approximate span marginals for span + span-pair scores: mean-field variational inference
(:class:`ConstituencyMFVI`) and loopy belief propagation (:class:`ConstituencyLBP`), supar 1.1.4's
modules of the same names in synattn's span layout.

Every span ``i..j`` (``i <= j < lengths[b]``, words inclusive as in
:class:`~synattn.structs.TreeCRF`) is its own binary variable, "a constituent or not", with no tree
constraint; its unary score is ``spans[b, i, j]`` (``[B, N, N]``). Two spans that **start at the
same word**, ``i..j`` and ``i..k`` (``k != j``), share a pairwise factor whose weight in the
update of ``i..j`` is ``pairs[b, i, j, k]`` (``[B, N, N, N]``; supar's ``s_pair[b, i, j+1, k+1]``
over fenceposts, :func:`~synattn.structs.convert.span_pairs_to_supar`). The updates are those of
:mod:`synattn.structs.approximate`; the marginals are ``σ`` of the logits, and the loss (given a
0/1 chart of gold spans) is their binary cross-entropy averaged over the spans, as supar's.

Differences from supar, each checked in the tests: lengths instead of a span mask; a factor with a
span past a length (or, over fenceposts, below the diagonal) is absent here, where supar's MFVI
also reads those entries' scores (the same numbers when such factors are 0); results are 0 outside
the spans. supar's ``ConstituencyLBP`` reads its scores transposed against its own mask and its
``ConstituencyMFVI`` (its factors pair spans that *end* together, seen from the sender), so with the
span mask its parser passes it, no factor reaches a span and its marginals are ``σ(spans)``; ours
is the LBP of the same factors as the MFVI (equal to supar's given the scores in the orientation
its LBP reads).
"""

from __future__ import annotations

import torch

from ..approximate import IterativeInference, binary_message, binary_result
from ..arguments import score_tensor
from ..backend import kernels, use_numba
from ..scores import check_scores, fp32_inside, kernel_flagged, mask_impossible, plain_lengths, weights_as_given
from .dp import check_span_scores, span_mask


def _checked(spans: torch.Tensor, pairs: torch.Tensor, lengths: torch.Tensor | None, who: str,
             as_given: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Span scores ``[B, N, N]`` (0 outside the spans), pair weights ``[B, i, j, k]`` (0 where no
    factor is) and the spans ``[B, N, N]``.

    ``as_given`` (for an update that multiplies each weight by its partner's marginal, 0 outside
    the spans): when every entry of ``pairs`` is finite and in range the weights come back as
    given (:func:`~synattn.structs.scores.weights_as_given`: one synchronisation), 0 at ``k = j``,
    instead of masked entry by entry."""
    score_tensor(spans, "spans", who)
    spans, lengths = check_span_scores(spans, lengths)
    score_tensor(pairs, "pairs", who)
    batch, N, _ = spans.shape
    if pairs.shape != (batch, N, N, N):
        raise ValueError(f"{who}: pairs must be [B, N, N, N] = {[batch, N, N, N]} like the span "
                         f"scores, got {list(pairs.shape)}")
    usable = span_mask(lengths, N)  # [B, i, j]
    given = weights_as_given([pairs], N, [(2, 3)], spans) if as_given else None  # (0 at i..j, i..j)
    if given is not None:
        return spans, given[0], usable
    # the factor of i..j and i..k: both spans and k != j
    factors = usable.unsqueeze(3) & usable.unsqueeze(2) & ~torch.eye(N, dtype=torch.bool, device=spans.device)
    source = pairs.dtype
    pairs = torch.where(factors, pairs.to(spans.device, spans.dtype), spans.new_zeros(()))
    pairs = mask_impossible(pairs, source)
    check_scores([(pairs, None)], N, "pairs")
    return spans, pairs, usable


class _SpanInference(IterativeInference):
    """``forward(scores, lengths=None, target=None)`` as supar's, over spans."""

    weights_as_given = False
    """Whether :meth:`logits` reads ``pairs`` only through products with partners' marginals
    masked by ``usable`` (then :func:`_checked` may skip masking them)."""

    def logits(self, spans: torch.Tensor, pairs: torch.Tensor, usable: torch.Tensor) -> torch.Tensor:
        """``[B, N, N]`` logits of the spans from checked scores (:func:`_checked`) and the spans
        ``usable [B, N, N]``."""
        raise NotImplementedError

    @fp32_inside
    def forward(self, scores: tuple[torch.Tensor, torch.Tensor], lengths: torch.Tensor | None = None,
                target: torch.Tensor | None = None):
        """Approximate span marginals (and the loss against gold spans).

        Args:
            scores: ``(spans [B, N, N], pairs [B, N, N, N])``: span scores ``[b, i, j]`` (words
                ``i..j``) and pair weights ``[b, i, j, k]`` (spans ``i..j`` and ``i..k``).
            lengths: ``[B]`` words per sentence (default all ``N``).
            target: ``[B, N, N]`` 0/1 chart of gold spans, or None.

        Returns:
            ``marginals [B, N, N]`` ``q(i..j is a span)`` (0 outside ``i <= j < lengths``),
            preceded by the binary cross-entropy of ``target`` averaged over the spans (supar's
            loss) when ``target`` is given.
        """
        who = type(self).__name__
        compiled = self._compiled(*scores, lengths)
        if compiled is not None:
            q, marginals, lengths = compiled
            if target is None:
                return marginals
            return binary_result(who, q, span_mask(lengths, q.shape[-1]), target, marginals)
        spans, pairs, usable = _checked(*scores, lengths, who, self.weights_as_given)
        return binary_result(who, self.logits(spans, pairs, usable), usable, target)

    def _compiled(self, spans, pairs, lengths) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(logits, marginals, lengths)`` by compiled kernels from the raw scores, or None where
        the PyTorch path runs (the default)."""
        return None

    def _torch_both(self, spans: torch.Tensor, pairs: torch.Tensor, lengths: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and marginals by the PyTorch path from raw scores (the compiled path's double
        backward)."""
        spans, pairs, usable = _checked(spans, pairs, lengths, type(self).__name__, self.weights_as_given)
        q = self.logits(spans, pairs, usable)
        return q, torch.where(usable, q.sigmoid(), q.new_zeros(()))


class _CompiledSpanLogits(torch.autograd.Function):
    """Span MFVI logits and marginals by the compiled rounds (:mod:`._vi_kernels`) from the raw
    scores; backward: the marginals' sigmoid, then the rounds' explicit adjoint, or autograd's
    double backward of the PyTorch path when a second derivative is being built."""

    @staticmethod
    def forward(ctx, spans, pairs, lengths, result, max_iter, fallback):
        q, mu = result  # (computed by the caller, which checked the scores on the way)
        ctx.save_for_backward(spans, pairs, lengths, mu)
        ctx.max_iter, ctx.fallback = max_iter, fallback
        return q, mu

    @staticmethod
    def backward(ctx, gq, gmu):
        spans, pairs, lengths, mu = ctx.saved_tensors
        if torch.is_grad_enabled():
            with torch.enable_grad():
                x = spans if spans.requires_grad else spans.detach().requires_grad_()
                y = pairs if pairs.requires_grad else pairs.detach().requires_grad_()
                outputs = ctx.fallback(x, y, lengths)
                gx, gy = torch.autograd.grad(outputs, (x, y), (gq, gmu), create_graph=True, allow_unused=True)
            return gx, gy, None, None, None, None
        gq = gq + gmu * mu * (1 - mu)  # through the sigmoid (mu is 0 outside the spans)
        gs, gp = kernels("cky._vi_kernels").logits_backward(spans, pairs, lengths, ctx.max_iter, gq,
                                                              ctx.needs_input_grad[1])
        return gs, gp, None, None, None, None


class ConstituencyMFVI(_SpanInference):
    """Mean-field variational inference over spans with pairwise factors between spans that
    start together (supar's ``ConstituencyMFVI``), ``max_iter`` rounds (default 3).

    Example:
        >>> mu = ConstituencyMFVI()((torch.randn(2, 5, 5), torch.randn(2, 5, 5, 5)), torch.tensor([5, 3]))
        >>> mu.shape, float(mu[1, 3:].abs().sum())   # 0 past the length
        (torch.Size([2, 5, 5]), 0.0)
    """

    weights_as_given = True

    def _compiled(self, spans, pairs, lengths):
        """On CPU: the rounds by :mod:`._vi_kernels`, which read the raw scores with the masks and
        checks of :func:`_checked` fused (what they flag goes through it, for its messages)."""
        who = type(self).__name__
        score_tensor(spans, "spans", who)
        score_tensor(pairs, "pairs", who)
        if (not use_numba(spans, pairs) or spans.dim() != 3 or spans.shape[1] != spans.shape[2]
                or spans.shape[1] < 1 or {spans.dtype, pairs.dtype} - {torch.float32, torch.float64}):
            return None
        batch, N, _ = spans.shape
        lengths = plain_lengths(lengths, batch, N, spans.device)
        if lengths is None or pairs.shape != (batch, N, N, N):
            return None
        with torch.no_grad():
            q, mu, checks = kernels("cky._vi_kernels").logits(spans, pairs, lengths, self.max_iter)
        if kernel_flagged(checks[:, :3], 2 * N - 1)[0] or kernel_flagged(checks[:, 3:], N)[0]:
            _checked(spans, pairs, lengths, who)  # (refuses them with its messages)
        q, mu = _CompiledSpanLogits.apply(spans, pairs, lengths, (q, mu), self.max_iter, self._torch_both)
        return q, mu, lengths

    def logits(self, spans, pairs, usable):
        q = spans
        zero = spans.new_zeros(())
        for _ in range(self.max_iter):
            # q(i..j) = s(i..j) + Σ_k σ(q(i..k)) pair(i, j, k)  (a product and a sum: faster on
            # CPU than N² small matrix-vector products); no factor with a non-span i..k
            q = spans + (pairs * torch.where(usable, q.sigmoid(), zero).unsqueeze(2)).sum(-1)
        return q


class ConstituencyLBP(_SpanInference):
    """Loopy belief propagation over spans with pairwise factors between spans that start
    together (supar's ``ConstituencyLBP`` and its message rule, on the factors its MFVI reads),
    ``max_iter`` rounds (default 3).

    Example:
        >>> mu = ConstituencyLBP(max_iter=5)((torch.randn(2, 5, 5), torch.randn(2, 5, 5, 5)))
        >>> mu.shape
        torch.Size([2, 5, 5])
    """

    def logits(self, spans, pairs, usable):
        q = spans
        messages = torch.zeros_like(pairs)  # [B, i, j, k]: to i..j from its factor with i..k
        for _ in range(self.max_iter):
            messages = binary_message(q.unsqueeze(2), messages, pairs)  # sender i..k: q[b, i, k]
            q = spans + messages.sum(-1)
        return q
