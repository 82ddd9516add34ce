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

:func:`eisner2o_reference` is the recursion written plainly (a Python loop over spans;
``use_backend("reference")``). On CPU tensors the class runs compiled kernels
(:mod:`synattn.structs.dependency._eisner2o_kernels`: inside pass, explicit outside pass for the arc and
sibling marginals, the max semiring for the best tree, a top-down walk per sample); on CUDA tensors
Triton kernels for ``log Z``, both marginals, their backward and the best tree
(:mod:`synattn.structs.triton_kernels.eisner2o`, a few launches a call); elsewhere
(``use_backend("torch")``, and sampling on CUDA) :func:`eisner2o_inside`, the same recursion
vectorised over the spans of one width and the batch (one Python step per width, gathers by index from charts
``[5, N+1, N+1, B]``), whose marginals are autograd's gradient of ``log Z``, whose best tree is the
gradient of the max-semiring pass and whose samples the gradient of the sampled-semiring pass
(:func:`eisner2o_sample`). Under any other semiring the class runs the generic program
:func:`synattn.structs.semirings.programs.eisner2o`. The marginals are differentiable on both
paths; their backward (the Hessian of ``log Z`` times a direction) is autograd's double backward
of :func:`eisner2o_inside`, except under Triton (the same kernels on dual numbers).
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..arguments import score_tensor
from ..backend import kernels, requested_backend, use_numba, use_triton
from ..constants import NEG
from ..distribution import check_count
from ..scores import check_scores, fp32_inside, impossible_as_inf, mask_impossible
from .arc_scores import ArcCRF, heads_from_arcs, tree_score
from .eisner import DependencyCRF

# channels of the chart [5, L, L, B]: chart[c, i, j] for the span (i, j), i <= j
CR, CL, IR, IL, SIB = range(5)


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


# ---------------------------------------------------------------------------------------------
# The plain recursion (use_backend("reference")).
# ---------------------------------------------------------------------------------------------

def eisner2o_reference(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                       multiroot: bool = True) -> torch.Tensor:
    """``[B]`` log-sum over projective trees of arc + adjacent-sibling scores (module docstring)."""
    B, L, _ = scores.shape
    lse = lambda terms: torch.logsumexp(torch.stack(terms), 0)  # noqa: E731
    zero = scores.new_zeros(B)
    CRc = {(i, i): zero for i in range(L)}
    CLc = {(i, i): zero for i in range(L)}
    IRc: dict[tuple[int, int], torch.Tensor] = {}
    ILc: dict[tuple[int, int], torch.Tensor] = {}
    S: dict[tuple[int, int], torch.Tensor] = {}
    for w in range(1, L):
        for i in range(L - w):
            j = i + w
            # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            S[i, j] = lse([CRc[i, r] + CLc[r + 1, j] for r in range(i, j)])
            # I→(i, j) = s[i, j] ⊗ (C←(i+1, j) ⊕ ⊕_{i<r<j} I→(i, r) ⊗ S(r, j) ⊗ sib[i, r, j])
            right = [CLc[i + 1, j]]
            if i > 0 or multiroot:  # with one root, ROOT's only child has no sibling
                right += [IRc[i, r] + S[r, j] + siblings[:, i, r, j] for r in range(i + 1, j)]
            IRc[i, j] = scores[:, i, j] + lse(right)
            # I←(i, j) = s[j, i] ⊗ (C→(i, j-1) ⊕ ⊕_{i<r<j} I←(r, j) ⊗ S(i, r) ⊗ sib[j, r, i])
            left = [CRc[i, j - 1]] + [ILc[r, j] + S[i, r] + siblings[:, j, r, i] for r in range(i + 1, j)]
            ILc[i, j] = scores[:, j, i] + lse(left)
            # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j);  C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            CRc[i, j] = lse([IRc[i, r] + CRc[r, j] for r in range(i + 1, j + 1)])
            CLc[i, j] = lse([CLc[i, r] + ILc[r, j] for r in range(i, j)])
    # log Z = C→(0, n)
    return torch.stack([CRc[0, int(n)][b] for b, n in enumerate(lengths)])


# ---------------------------------------------------------------------------------------------
# The vectorised inside pass.
# ---------------------------------------------------------------------------------------------

class _SampledLogSumExp(torch.autograd.Function):
    """Log-sum-exp over ``dim`` whose backward sends all of its adjoint to one term drawn with its
    posterior weight (Gumbel-max with ``generator``): the sampled semiring's ``⊕`` (Goodman 1999),
    so that the gradient of ``log Z`` is one exact sample's arcs."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int, generator: torch.Generator | None) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.dim, ctx.generator = dim, generator
        return torch.logsumexp(x, dim)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (x,) = ctx.saved_tensors
        u = torch.rand(x.shape, generator=ctx.generator, dtype=x.dtype, device=x.device)
        pick = (x - torch.log(-torch.log(u.clamp_min(1e-30)))).argmax(ctx.dim, keepdim=True)
        return torch.zeros_like(x).scatter_(ctx.dim, pick, g.unsqueeze(ctx.dim)), None, None


def eisner2o_inside(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                    multiroot: bool = True, viterbi: bool = False, sampled: bool = False,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """``[B]`` ``log Z`` (or the best tree's score with ``viterbi``) of the recursion in the module
    docstring, differentiable by autograd (also twice); with ``sampled``, its gradient is a
    sample's arcs instead of the marginals (:class:`_SampledLogSumExp`, draws from ``generator``).

    Args:
        scores: ``[B, L, L]`` checked arc scores ``[b, h, d]`` (``L = n+1``).
        siblings: ``[B, L, L, L]`` checked sibling scores ``[b, h, s, m]``.
        lengths: ``[B]`` word counts in ``1..n``.
        multiroot: several words may attach to ROOT.
        viterbi: the max semiring instead of log-sum-exp.
        sampled, generator: the sampled log-sum-exp instead (see above).
    """

    def _semiring_sum(x: torch.Tensor, dim: int, viterbi: bool) -> torch.Tensor:
        if sampled:
            return _SampledLogSumExp.apply(x, dim, generator)
        return x.max(dim).values if viterbi else torch.logsumexp(x, dim)

    B, L, _ = scores.shape
    dev = scores.device
    arc = scores.permute(1, 2, 0)  # [L(h), L(d), B]
    sib = siblings.permute(1, 2, 3, 0)  # [L(h), L(s), L(m), B]
    chart = torch.full((5, L, L, B), NEG, dtype=scores.dtype, device=dev)
    diag = torch.arange(L, device=dev)
    chart[CR, diag, diag] = 0.0
    chart[CL, diag, diag] = 0.0
    for w in range(1, L):
        n = L - w
        i = torch.arange(n, device=dev)  # span starts
        j = i + w
        I, J = i[:, None], j[:, None]  # noqa: E741 (the span ends i, j as columns) [n, 1]
        t = torch.arange(w, device=dev)[None, :]  # [1, w] split offsets
        # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
        s_ij = _semiring_sum(chart[CR, I, I + t] + chart[CL, I + t + 1, J], 1, viterbi)  # [n, B]
        r = (I + t)[:, 1:]  # [n, w-1] inner siblings i < r < j
        # I→(i, j): nearest child (C←(i+1, j)) or I→(i, r) ⊗ S(r, j) ⊗ sib[i, r, j]
        inner_r = chart[IR, I, r] + chart[SIB, r, J] + sib[I, r, J]  # [n, w-1, B]
        if not multiroot and w > 1:
            inner_r[0] = NEG  # ROOT's only child has no sibling
        right = torch.cat([chart[CL, i + 1, j].unsqueeze(1), inner_r], 1)
        ir = arc[i, j] + _semiring_sum(right, 1, viterbi)
        # I←(i, j): nearest child (C→(i, j-1)) or I←(r, j) ⊗ S(i, r) ⊗ sib[j, r, i]
        inner_l = chart[IL, r, J] + chart[SIB, I, r] + sib[J, r, I]
        left = torch.cat([chart[CR, i, j - 1].unsqueeze(1), inner_l], 1)
        il = arc[j, i] + _semiring_sum(left, 1, viterbi)
        chart[SIB, i, j] = s_ij
        chart[IR, i, j] = ir
        chart[IL, i, j] = il
        # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j);  C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
        cr = _semiring_sum(chart[IR, I, I + t + 1] + chart[CR, I + t + 1, J], 1, viterbi)
        cl = _semiring_sum(chart[CL, I, I + t] + chart[IL, I + t, J], 1, viterbi)
        chart[CR, i, j] = cr
        chart[CL, i, j] = cl
    return chart[CR, 0, lengths, torch.arange(B, device=dev)]


def eisner2o_sample(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                    multiroot: bool, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[count, B, n]`` heads (``-1`` padding) of exact samples, top-down from the inside chart:
    the gradient of one :func:`eisner2o_inside` pass over ``count`` copies of the batch under the
    sampled ``⊕`` (float64; the PyTorch path of ``Dependency2oCRF.sample``)."""
    B = scores.shape[0]
    with torch.enable_grad():
        x = scores.detach().double().repeat(count, 1, 1).requires_grad_()
        y = siblings.detach().double().repeat(count, 1, 1, 1)
        log_z = eisner2o_inside(x, y, lengths.repeat(count), multiroot, sampled=True, generator=generator)
        (arcs,) = torch.autograd.grad(log_z.sum(), x)
    return heads_from_arcs(arcs, lengths.repeat(count)).view(count, B, scores.shape[-1] - 1)


def eisner2o_log_partition(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                           multiroot: bool = True) -> torch.Tensor:
    """``[B]`` ``log Z``: :func:`eisner2o_reference` under ``use_backend("reference")``, else
    :func:`eisner2o_inside`."""
    if requested_backend() == "reference":
        return eisner2o_reference(scores, siblings, lengths, multiroot)
    return eisner2o_inside(scores, siblings, lengths, multiroot)


def _gradients(fn, scores: torch.Tensor, siblings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``fn(scores, siblings) [B]`` and its gradients with respect to both, differentiable when
    gradients are enabled and either input requires them."""
    graph = torch.is_grad_enabled() and (scores.requires_grad or siblings.requires_grad)
    with torch.enable_grad():
        x = scores if scores.requires_grad and graph else scores.detach().requires_grad_()
        y = siblings if siblings.requires_grad and graph else siblings.detach().requires_grad_()
        value = fn(x, y)
        gx, gy = torch.autograd.grad(value.sum(), (x, y), create_graph=graph, allow_unused=True)
    gx = torch.zeros_like(scores) if gx is None else gx
    gy = torch.zeros_like(siblings) if gy is None else gy
    return value if graph else value.detach(), gx, gy


class _LogPartition2o(torch.autograd.Function):
    """``log Z`` by the compiled kernels; backward: their marginals (explicit outside pass), or
    :class:`_Marginals2o` when a second derivative is being built."""

    @staticmethod
    def forward(ctx, scores, siblings, lengths, multiroot):
        ctx.multiroot = multiroot
        if not any(ctx.needs_input_grad[:2]):
            return kernels("dependency._eisner2o_kernels").log_partition(scores, siblings, lengths, multiroot)
        log_z, mu, mu_sib = kernels("dependency._eisner2o_kernels").marginals(scores, siblings, lengths, multiroot)
        ctx.save_for_backward(scores, siblings, lengths, mu, mu_sib)
        return log_z

    @staticmethod
    def backward(ctx, g):
        scores, siblings, lengths, mu, mu_sib = ctx.saved_tensors
        if torch.is_grad_enabled():
            mu, mu_sib = _Marginals2o.apply(scores, siblings, lengths, ctx.multiroot)
        return mu * g[:, None, None], mu_sib * g[:, None, None, None], None, None


class _Marginals2o(torch.autograd.Function):
    """Arc and sibling marginals by the compiled inside-outside pass; their backward (the Hessian
    of ``log Z`` times the incoming gradients) by autograd's double backward of
    :func:`eisner2o_inside` (PyTorch path)."""

    @staticmethod
    def forward(ctx, scores, siblings, lengths, multiroot):
        ctx.multiroot = multiroot
        ctx.save_for_backward(scores, siblings, lengths)
        return kernels("dependency._eisner2o_kernels").marginals(scores, siblings, lengths, multiroot)[1:]

    @staticmethod
    def backward(ctx, g, g_sib):
        scores, siblings, lengths = ctx.saved_tensors
        return (*marginals_vjp_by_autograd(scores, siblings, lengths, ctx.multiroot, g, g_sib), None, None)


def marginals_vjp_by_autograd(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                              multiroot: bool, g: torch.Tensor, g_sib: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The vector-Jacobian product of the arc and sibling marginals with ``(g, g_sib)`` by
    autograd's double backward of :func:`eisner2o_inside` (differentiable again when gradients are
    enabled: a third derivative)."""
    graph = torch.is_grad_enabled()
    with torch.enable_grad():
        x = scores if graph and scores.requires_grad else scores.detach().requires_grad_()
        y = siblings if graph and siblings.requires_grad else siblings.detach().requires_grad_()
        log_z = eisner2o_inside(x, y, lengths, multiroot)
        mu = torch.autograd.grad(log_z.sum(), (x, y), create_graph=True)
        hx, hy = torch.autograd.grad(mu, (x, y), (g, g_sib), create_graph=graph, allow_unused=True)
    hx = torch.zeros_like(scores) if hx is None else hx
    hy = torch.zeros_like(siblings) if hy is None else hy
    return hx, hy


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

    @cached_property
    def log_partition(self) -> torch.Tensor:
        """``[batch_size]`` log-sum of the scores of all trees; differentiable. ``-inf`` (with a
        zero gradient) for a sentence whose masks leave no tree."""
        if (triton := self._triton) is not None:
            log_z = triton.LogPartition2o.apply(self.scores, self.siblings, self.lengths, self.multiroot)
        elif self._compiled:
            with torch.autocast("cpu", enabled=False):
                log_z = _LogPartition2o.apply(self.scores, self.siblings, self.lengths, self.multiroot)
        else:
            log_z = self._inside[0]
        if not self.masked:
            return log_z
        return impossible_as_inf(log_z)

    def _feasible_only(self, mu: torch.Tensor) -> torch.Tensor:
        if not self.masked:
            return mu
        keep = self.feasible.view(-1, *[1] * (mu.dim() - 1))
        return torch.where(keep, mu, mu.new_zeros(()))

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

    @property
    def max(self) -> torch.Tensor:
        """``[batch_size]`` score of the best projective tree (not differentiable); ``-inf`` if
        masks leave none."""
        best = self._best[0]
        return impossible_as_inf(best)

    @property
    def argmax(self) -> torch.Tensor:
        """``[batch_size, n]`` heads of the best projective tree; ``-1`` padding, and all ``-1``
        for a sentence whose masks leave no tree."""
        heads = heads_from_arcs(self._best[1], self.lengths)
        return heads.masked_fill((self.max == -float("inf")).unsqueeze(-1), -1)

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
