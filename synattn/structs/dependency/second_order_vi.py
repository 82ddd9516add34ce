"""Approximate arc marginals for arc + sibling scores: mean-field variational inference
(:class:`DependencyMFVI`; Wang and Tu 2020) and loopy belief propagation (:class:`DependencyLBP`;
Smith and Eisner 2008), supar 1.1.4's modules of the same names in synattn's layouts.

Both treat the head of every word as its own variable (no tree constraint: heads are chosen
per word, cycles allowed), with the arc scores ``scores[b, h, d]`` as unary factors and one
pairwise factor per pair of arcs ``h → m``, ``h → s`` sharing a head: ``siblings[b, h, s, m]``
(layout of :class:`~synattn.structs.Dependency2oCRF`; here *any* two dependents of ``h``, not
only adjacent ones on one side, as in supar). After ``max_iter`` rounds of updates the approximate
marginals are ``softmax_h`` of the logits ``q[b, h, d]``:

- **MFVI**: ``q ← s[h, m] + Σ_s softmax_h(q)[h, s] · sib[h, s, m]`` (``max_iter`` updates from
  ``q = s``);
- **LBP**: log-space messages ``μ[h, m, s]`` from the factor of ``(h → m, h → s)`` to ``m``'s head,
  ``q ← s[h, m] + Σ_s μ[h, m, s]``, with supar's message update (it adds the factor's "off" mass
  ``logsumexp`` over all heads, the matching head included).

With all sibling scores 0 MFVI returns ``softmax_h(s)``, the first-order head-selection
marginals, after any number of iterations; LBP does not (supar's message update counts the
matching head's mass twice; tested).

Differences from supar, each checked in the tests: lengths instead of a mask; ROOT (index 0) is
never a dependent or a sibling here, where supar also has a "head" distribution for ROOT and
factors pairing it with the words (the same numbers as supar's when those factors are 0 for MFVI
or masked for LBP, tested); LBP's messages are normalised so that a uniform message is 0 (supar:
sum 1), so that a missing factor and a factor with nothing to say agree (supar's count of factors
per head then differs between ROOT and the words; equal beliefs on equal factors); heads past a
length and self-loops are masked here (supar's parsers mask padding in the scores before calling
the module); results are in synattn's arc layout ``[b, h, d]``, 0 in the columns of ROOT and of
padding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from synattn.errors import brief

from ..approximate import IterativeInference
from ..arguments import score_tensor
from ..backend import kernels, use_numba
from ..constants import NEG
from ..scores import check_range, check_scores, fp32_inside, kernel_flagged, mask_impossible, plain_lengths
from .arc_scores import check_arc_scores, usable_arcs


def _arcs(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor | None, who: str
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Arc logits ``[B, L, L]`` (unusable heads at :data:`NEG`) and lengths, the siblings' type
    and shape checked."""
    scores, lengths = check_arc_scores(scores, lengths, fill=NEG)
    score_tensor(siblings, "siblings", who)
    batch, L, _ = scores.shape
    if siblings.shape != (batch, L, L, L):
        raise ValueError(f"{who}: siblings must be [B, n+1, n+1, n+1] = {[batch, L, L, L]} like "
                         f"the arc scores, got {list(siblings.shape)}")
    return scores, lengths


def _factors(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Siblings ``[B, h, s, m]`` (0 where no pair of arcs is) and the pair mask (symmetric in
    ``s``, ``m``), for the PyTorch path; ``scores`` as :func:`_arcs` returns them."""
    L = scores.shape[-1]
    arcs = usable_arcs(lengths, L)  # [B, h, d]
    # the factor of (h -> m, h -> s): both arcs usable and s != m
    pairs = (arcs.unsqueeze(3) & arcs.unsqueeze(2)) & ~torch.eye(L, dtype=torch.bool, device=scores.device)
    source = siblings.dtype
    siblings = torch.where(pairs, siblings.to(scores.device, scores.dtype), scores.new_zeros(()))
    siblings = mask_impossible(siblings, source)  # [B, h, s, m]
    check_scores([(siblings, None)], L - 1, "siblings")
    return siblings, pairs


def _words(q: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[B, 1, L]``: True in the columns of the words."""
    pos = torch.arange(q.shape[-1], device=q.device)
    return ((pos >= 1) & (pos <= lengths[:, None])).unsqueeze(1)


def _marginals(q: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``softmax_h q`` in the words' columns, 0 elsewhere."""
    return torch.where(_words(q, lengths), q.softmax(1), q.new_zeros(()))


def _kernels(lbp: bool):
    """The compiled rounds of LBP (:mod:`._lbp_kernels`) or MFVI (:mod:`._vi_kernels`)."""
    return kernels("dependency._lbp_kernels" if lbp else "dependency._vi_kernels")


def _compiled(module: _SiblingInference, scores: torch.Tensor, siblings: torch.Tensor, lengths,
              who: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``(logits, marginals, lengths)`` by the compiled kernels (:func:`_kernels`), which
    read the raw scores with the masks and checks of :func:`_arcs` fused; None where the PyTorch
    path must run (CUDA, or LBP with sibling scores beyond :data:`~._vi_kernels.LBP_LIMIT`).
    Scores the kernels flag (NaN, out of range) go through the shared checks, which refuse them
    with their messages."""
    score_tensor(scores, "scores", "dependency CRF")
    score_tensor(siblings, "siblings", who)
    if not use_numba(scores, siblings):
        return None
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 2:
        return None
    batch, L, _ = scores.shape
    lengths = plain_lengths(lengths, batch, L - 1, scores.device)
    if lengths is None or siblings.shape != (batch, L, L, L):
        return None
    s = scores
    if s.dtype not in (torch.float32, torch.float64):  # (half types: numpy reads neither)
        s = check_arc_scores(scores, lengths, fill=NEG)[0]
    lbp = isinstance(module, DependencyLBP)
    source = siblings.dtype
    if source not in (torch.float32, torch.float64):
        siblings = mask_impossible(siblings.float(), source)
    vi = _kernels(lbp)
    q, mu, checks = vi.logits(s, siblings, lengths, module.max_iter)  # (no autograd: arrays)
    if kernel_flagged(checks[0], L - 1)[0]:
        check_arc_scores(s, lengths)  # (refuses them with its message)
    refused, top = kernel_flagged(checks[1], L - 1)
    if refused:  # as on the PyTorch path
        check_range("siblings", checks[1, 0] > 0, top, L - 1)
    if lbp and top > vi.LBP_LIMIT:
        return None
    if torch.is_grad_enabled() and (s.requires_grad or siblings.requires_grad):
        q, mu = _CompiledLogits.apply(s, siblings, lengths, (q, mu), module.max_iter, lbp, module._torch_both)
    return q, mu, lengths


class _CompiledLogits(torch.autograd.Function):
    """MFVI/LBP logits and marginals by the compiled rounds from the raw scores; backward: the
    marginals' softmax, then the rounds' explicit adjoint, or autograd's double backward of the
    PyTorch path when a second derivative is being built."""

    @staticmethod
    def forward(ctx, s, siblings, lengths, result, max_iter, lbp, fallback):
        q, mu = result  # (computed by the caller, which checked the scores on the way)
        ctx.save_for_backward(s, siblings, lengths, mu)
        ctx.max_iter, ctx.lbp, ctx.fallback = max_iter, lbp, fallback
        return q, mu

    @staticmethod
    def backward(ctx, gq, gmu):
        s, siblings, lengths, mu = ctx.saved_tensors
        if torch.is_grad_enabled():
            with torch.enable_grad():
                x = s if s.requires_grad else s.detach().requires_grad_()
                y = siblings if siblings.requires_grad else siblings.detach().requires_grad_()
                outputs = ctx.fallback(x, y, lengths)
                gx, gy = torch.autograd.grad(outputs, (x, y), (gq, gmu), create_graph=True, allow_unused=True)
            return gx, gy, None, None, None, None, None
        gq = gq + mu * (gmu - (mu * gmu).sum(1, keepdim=True))  # through the column softmax
        gs, gsib = _kernels(ctx.lbp).logits_backward(s, siblings, lengths, ctx.max_iter, gq,
                                                     ctx.needs_input_grad[1])
        return gs, gsib, None, None, None, None, None


class _SiblingInference(IterativeInference):
    """What MFVI and LBP share: ``forward(scores, lengths=None, target=None)`` as supar's."""

    def logits(self, scores: torch.Tensor, siblings: torch.Tensor,
               lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, n+1, n+1]`` logits ``q[b, h, d]`` whose ``softmax`` over ``h`` are the marginals
        (compiled kernels on CPU, :func:`_kernels`; the PyTorch rounds otherwise)."""
        return self._logits(scores, siblings, lengths)[0]

    def _logits(self, scores, siblings, lengths) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The logits, the marginals and the checked lengths."""
        who = type(self).__name__
        out = _compiled(self, scores, siblings, lengths, who)
        if out is not None:
            return out
        s, lengths = _arcs(scores, siblings, lengths, who)
        q = self._torch_logits(s, siblings, lengths)
        return q, _marginals(q, lengths), lengths

    def _torch_both(self, scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and marginals by the PyTorch path from raw scores (the compiled path's double
        backward)."""
        s, lengths = _arcs(scores, siblings, lengths, type(self).__name__)
        q = self._torch_logits(s, siblings, lengths)
        return q, _marginals(q, lengths)

    def _torch_logits(self, s: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The rounds in PyTorch from arc logits as :func:`_arcs` returns them and raw siblings."""
        raise NotImplementedError

    @fp32_inside
    def forward(self, scores: tuple[torch.Tensor, torch.Tensor], lengths: torch.Tensor | None = None,
                target: torch.Tensor | None = None):
        """Approximate arc marginals (and the loss against gold heads).

        Args:
            scores: ``(arcs [B, n+1, n+1], siblings [B, n+1, n+1, n+1])``: arc scores ``[b, h, d]``
                and sibling scores ``[b, h, s, m]``.
            lengths: ``[B]`` words per sentence (default all ``n``).
            target: ``[B, n]`` gold heads (``-1`` padding), or None.

        Returns:
            ``marginals [B, n+1, n+1]`` ``p(h -> d)`` (each word's column sums to 1; 0 for ROOT's
            column and padding), preceded by the cross-entropy of ``target`` averaged over
            words (supar's loss) when ``target`` is given.
        """
        arcs, siblings = scores
        q, marginals, lengths = self._logits(arcs, siblings, lengths)
        if target is None:
            return marginals
        n = q.shape[-1] - 1
        if getattr(target, "shape", None) != (q.shape[0], n):
            raise ValueError(f"{type(self).__name__}: target must be [{q.shape[0]}, {n}] heads, "
                             f"got {brief(getattr(target, 'shape', target))}")
        within = _words(q, lengths)[:, 0, 1:]  # [B, n]
        if not isinstance(target, torch.Tensor) or target.is_floating_point() or target.is_complex():
            raise TypeError(f"{type(self).__name__}: target must be an integer tensor of heads")
        heads = target.to(q.device).long()[within]
        if bool(((heads < 0) | (heads > n)).any()):
            raise ValueError(f"{type(self).__name__}: target heads of words must be in 0..{n}, got "
                             f"{int(heads.min())}..{int(heads.max())}")
        loss = F.cross_entropy(q.transpose(1, 2)[:, 1:][within], target.to(q.device).long()[within])
        return loss, marginals


class DependencyMFVI(_SiblingInference):
    """Mean-field variational inference over per-word heads with pairwise sibling factors
    (Wang and Tu 2020; supar's ``DependencyMFVI``), ``max_iter`` updates (default 3).

    Example:
        >>> mu = DependencyMFVI()((torch.randn(2, 6, 6), torch.randn(2, 6, 6, 6)), torch.tensor([5, 3]))
        >>> mu.shape, bool(torch.allclose(mu[0, :, 1:].sum(0), torch.ones(5)))  # words' columns sum to 1
        (torch.Size([2, 6, 6]), True)
    """

    def _torch_logits(self, s, siblings, lengths):
        sib, _ = _factors(s, siblings, lengths)
        q = s
        for _ in range(self.max_iter):
            # q(h, m) = s(h, m) + Σ_s p(h -> s) sib(h, s, m)
            q = s + torch.matmul(q.softmax(1).unsqueeze(2), sib).squeeze(2)  # [B, h, 1, s] @ [B, h, s, m]
        return q


class DependencyLBP(_SiblingInference):
    """Loopy belief propagation over per-word heads with pairwise sibling factors (Smith and Eisner
    2008; supar's ``DependencyLBP``, whose message update it reproduces), ``max_iter`` rounds.

    Example:
        >>> mu = DependencyLBP(max_iter=5)((torch.randn(2, 6, 6), torch.randn(2, 6, 6, 6)))
        >>> mu.shape
        torch.Size([2, 6, 6])
    """

    def _torch_logits(self, s, siblings, lengths):
        sib, pairs = _factors(s, siblings, lengths)
        sib = torch.where(pairs, sib, sib.new_full((), NEG)).transpose(2, 3).contiguous()  # [B, h, m, s]
        q = s
        messages = torch.zeros_like(sib)  # [B, h, m, s]: factor (h->m, h->s) to the head of m
        for _ in range(self.max_iter):
            q = q.log_softmax(1)
            # m(h->s => h->m) = logsumexp(q(h, s) - m(h->m => h->s) ⊕ ... + sib), normalised over h
            out = q.unsqueeze(3) - messages  # [B, h, m, s]
            messages = torch.logaddexp(out.logsumexp(1, keepdim=True), out + sib).transpose(2, 3)
            # normalised so that a uniform message is 0: a pair without a factor (ROOT, padding)
            # is then the same as no message at all
            messages = messages.log_softmax(1) + math.log(messages.shape[1])
            # q(h, m) = s(h, m) + Σ_s m(h->s => h->m)
            q = s + torch.where(pairs, messages, messages.new_zeros(())).sum(3)
        return q
