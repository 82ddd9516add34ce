"""Plain reference implementations: each structure's recursion written once, to be read.

Each dynamic program is one short function over a semiring ``sr`` (Goodman 1999): every
recursion is written as a comment right above the line that computes it, with ``⊕``/``⊗``
taken from the semiring (:class:`~synattn.structs.semirings.log_max.Semiring`: ``sr.sum``,
``sr.mul``, ``sr.sum_product``) and the batch vectorised (a Python loop over spans or positions;
no chart layout tricks, no explicit outside pass). Values are ``[S, B, ...]`` tensors with a
leading semiring dimension.

- Under :class:`~synattn.structs.semirings.log_max.LogSemiring` a program is the **reference**
  ``log Z`` of its structure (``*_log_partition`` below, on plain ``[B, ...]`` scores); the
  marginals are its gradient (:func:`marginals_by_autograd`), the identity
  ``μ = ∂ log Z / ∂ θ`` of exponential families (Wainwright and Jordan 2008, §3).
- Under any other semiring (max, k-max, entropy, samples, a user's) the same function is what
  :mod:`synattn.structs.semirings.programs` runs (``crf.run(semiring)``).

The public classes (:class:`~synattn.structs.LinearChainCRF`,
:class:`~synattn.structs.DependencyCRF`, :class:`~synattn.structs.NonProjectiveDependencyCRF`,
:class:`~synattn.structs.TreeCRF`, ...) run faster *accelerations* of these functions (explicit
outside passes, compiled kernels, a numerically robust elimination) registered with the same
signature in :mod:`synattn.structs.registry`; the tests check every acceleration against the
reference, and the reference against brute-force enumeration. ``use_backend("reference")``
(:mod:`synattn.structs.backend`) makes the public classes run the reference.

Arguments follow the public classes after their input checks: float scores in which masked
parts hold :data:`~synattn.structs.constants.NEG` (never ``-inf`` or NaN), ``lengths [B]`` long.
The reference assumes every sentence has at least one structure (the public classes map
``log Z <= IMPOSSIBLE`` to ``-inf`` themselves) and moderate scores (the Matrix-Tree determinant
is taken directly, without the safeguards of :mod:`synattn.structs.dependency.matrix_tree`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .constants import NEG
from .semirings.log_max import LogSemiring, Semiring

__all__ = ["chain", "cky", "cky_log_partition", "eisner", "eisner2o", "eisner2o_log_partition",
           "eisner_log_partition", "linear_chain_log_partition", "marginals_by_autograd",
           "matrix_tree_log_partition", "semi_markov", "semi_markov_log_partition"]

SR = type[Semiring]


def _at_length(chart: dict, lengths: torch.Tensor, first: int) -> torch.Tensor:
    """``[S, B]``: ``chart[0, lengths[b] - 1 + first]`` of each sentence ``b``."""
    ends = range(first, first + (int(lengths.max()) if lengths.numel() else 1))  # (1: B = 0)
    stacked = torch.stack([chart[0, j] for j in ends], -1)  # [S, B, J]
    index = (lengths - 1).view(1, -1, 1).expand(stacked.shape[0], -1, 1)
    return stacked.gather(-1, index).squeeze(-1)


def _split(sr: SR, left: list[torch.Tensor], right: list[torch.Tensor]) -> torch.Tensor:
    """``⊕_r left[r] ⊗ right[r]`` over ``[S, B]`` values."""
    return sr.sum_product(torch.stack(left, -1), torch.stack(right, -1))


# ---------------------------------------------------------------------------------------------
# Linear chain: the forward algorithm (Lafferty et al. 2001; Rabiner 1989, eqs. 19-21).
# ---------------------------------------------------------------------------------------------

def chain(sr: SR, unary: torch.Tensor, edge: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[S, B]`` ``⊕_y ⊗_i u_i(y_i) ⊗ e_i(y_i, y_{i+1})`` over labellings ``y``.

    Args:
        unary: ``[S, B, n, C]`` label values ``u_i(c)``.
        edge: ``[S, B, n-1, C, C]`` transition values ``e_i(p, c)`` of ``y_i = p`` → ``y_{i+1} = c``.
        lengths: ``[B]`` chain lengths in ``1..n``; later positions are ignored.
    """
    n = unary.shape[2]
    valid = torch.arange(n, device=lengths.device) < lengths[:, None]  # [B, n]
    # alpha_0(c) = u_0(c)
    alpha = unary[:, :, 0]
    for i in range(1, n):
        # alpha_i(c) = (⊕_p alpha_{i-1}(p) ⊗ e_{i-1}(p, c)) ⊗ u_i(c)
        step = sr.mul(sr.sum_product(alpha.unsqueeze(-2), edge[:, :, i - 1].transpose(-1, -2)),
                      unary[:, :, i])
        # (a chain that has ended keeps its last alpha)
        alpha = torch.where(valid[:, i, None], step, alpha)
    # Z = ⊕_c alpha_{n-1}(c)
    return sr.sum(alpha, -1)


# ---------------------------------------------------------------------------------------------
# Semi-Markov (segmental) chain: the forward algorithm over segment ends (Sarawagi and Cohen 2004).
# ---------------------------------------------------------------------------------------------

def semi_markov(sr: SR, edge: torch.Tensor, lengths: torch.Tensor,
                init: torch.Tensor | None = None) -> torch.Tensor:
    """``[S, B]`` the semiring sum over all labelled segmentations.

    Args:
        edge: ``[S, B, n-1, K, C, C]``; ``edge[:, b, s, k, p, c]`` values a segment of ``k``
            positions (``1 <= k < K``; ``k = 0`` is unused) after position ``s``, i.e. covering
            ``s+1..s+k``, labelled ``c``, whose predecessor (the previous segment, or position 0's
            own label when ``s = 0``) is labelled ``p``.
        lengths: ``[B]`` positions per sequence in ``1..n``; later positions are ignored.
        init: ``[S, B, C]`` values of position 0's label; default ``one`` (free).
    """
    S, B, m, K, C, _ = edge.shape
    # alpha_0(c) = init(c): the label of position 0
    alpha = [sr.ones(edge.new_zeros(S, B, C)) if init is None else init]  # [S, B, C]
    for t in range(1, m + 1):
        # alpha_t(c) = ⊕_{1<=k<K, k<=t} ⊕_p alpha_{t-k}(p) ⊗ edge(t-k, k, p, c):
        # the last segment ends at t, has k positions and label c
        ks = range(1, min(K - 1, t) + 1)
        prev = torch.cat([alpha[t - k] for k in ks], -1)  # [S, B, k*p]
        terms = torch.cat([edge[:, :, t - k, k] for k in ks], -2)  # [S, B, k*p, C]
        alpha.append(sr.sum_product(prev.unsqueeze(-2), terms.transpose(-1, -2)))
    # Z = ⊕_c alpha_{L-1}(c): a segment ends at the last position
    chart = torch.stack(alpha, 2)  # [S, B, n, C]
    last = chart.gather(2, (lengths - 1).view(1, B, 1, 1).expand(S, B, 1, C)).squeeze(2)
    # (n = 1: no segment; the value is linked to the empty edge so that it stays differentiable)
    return sr.sum(last, -1) + (0.0 * edge.sum((2, 3, 4, 5)) if m == 0 else 0.0)


# ---------------------------------------------------------------------------------------------
# Projective dependency trees: Eisner's algorithm (Eisner 1996; Eisner and Satta 1999).
# ---------------------------------------------------------------------------------------------

def eisner(sr: SR, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool = True) -> torch.Tensor:
    """``[S, B]`` the semiring sum over all projective trees.

    Args:
        scores: ``[S, B, N+1, N+1]`` arc values ``s(h → d) = scores[:, b, h, d]``, ROOT = 0.
        lengths: ``[B]`` word counts in ``1..N``.
        multiroot: if False, ROOT has exactly one child.

    Spans ``(i, j)``, ``i < j``, are *complete* (``C``: the head at one end has collected all
    its dependents on that side) or *incomplete* (``I``: the arc between the two ends was just
    added), headed at the left end (``R``, arcs point right, ``→``) or at the right end (``L``,
    ``←``). ``S(i, j)`` is the split sum that two incomplete spans share.
    """
    L = scores.shape[-1]
    # C→(i, i) = C←(i, i) = one: a word alone is a complete span with no dependents
    one = sr.ones(scores[:, :, 0, 0])
    CR = {(i, i): one for i in range(L)}
    CL = dict(CR)
    IR, IL = {}, {}
    for w in range(1, L):
        for i in range(L - w):
            j = i + w
            # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            S = _split(sr, [CR[i, r] for r in range(i, j)], [CL[r + 1, j] for r in range(i, j)])
            # I→(i, j) = s(i → j) ⊗ S(i, j)
            IR[i, j] = sr.mul(scores[:, :, i, j], S)
            # I←(i, j) = s(j → i) ⊗ S(i, j)
            IL[i, j] = sr.mul(scores[:, :, j, i], S)
            # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
            CR[i, j] = _split(sr, [IR[i, r] for r in range(i + 1, j + 1)],
                              [CR[r, j] for r in range(i + 1, j + 1)])
            # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            CL[i, j] = _split(sr, [CL[i, r] for r in range(i, j)], [IL[r, j] for r in range(i, j)])
            if i == 0 and not multiroot:
                # one root: ROOT's complete span C→(0, j) may only end at the last word, so
                # that I→(0, r) is used once, at the top (as in supar)
                CR[0, j] = sr.mask(CR[0, j], lengths == j)
    # Z = C→(0, n): ROOT heads the whole sentence
    return _at_length(CR, lengths, 1)


def eisner2o(sr: SR, scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
             multiroot: bool = True) -> torch.Tensor:
    """``[S, B]`` the semiring sum over projective trees of arc and adjacent-sibling values
    (second-order Eisner: McDonald and Pereira 2006; Zhang et al. 2020).

    Args:
        scores: ``[S, B, N+1, N+1]`` arc values ``s[h, d]``, ROOT = 0.
        siblings: ``[S, B, N+1, N+1, N+1]`` values ``sib[h, s, m]`` of ``s`` and ``m`` adjacent
            dependents of ``h`` on the same side, ``s`` nearer to ``h``
            (:mod:`synattn.structs.dependency.eisner2o`).
        lengths, multiroot: as :func:`eisner` (with one root, ROOT's child has no sibling).

    The spans of :func:`eisner` and a *sibling* item ``S(i, j)``: two adjacent siblings' inner
    halves meet; an incomplete span's first term is the head's nearest dependent.
    """
    L = scores.shape[-1]
    one = sr.ones(scores[:, :, 0, 0])
    CR = {(i, i): one for i in range(L)}
    CL = dict(CR)
    IR: dict[tuple[int, int], torch.Tensor] = {}
    IL: dict[tuple[int, int], torch.Tensor] = {}
    SB: dict[tuple[int, int], torch.Tensor] = {}

    def total(terms: list[torch.Tensor]) -> torch.Tensor:
        return sr.sum(torch.stack(terms, -1), -1)

    for w in range(1, L):
        for i in range(L - w):
            j = i + w
            # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            SB[i, j] = _split(sr, [CR[i, r] for r in range(i, j)], [CL[r + 1, j] for r in range(i, j)])
            # I→(i, j) = s[i, j] ⊗ (C←(i+1, j) ⊕ ⊕_{i<r<j} I→(i, r) ⊗ S(r, j) ⊗ sib[i, r, j])
            inner = range(i + 1, j) if i > 0 or multiroot else range(0)  # (one root: no siblings)
            right = [sr.mul(sr.mul(IR[i, r], SB[r, j]), siblings[:, :, i, r, j]) for r in inner]
            IR[i, j] = sr.mul(scores[:, :, i, j], total([CL[i + 1, j], *right]))
            # I←(i, j) = s[j, i] ⊗ (C→(i, j-1) ⊕ ⊕_{i<r<j} I←(r, j) ⊗ S(i, r) ⊗ sib[j, r, i])
            left = [sr.mul(sr.mul(IL[r, j], SB[i, r]), siblings[:, :, j, r, i]) for r in range(i + 1, j)]
            IL[i, j] = sr.mul(scores[:, :, j, i], total([CR[i, j - 1], *left]))
            # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
            CR[i, j] = _split(sr, [IR[i, r] for r in range(i + 1, j + 1)],
                              [CR[r, j] for r in range(i + 1, j + 1)])
            # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            CL[i, j] = _split(sr, [CL[i, r] for r in range(i, j)], [IL[r, j] for r in range(i, j)])
    # Z = C→(0, n)
    return _at_length(CR, lengths, 1)


# ---------------------------------------------------------------------------------------------
# Binary constituency trees over spans: CKY (Kasami 1965; Younger 1967) with span scores as in
# Stern et al. (2017) and Kim et al. (2019).
# ---------------------------------------------------------------------------------------------

def cky(sr: SR, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[S, B]`` the semiring sum over all binary bracketings.

    Args:
        scores: ``[S, B, N, N]`` span values, ``scores[:, b, i, j]`` for words ``i..j`` inclusive
            (``i <= j``); a tree's value is the product over its ``2n - 1`` spans.
        lengths: ``[B]`` word counts in ``1..N``.
    """
    N = scores.shape[-1]
    # beta(i, i) = s(i, i): a one-word span
    beta = {(i, i): scores[:, :, i, i] for i in range(N)}
    for w in range(1, N):
        for i in range(N - w):
            j = i + w
            # beta(i, j) = s(i, j) ⊗ ⊕_{i<=k<j} beta(i, k) ⊗ beta(k+1, j)
            inner = _split(sr, [beta[i, k] for k in range(i, j)], [beta[k + 1, j] for k in range(i, j)])
            beta[i, j] = sr.mul(scores[:, :, i, j], inner)
    # Z = beta(0, n-1)
    return _at_length(beta, lengths, 0)


# ---------------------------------------------------------------------------------------------
# The reference log-partition of each structure: its program under the log semiring.
# ---------------------------------------------------------------------------------------------

def _log(program: Callable[..., torch.Tensor], potentials: list[torch.Tensor], *extra) -> torch.Tensor:
    """``[B]`` ``program`` under :class:`LogSemiring` on log-potentials ``[B, ...]``."""
    return program(LogSemiring, *(LogSemiring.convert(p) for p in potentials), *extra).squeeze(0)


def linear_chain_log_partition(unary: torch.Tensor, edge: torch.Tensor,
                               lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` ``log Σ_y exp(Σ_i u_i(y_i) + Σ_i e_i(y_i, y_{i+1}))``: :func:`chain` on
    ``unary [B, n, C]`` and ``edge [B, n-1, C, C]`` (``[p, c]``)."""
    return _log(chain, [unary, edge], lengths)


def semi_markov_log_partition(edge: torch.Tensor, lengths: torch.Tensor,
                              init: torch.Tensor | None = None) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all labelled segmentations: :func:`semi_markov` on
    ``edge [B, n-1, K, C, C]`` and ``init [B, C]`` (default 0; :data:`NEG` excludes a label)."""
    values = LogSemiring.convert(edge), None if init is None else LogSemiring.convert(init)
    return semi_markov(LogSemiring, values[0], lengths, values[1]).squeeze(0)


def eisner_log_partition(scores: torch.Tensor, lengths: torch.Tensor,
                         multiroot: bool = True) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all projective trees: :func:`eisner` on arc scores
    ``[B, N+1, N+1]``."""
    return _log(eisner, [scores], lengths, multiroot)


def eisner2o_log_partition(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                           multiroot: bool = True) -> torch.Tensor:
    """``[B]`` log-sum over projective trees of arc + adjacent-sibling scores: :func:`eisner2o`
    on ``scores [B, N+1, N+1]`` and ``siblings [B, N+1, N+1, N+1]``."""
    return _log(eisner2o, [scores, siblings], lengths, multiroot)


def cky_log_partition(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all binary bracketings: :func:`cky` on span scores
    ``[B, N, N]``."""
    return _log(cky, [scores], lengths)


# ---------------------------------------------------------------------------------------------
# Non-projective dependency trees: the Matrix-Tree theorem (Tutte 1984; Koo et al. 2007).
# ---------------------------------------------------------------------------------------------

def matrix_tree_log_partition(scores: torch.Tensor, lengths: torch.Tensor,
                              multiroot: bool = True) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all spanning arborescences rooted at ROOT.

    Args as :func:`eisner_log_partition` (any tree, projective or not).
    """
    B, L, _ = scores.shape
    pos = torch.arange(L, device=scores.device)
    node = pos <= lengths[:, None]  # [B, L]: ROOT and the words of each sentence
    # the arcs h → d some tree may use: between nodes of the sentence, into a word, no self-loop
    usable = node[:, :, None] & (node & (pos > 0))[:, None, :] & (pos[:, None] != pos)
    # every tree has n arcs, so Z(s) = exp(n·m) · Z(s - m): shift by the largest usable score
    m = torch.where(usable, scores, NEG).detach().amax((1, 2))  # [B]
    # A[h, d] = exp(s(h → d) - m) for the usable arcs, 0 for the others
    A = torch.where(usable, scores - m[:, None, None], NEG).exp()
    # r[d] = A[0, d]: root weights; the rest are word-to-word weights [B, N, N]
    r, A = A[:, 0, 1:], A[:, 1:, 1:]
    # Laplacian (Koo et al. 2007, §3): L[d, d] = Σ_h A[h, d] (+ r[d] with several roots),
    # L[h, d] = -A[h, d] for h ≠ d; then Z = det L
    lap = torch.diag_embed(A.sum(1) + (r if multiroot else 0.0)) - A
    if not multiroot:
        # one root (Koo et al. 2007, §3.3): the first word's row is replaced by r; Z = det L̂
        lap = torch.cat((r.unsqueeze(1), lap[:, 1:]), 1)
    # words past a sentence's length get identity rows and columns: the determinant is unchanged
    pad = torch.arange(1, L, device=scores.device) > lengths[:, None]  # [B, N]
    eye = torch.diag_embed(pad.to(lap.dtype))
    lap = torch.where(pad[:, :, None] | pad[:, None, :], eye, lap)
    # log Z = n·m + log det L
    return lengths * m + torch.linalg.slogdet(lap).logabsdet


# ---------------------------------------------------------------------------------------------
# Marginals.
# ---------------------------------------------------------------------------------------------

def marginals_by_autograd(log_partition: Callable[..., torch.Tensor], scores: torch.Tensor,
                          *args, **kwargs) -> torch.Tensor:
    """``∂ log Z / ∂ scores`` (same shape as ``scores``) of ``log_partition(scores, *args)``.

    Differentiable (built with ``create_graph``) when gradients are enabled and ``scores`` or
    a tensor among ``args`` requires them, so that the marginals' own backward (the Hessian of
    ``log Z``) is autograd's double backward.
    """
    tensors = [scores, *(a for a in args if isinstance(a, torch.Tensor))]
    graph = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    with torch.enable_grad():
        x = scores if scores.requires_grad and graph else scores.detach().requires_grad_()
        log_z = log_partition(x, *args, **kwargs)
        (mu,) = torch.autograd.grad(log_z.sum(), x, create_graph=graph)
        if graph and not mu.requires_grad:  # log Z linear in the scores (e.g. one-word CKY):
            mu = mu + 0.0 * x  # constant marginals, still a function of the scores (Hessian 0)
    return mu
