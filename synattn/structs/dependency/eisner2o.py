"""Second-order (adjacent-sibling) projective dependency CRF: the second-order Eisner algorithm.

A tree's score adds, to its arc scores ``scores[b, h, d]`` (layout of
:mod:`synattn.structs.dependency.arc_scores`), one **sibling score** for every pair of *adjacent* dependents
of the same head on the same side (McDonald and Pereira 2006; Zhang et al. 2020, "Efficient
Second-Order TreeCRF"):

    siblings[b, h, s, m]   head h, its dependents s and m on the same side of h, s between h and m
                           with no other dependent of h between s and m (s is m's inner sibling)

``[B, n+1, n+1, n+1]``, ROOT = 0. The dependent nearest to its head on each side has no sibling
score (supar's convention: the "first child" factor is the arc itself). With ``multiroot`` the
words attached to ROOT are siblings of each other too; without it ROOT has one child and no
sibling part. Entries with ``s`` not strictly between ``h`` and ``m``, or past a length, are
ignored (they may hold anything, even NaN); masks (``<= -1e9``) forbid a pair as they forbid an
arc. supar 1.1.4's ``Dependency2oCRF`` stores the same numbers as ``s_sib[b, m, h, s]``
(dependent, head, sibling) and its arcs as ``s_arc[b, d, h]``:
:func:`synattn.structs.convert.siblings_to_supar` / ``siblings_from_supar`` convert.

The inside pass (Eisner 1996 with McDonald and Pereira's sibling items; written as in Zhang et
al. 2020 and supar) adds to the complete (``C``) and incomplete (``I``) spans of first-order
Eisner a *sibling* item ``S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)`` (two adjacent siblings'
inner halves meet):

    I→(i, j) = s[i, j] ⊗ ( C←(i+1, j)  ⊕  ⊕_{i<r<j} I→(i, r) ⊗ S(r, j) ⊗ sib[i, r, j] )
    I←(i, j) = s[j, i] ⊗ ( C→(i, j-1)  ⊕  ⊕_{i<r<j} I←(r, j) ⊗ S(i, r) ⊗ sib[j, r, i] )
    C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
    C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)

and ``log Z = C→(0, n)`` (the first term of each ``I`` is the head's nearest dependent, whose
inner complete span is empty). ``O(n³)`` time and ``O(n²)`` chart per sentence.

The recursion written plainly (a Python loop over spans, for any semiring) is
:func:`synattn.structs.reference.eisner2o` (``use_backend("reference")``, and every semiring but
log and max). On CPU tensors the class runs compiled kernels
(:mod:`synattn.structs.dependency._eisner2o_kernels`: inside pass, explicit outside pass for the
arc and sibling marginals, the max semiring for the best tree, a top-down walk per sample); on
CUDA tensors Triton kernels for ``log Z``, both marginals, their backward and the best tree
(:mod:`synattn.structs.triton_kernels.eisner2o`, a few launches a call); elsewhere
(``use_backend("torch")``, and sampling on CUDA) :func:`eisner2o_inside`
(:mod:`synattn.structs.dependency.eisner2o_inside`), the same recursion vectorised over the spans
of one width and the batch, whose marginals are autograd's gradient of ``log Z``, whose best tree
is the gradient of the max-semiring pass and whose samples the gradient of the sampled-semiring
pass (:func:`eisner2o_sample`). The marginals are differentiable on both
paths; their backward (the Hessian of ``log Z`` times a direction) is autograd's double backward
of :func:`eisner2o_inside`, except under Triton (the same kernels on dual numbers).
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..arguments import score_tensor
from ..backend import kernels, use_numba, use_triton
from ..distribution import check_count
from ..scores import check_scores, fp32_inside, impossible_as_inf, mask_impossible
from .arc_scores import ArcCRF, tree_score
from .eisner import DependencyCRF
from .eisner2o_inside import (
    _gradients,
    _LogPartition2o,
    _Marginals2o,
    eisner2o_inside,
    eisner2o_log_partition,
    eisner2o_sample,
    marginals_vjp_by_autograd,
)

__all__ = ["Dependency2oCRF", "check_sibling_scores", "eisner2o_inside", "eisner2o_log_partition",
           "eisner2o_sample", "marginals_vjp_by_autograd", "sibling_parts", "siblings_score",
           "usable_siblings"]

def usable_siblings(lengths: torch.Tensor, L: int) -> torch.Tensor:
    """``[B, L, L, L]`` True for the sibling parts ``(h, s, m)`` some tree can use: ``h, s, m <=
    length``, ``s, m >= 1``, ``s`` strictly between ``h`` and ``m``."""
    pos = torch.arange(L, device=lengths.device)
    inside = pos <= lengths.unsqueeze(-1)  # [B, L]
    h, s, m = pos.view(L, 1, 1), pos.view(1, L, 1), pos.view(1, 1, L)
    between = ((h < s) & (s < m)) | ((m < s) & (s < h))  # [L, L, L]
    # (s lies between h and m, so h and m inside the sentence put s inside too)
    return between & (inside[:, :, None, None] & inside[:, None, None, :])


def check_sibling_scores(siblings: torch.Tensor, scores: torch.Tensor,
                         lengths: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Validate sibling scores against checked arc scores ``[B, L, L]`` and lengths.

    Returns:
        ``siblings`` in the arcs' float dtype with the entries no tree uses set to 0 and masks
        (``<= NEG``) set to :data:`NEG`, and whether any usable entry is masked.

    Raises:
        ValueError: not a floating-point tensor, shape not ``[B, L, L, L]``, NaN among the usable
            entries, or scores too large for masks to stay impossible.
    """
    score_tensor(siblings, "siblings", "Dependency2oCRF")
    batch, L, _ = scores.shape
    if siblings.shape != (batch, L, L, L):
        raise ValueError(f"Dependency2oCRF: siblings must be [B, n+1, n+1, n+1] = "
                         f"{[batch, L, L, L]} like the arc scores, got {list(siblings.shape)}")
    siblings = mask_impossible(siblings.to(scores.device, scores.dtype), siblings.dtype)
    siblings = torch.where(usable_siblings(lengths, L), siblings, siblings.new_zeros(()))
    masked = check_scores([(scores, None), (siblings, None)], 2 * (L - 1), "scores and siblings")
    return siblings, masked


def sibling_parts(heads: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inner adjacent sibling of every word of trees ``heads [B, n]``.

    Returns:
        ``inner [B, n]``: for word ``m = d+1`` the dependent ``s`` of the same head between the
        head and ``m`` nearest to ``m`` (0 where there is none), and ``has [B, n]`` bool.
    """
    batch, n = heads.shape
    within = torch.arange(n, device=heads.device) < lengths[:, None]
    h = torch.where(within, heads, heads.new_full((), -1))  # [B, n]
    pos = torch.arange(1, n + 1, device=heads.device)
    s, m = pos.view(1, n, 1), pos.view(1, 1, n)  # candidate sibling s, word m
    hm = h[:, None, :]  # [B, 1, n] head of m
    same = (h[:, :, None] == hm) & (hm >= 0)  # [B, n(s), n(m)]
    between = ((hm < s) & (s < m)) | ((m < s) & (s < hm))
    cand = same & between
    dist = torch.where(cand, (m - s).abs(), torch.full_like(cand, n + 1, dtype=torch.long))
    best = dist.argmin(1)  # [B, n] index of the nearest candidate
    has = cand.any(1)
    return torch.where(has, best + 1, torch.zeros_like(best)), has


def siblings_score(siblings: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` the sum of the sibling scores of trees ``heads [B, n]`` (padding ignored)."""
    inner, has = sibling_parts(heads, lengths)
    batch, n = heads.shape
    b = torch.arange(batch, device=heads.device)[:, None].expand(batch, n)
    m = torch.arange(1, n + 1, device=heads.device).expand(batch, n)
    part = siblings[b, heads.clamp_min(0), inner, m]  # [B, n]
    return torch.where(has, part, part.new_zeros(())).sum(1)


class Dependency2oCRF(ArcCRF):
    """Projective dependency trees scored by arcs and adjacent siblings (second-order Eisner).

    Args:
        scores: ``[batch_size, n+1, n+1]`` arc scores ``scores[b, h, d]`` (head → dependent,
            ROOT = 0), as :class:`~synattn.structs.DependencyCRF`.
        siblings: ``[batch_size, n+1, n+1, n+1]`` sibling scores ``siblings[b, h, s, m]``:
            ``s`` and ``m`` adjacent dependents of ``h`` on the same side, ``s`` nearer to ``h``
            (module docstring; supar's ``s_sib[b, m, h, s]``).
        lengths: ``[batch_size]`` words per sentence (``1..n``); default all ``n``.
        multiroot: if False, exactly one word attaches to ROOT (supar's default is False,
            synattn's True for every class).

    Example:
        >>> crf = Dependency2oCRF(torch.randn(2, 6, 6), torch.randn(2, 6, 6, 6), torch.tensor([5, 3]))
        >>> crf.marginals.shape, crf.sibling_marginals.shape
        (torch.Size([2, 6, 6]), torch.Size([2, 6, 6, 6]))
        >>> crf.argmax.shape        # heads of words 1..n (0 = ROOT), -1 past each length
        torch.Size([2, 5])

    Marginals: compiled inside-outside on CPU, Triton kernels on CUDA, autograd's gradient of
    ``log Z`` elsewhere (``O(B·n³)`` memory, the sibling tensor's size); ``argmax``: the max semiring. ``sample`` draws
    whole trees top-down from the inside chart and ``kbest`` is Lawler's scheme over masked
    argmaxes (:class:`~synattn.structs.distribution.Decoding`), both exact. Every semiring of
    :mod:`synattn.structs.semirings` runs on it (``run``, ``semiring_marginals``). McDonald and
    Pereira (2006); Zhang et al. (2020).
    """

    structure = "projective2o"

    def __init__(self, scores: torch.Tensor, siblings: torch.Tensor,
                 lengths: torch.Tensor | None = None, multiroot: bool = True):
        super().__init__(scores, lengths, multiroot)
        self.siblings, masked = check_sibling_scores(siblings, self.scores, self.lengths)
        self.masked = self.masked or masked

    # --- constraints, sampling and k-best: the first-order class's masks of arcs -------------

    def _first_order(self, scores: torch.Tensor | None = None) -> DependencyCRF:
        """The first-order CRF of (these) arc scores: its masks and tree checks are ours."""
        return DependencyCRF(self.scores if scores is None else scores, self.lengths, self.multiroot)

    def constrain(self, heads: torch.Tensor | None = None,
                  allowed: torch.Tensor | None = None) -> Dependency2oCRF:
        """The same CRF restricted to the trees consistent with known ``heads`` ``[batch_size, n]``
        (``-1`` free) and/or ``allowed`` arcs ``[batch_size, n+1, n+1]``, as
        :meth:`DependencyCRF.constrain <synattn.structs.dependency.arc_scores.ArcCRF.constrain>`; the
        sibling scores are kept (a pair of masked arcs is never used)."""
        scores = self._first_order().constrain(heads, allowed).scores
        return type(self)(scores, self.siblings, self.lengths, self.multiroot)

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor) -> Dependency2oCRF:
        first = self._first_order(self.scores.detach())._restricted(index, allowed)
        return type(self)(first.scores, self.siblings.detach()[index], first.lengths, self.multiroot)

    def _is_tree(self, heads: torch.Tensor) -> torch.Tensor:
        return self._first_order(self.scores.detach())._is_tree(heads)

    # --- the semiring API (synattn.structs.semirings.programs) --------------------------------

    def _semiring_program(self) -> tuple[str, list[torch.Tensor], tuple]:
        """``(program, potentials, extra)`` for :mod:`synattn.structs.semirings.programs`: the
        generic second-order Eisner program, the arc and sibling scores, the other arguments."""
        return "eisner2o", [self.scores, self.siblings], (self.lengths, self.multiroot)

    def _with_scores(self, scores: torch.Tensor, siblings: torch.Tensor | None = None) -> Dependency2oCRF:
        """The same lengths and ``multiroot`` with other arc (and sibling) scores (the semirings'
        ``count``)."""
        return type(self)(scores, self.siblings if siblings is None else siblings, self.lengths,
                          self.multiroot)

    @cached_property
    @fp32_inside
    def _inside(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``log Z [B]``, arc and sibling marginals: compiled kernels on CPU (explicit outside
        pass; autograd's double backward for the marginals' own backward), else autograd of the
        PyTorch inside pass (or of the plain reference under ``use_backend("reference")``)."""
        fn = lambda s, sib: eisner2o_log_partition(s, sib, self.lengths, self.multiroot)  # noqa: E731
        return _gradients(fn, self.scores, self.siblings)

    @property
    def _compiled(self) -> bool:
        return use_numba(self.scores)

    @property
    def _triton(self):
        """The Triton kernels (:mod:`synattn.structs.triton_kernels.eisner2o`) where they run, else None."""
        return kernels("triton_kernels.eisner2o") if use_triton(self.scores) else None

    @cached_property
    @fp32_inside
    def _mus(self) -> tuple[torch.Tensor, torch.Tensor]:
        if (triton := self._triton) is not None:
            return triton.Marginals2o.apply(self.scores, self.siblings, self.lengths, self.multiroot)
        if self._compiled:
            return _Marginals2o.apply(self.scores, self.siblings, self.lengths, self.multiroot)
        return self._inside[1:]

    def _log_partition(self) -> torch.Tensor:
        if (triton := self._triton) is not None:
            return triton.LogPartition2o.apply(self.scores, self.siblings, self.lengths, self.multiroot)
        if self._compiled:
            return _LogPartition2o.apply(self.scores, self.siblings, self.lengths, self.multiroot)
        return self._inside[0]

    @cached_property
    def marginals(self) -> torch.Tensor:
        """``[batch_size, n+1, n+1]`` arc marginals ``p(h -> d)``; differentiable (autograd of
        ``log Z``). All 0 for a sentence whose masks leave no tree."""
        return self._feasible_only(self._mus[0])

    @cached_property
    def sibling_marginals(self) -> torch.Tensor:
        """``[batch_size, n+1, n+1, n+1]`` ``p(s, m adjacent siblings under h)``, layout of
        ``siblings``; differentiable."""
        return self._feasible_only(self._mus[1])

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.scores, self.marginals), (self.siblings, self.sibling_marginals)]

    @cached_property
    @fp32_inside
    def _best(self) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            if (triton := self._triton) is not None:
                return triton.best(self.scores, self.siblings, self.lengths, self.multiroot)
            if self._compiled:
                return kernels("dependency._eisner2o_kernels").best(self.scores, self.siblings, self.lengths,
                                                                    self.multiroot)
            fn = lambda s, sib: eisner2o_inside(s, sib, self.lengths, self.multiroot, viterbi=True)  # noqa: E731
            return _gradients(fn, self.scores, self.siblings)[:2]

    def score(self, heads: torch.Tensor) -> torch.Tensor:
        """``[batch_size]`` arc + sibling score of trees given as heads ``[batch_size, n]``
        (padding ignored); ``-inf`` for a tree that uses a masked arc or sibling pair. ``heads``
        are checked as by :meth:`log_prob` (a ValueError for the same inputs)."""
        heads = self._check_heads(heads)
        total = (tree_score(self.scores, heads, self.lengths)
                 + siblings_score(self.siblings, heads, self.lengths))
        if not self.masked:
            return total
        return impossible_as_inf(total)

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, batch_size, n]`` exact samples of projective trees as heads (``-1`` padding,
        all ``-1`` where no tree exists), top-down from the second-order inside chart: one inside
        pass, then each sample picks one term of every sum it reaches with its posterior weight
        (compiled kernels on CPU: a walk per sample; elsewhere :func:`eisner2o_sample`, the
        gradient of the inside pass over ``count`` copies under the sampled ``⊕``). Not
        differentiable."""
        L = self.scores.shape[-1]
        if self._compiled:
            check_count(count, 8 * self.scores.shape[0] * 4 * L)  # (uniforms and heads)
            heads = kernels("dependency._eisner2o_kernels").sample(
                self.scores.detach(), self.siblings.detach(), self.lengths, self.multiroot, count, generator)
        else:
            check_count(count, 8 * self.siblings[..., 0].numel() * L)  # (the inside pass's graph)
            heads = eisner2o_sample(self.scores, self.siblings, self.lengths, self.multiroot, count, generator)
        heads = heads.to(self.scores.device)
        if self.masked:
            heads = heads.masked_fill(~self.feasible.view(1, -1, 1), -1)
        return heads
