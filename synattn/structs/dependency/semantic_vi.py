"""Approximate edge marginals of semantic dependency graphs with second-order factors: mean-field
variational inference (:class:`SemanticDependencyMFVI`) and loopy belief propagation
(:class:`SemanticDependencyLBP`) after Wang, Huang and Tu (2019), supar 1.1.4's modules of the
same names in synattn's arc layout.

A semantic dependency graph is any set of arcs: every arc ``h -> m`` (``h`` in ``0..n`` with ROOT
at 0, ``m`` a word, ``h != m``) is its own binary variable with the unary score
``edges[b, h, m]`` (``[B, n+1, n+1]``, :mod:`~synattn.structs.dependency.arc_scores`' layout). Three
``[B, n+1, n+1, n+1]`` tensors ``[b, h, k, m]`` weigh, in the update of ``h -> m``, a second arc
through a third node ``k`` (``k`` neither ``h`` nor ``m``; supar's ``s_sib``, ``s_cop``, ``s_grd``
``[b, m, h, k]``, :func:`~synattn.structs.convert.siblings_to_supar` for each):

- ``siblings``: the arc ``h -> k`` (``k`` a sibling of ``m``),
- ``coparents``: the arc ``k -> m`` (``k`` another head of ``m``, ROOT included),
- ``grandparents``: the arc ``m -> k`` (``h`` a grandparent of ``k``). As in supar, this factor
  enters the update of the upper arc ``h -> m`` only.

The updates are those of :mod:`synattn.structs.approximate`; the marginals are ``σ`` of the logits,
and the loss (given a 0/1 graph ``[b, h, m]``) is their binary cross-entropy averaged over the
arcs, as supar's.

Differences from supar, each checked in the tests: lengths instead of a mask; self-loops are not
arcs here (supar's parser mask keeps them as variables, none of its factors pair with them); ROOT
may be a co-parent here (supar's mask drops those factors: the same numbers when they are 0);
results are 0 where no arc is. supar's ``SemanticDependencyLBP`` passes all three kinds of messages
between arcs sharing a head (co-parent and grandparent weights act as extra sibling factors there,
and it reads each weight from the sender's side); ours passes each along the pair of arcs its
MFVI pairs (equal to supar's when only sibling factors are given, in the orientation it reads).
"""

from __future__ import annotations

import torch

from ..approximate import IterativeInference, binary_message, binary_result
from ..arguments import score_tensor
from ..scores import check_scores, fp32_inside, mask_impossible, weights_as_given
from .arc_scores import check_arc_scores, usable_arcs

FACTORS = ("siblings", "coparents", "grandparents")


def second_arcs(arcs: torch.Tensor) -> dict[str, torch.Tensor]:
    """``[B, h, k, m]`` True where the arc ``h -> m`` and the second arc of each factor (``h -> k``,
    ``k -> m``, ``m -> k``) are both usable (``arcs [B, h, d]``) and ``h, k, m`` differ."""
    L = arcs.shape[-1]
    pos = torch.arange(L, device=arcs.device)
    distinct = (pos[:, None, None] != pos[None, :, None]) & (pos[None, :, None] != pos[None, None, :])
    first = arcs.unsqueeze(2) & distinct  # [B, h, 1, m]
    return {"siblings": first & arcs.unsqueeze(3), "coparents": first & arcs.unsqueeze(1),
            "grandparents": first & arcs.transpose(1, 2).unsqueeze(1)}


def _checked(scores: tuple, lengths: torch.Tensor | None, who: str, as_given: bool = False
             ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """Edge scores ``[B, L, L]`` (0 where no arc is), the three factor weights ``[B, h, k, m]`` (0
    where no factor is) and the arcs ``[B, L, L]``.

    ``as_given`` (for an update that multiplies each weight by its second arc's marginal, 0 where
    no arc is): when every entry of the weights is finite and in range they come back as given
    (:func:`~synattn.structs.scores.weights_as_given`: one synchronisation) instead of masked
    entry by entry, with 0 where the second arc would be the first one or its reverse: siblings
    ``k = m``, co-parents and grandparents ``k = h`` (the other ``k`` outside the factors make
    the second arc a self-loop, whose marginal is 0)."""
    if not isinstance(scores, (tuple, list)) or len(scores) != 4:
        got = f"{len(scores)} tensors" if isinstance(scores, (tuple, list)) else type(scores).__name__
        raise ValueError(f"{who}: scores must be (edges, siblings, coparents, grandparents), got {got}")
    edges = score_tensor(scores[0], "edges", who)
    edges, lengths = check_arc_scores(edges, lengths)
    batch, L, _ = edges.shape
    arcs = usable_arcs(lengths, L)
    for name, x in zip(FACTORS, scores[1:]):
        score_tensor(x, name, who)
        if x.shape != (batch, L, L, L):
            raise ValueError(f"{who}: {name} must be [B, n+1, n+1, n+1] = {[batch, L, L, L]} like the "
                             f"edge scores, got {list(x.shape)}")
    # (0 at siblings h -> m, h -> m; co-parents h -> m, h -> m; grandparents h -> m, m -> h)
    given = weights_as_given(list(scores[1:]), 3 * (L - 2), [(2, 3), (1, 2), (1, 2)], edges) if as_given else None
    if given is not None:
        return edges, given, arcs
    masks = second_arcs(arcs)
    weights = []
    for name, x in zip(FACTORS, scores[1:]):
        w = torch.where(masks[name], x.to(edges.device, edges.dtype), edges.new_zeros(()))
        weights.append(mask_impossible(w, x.dtype))
    check_scores([(w, None) for w in weights], 3 * (L - 2), ", ".join(FACTORS))
    return edges, weights, arcs


class _GraphInference(IterativeInference):
    """``forward(scores, lengths=None, target=None)`` as supar's, over the arcs of a graph."""

    weights_as_given = False
    """Whether :meth:`logits` reads the weights only through products with second arcs'
    marginals masked by ``arcs`` (then :func:`_checked` may skip masking them)."""

    def logits(self, edges: torch.Tensor, siblings: torch.Tensor, coparents: torch.Tensor,
               grandparents: torch.Tensor, arcs: torch.Tensor) -> torch.Tensor:
        """``[B, n+1, n+1]`` logits of the arcs from checked scores (:func:`_checked`) and the
        arcs ``[B, n+1, n+1]``."""
        raise NotImplementedError

    @fp32_inside
    def forward(self, scores: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                lengths: torch.Tensor | None = None, target: torch.Tensor | None = None):
        """Approximate arc marginals (and the loss against a gold graph).

        Args:
            scores: ``(edges [B, n+1, n+1], siblings, coparents, grandparents [B, n+1, n+1, n+1])``:
                arc scores ``[b, h, m]`` and the factor weights ``[b, h, k, m]``.
            lengths: ``[B]`` words per sentence (default all ``n``).
            target: ``[B, n+1, n+1]`` 0/1 gold graph ``[b, h, m]``, or None.

        Returns:
            ``marginals [B, n+1, n+1]`` ``q(h -> m)`` (0 for ROOT's column, self-loops and
            padding), preceded by the binary cross-entropy of ``target`` averaged over the arcs
            (supar's loss) when ``target`` is given.
        """
        who = type(self).__name__
        edges, weights, arcs = _checked(scores, lengths, who, self.weights_as_given)
        siblings, coparents, grandparents = weights
        return binary_result(who, self.logits(edges, siblings, coparents, grandparents, arcs), arcs, target)


class SemanticDependencyMFVI(_GraphInference):
    """Mean-field variational inference over the arcs of a semantic dependency graph with
    sibling, co-parent and grandparent factors (Wang et al. 2019; supar's
    ``SemanticDependencyMFVI``), ``max_iter`` rounds (default 3).

    Example:
        >>> edges, pairs = torch.randn(2, 6, 6), [torch.randn(2, 6, 6, 6) for _ in range(3)]
        >>> mu = SemanticDependencyMFVI()((edges, *pairs), torch.tensor([5, 3]))
        >>> mu.shape, float(mu[:, :, 0].abs().sum())   # ROOT is nobody's dependent
        (torch.Size([2, 6, 6]), 0.0)
    """

    weights_as_given = True

    def logits(self, edges, siblings, coparents, grandparents, arcs):
        q = edges
        zero = edges.new_zeros(())
        for _ in range(self.max_iter):
            p = torch.where(arcs, q.sigmoid(), zero)  # [B, h, m]
            # q(h->m) = s(h->m) + Σ_k p(h->k) sib(h,k,m) + p(k->m) cop(h,k,m) + p(m->k) grd(h,k,m)
            # (siblings: a matrix product per head; the others one product, one fused
            # multiply-add and a sum over k, the middle axis, with p(m->k) made contiguous)
            other = torch.addcmul(coparents * p.unsqueeze(1), grandparents, p.mT.contiguous().unsqueeze(1))
            q = edges + torch.matmul(p.unsqueeze(2), siblings).squeeze(2) + other.sum(2)
        return q


class SemanticDependencyLBP(_GraphInference):
    """Loopy belief propagation over the arcs of a semantic dependency graph with sibling,
    co-parent and grandparent factors (Wang et al. 2019; supar's ``SemanticDependencyLBP`` and its
    message rule, on the factors its MFVI reads), ``max_iter`` rounds (default 3).

    Example:
        >>> edges, pairs = torch.randn(2, 6, 6), [torch.randn(2, 6, 6, 6) for _ in range(3)]
        >>> SemanticDependencyLBP(max_iter=5)((edges, *pairs)).shape
        torch.Size([2, 6, 6])
    """

    def logits(self, edges, siblings, coparents, grandparents, arcs):
        q = edges
        # [B, h, k, m]: to h -> m from its factor with h -> k, k -> m, m -> k
        m_sib, m_cop, m_grd = (torch.zeros_like(siblings) for _ in range(3))
        for _ in range(self.max_iter):
            m_sib = binary_message(q.unsqueeze(3), m_sib, siblings)  # sender h -> k: q[b, h, k]
            m_cop = binary_message(q.unsqueeze(1), m_cop, coparents)  # sender k -> m: q[b, k, m]
            m_grd = binary_message(q.transpose(1, 2).unsqueeze(1), m_grd, grandparents)  # m -> k
            q = edges + (m_sib + m_cop + m_grd).sum(2)
        return q
