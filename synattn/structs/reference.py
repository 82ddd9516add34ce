"""Plain reference implementations: one log-partition per structure, written to be read.

Each function computes ``log Z`` of one structure with the textbook recursion, every recursion
written as a comment right above the line that computes it, vectorised over the batch only (a
Python loop over spans or positions; no chart layout tricks, no explicit outside pass). The
marginals are the gradient of ``log Z`` (:func:`marginals_by_autograd`), the identity
``μ = ∂ log Z / ∂ θ`` of exponential families (Wainwright and Jordan 2008, §3).

The public classes (:class:`~synattn.structs.LinearChainCRF`,
:class:`~synattn.structs.DependencyCRF`, :class:`~synattn.structs.NonProjectiveDependencyCRF`,
:class:`~synattn.structs.TreeCRF`) run faster *accelerations* of these functions (explicit
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

__all__ = ["cky_log_partition", "eisner_log_partition", "linear_chain_log_partition",
           "marginals_by_autograd", "matrix_tree_log_partition", "semi_markov_log_partition"]


def _lse(terms: list[torch.Tensor]) -> torch.Tensor:
    """``⊕`` of the log semiring: ``log Σ_k exp(t_k)`` over a list of ``[B]`` tensors."""
    return torch.logsumexp(torch.stack(terms), 0)


def _at_length(chart: dict, lengths: torch.Tensor, first: int) -> torch.Tensor:
    """``[B]``: ``chart[0, lengths[b] - 1 + first]`` of each sentence ``b``."""
    ends = range(first, first + int(lengths.max()))
    return torch.stack([chart[0, j] for j in ends], 1).gather(1, (lengths - 1)[:, None]).squeeze(1)


# ---------------------------------------------------------------------------------------------
# Linear chain: the forward algorithm (Lafferty et al. 2001; Rabiner 1989, eqs. 19-21).
# ---------------------------------------------------------------------------------------------

def linear_chain_log_partition(unary: torch.Tensor, edge: torch.Tensor,
                               lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` ``log Σ_y exp(Σ_i u_i(y_i) + Σ_i e_i(y_i, y_{i+1}))`` over labellings ``y``.

    Args:
        unary: ``[B, n, C]`` label scores ``u_i(c)``.
        edge: ``[B, n-1, C, C]`` transition scores ``e_i(p, c)`` of ``y_i = p`` → ``y_{i+1} = c``.
        lengths: ``[B]`` chain lengths in ``1..n``; later positions are ignored.
    """
    B, n, C = unary.shape
    valid = torch.arange(n, device=unary.device) < lengths[:, None]  # [B, n]
    unary = torch.where(valid[:, :, None], unary, 0.0)
    edge = torch.where(valid[:, 1:, None, None], edge, 0.0)
    # alpha_0(c) = u_0(c)
    alpha = unary[:, 0]
    for i in range(1, n):
        # alpha_i(c) = ⊕_p alpha_{i-1}(p) ⊗ e_{i-1}(p, c) ⊗ u_i(c)
        step = torch.logsumexp(alpha[:, :, None] + edge[:, i - 1], 1) + unary[:, i]
        # (a chain that has ended keeps its last alpha)
        alpha = torch.where(valid[:, i, None], step, alpha)
    # log Z = ⊕_c alpha_{n-1}(c)
    return torch.logsumexp(alpha, 1)


# ---------------------------------------------------------------------------------------------
# Semi-Markov (segmental) chain: the forward algorithm over segment ends (Sarawagi and Cohen 2004).
# ---------------------------------------------------------------------------------------------

def semi_markov_log_partition(edge: torch.Tensor, lengths: torch.Tensor,
                              init: torch.Tensor | None = None) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all labelled segmentations.

    Args:
        edge: ``[B, n-1, K, C, C]``; ``edge[b, s, k, p, c]`` scores a segment of ``k`` positions
            (``1 <= k < K``; ``k = 0`` is unused) after position ``s``, i.e. covering
            ``s+1..s+k``, labelled ``c``, whose predecessor (the previous segment, or position 0's
            own label when ``s = 0``) is labelled ``p``.
        lengths: ``[B]`` positions per sequence in ``1..n``; later positions are ignored.
        init: ``[B, C]`` scores of position 0's label; default 0 (:data:`NEG` excludes a label).
    """
    B, m, K, C, _ = edge.shape
    # alpha_0(c) = init(c): the label of position 0 (0, free, unless restricted)
    alpha = [edge.new_zeros(B, C) if init is None else init]
    for t in range(1, m + 1):
        # alpha_t(c) = ⊕_{1<=k<K, k<=t} ⊕_p alpha_{t-k}(p) ⊗ edge(t-k, k, p, c):
        # the last segment ends at t, has k positions and label c
        alpha.append(_lse([torch.logsumexp(alpha[t - k][:, :, None] + edge[:, t - k, k], 1)
                           for k in range(1, min(K - 1, t) + 1)]))
    # log Z = ⊕_c alpha_{L-1}(c): a segment ends at the last position
    last = torch.stack(alpha, 1).gather(1, (lengths - 1)[:, None, None].expand(B, 1, C))
    # (n = 1: log Z = log C, linked to the empty edge so that it stays differentiable)
    return torch.logsumexp(last[:, 0], 1) + (0.0 * edge.sum((1, 2, 3, 4)) if m == 0 else 0.0)


# ---------------------------------------------------------------------------------------------
# Projective dependency trees: Eisner's algorithm (Eisner 1996; Eisner and Satta 1999).
# ---------------------------------------------------------------------------------------------

def eisner_log_partition(scores: torch.Tensor, lengths: torch.Tensor,
                         multiroot: bool = True) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all projective trees.

    Args:
        scores: ``[B, N+1, N+1]`` arc scores ``s(h → d) = scores[b, h, d]``, ROOT = 0.
        lengths: ``[B]`` word counts in ``1..N``.
        multiroot: if False, ROOT has exactly one child.

    Spans ``(i, j)``, ``i < j``, are *complete* (``C``: the head at one end has collected all
    its dependents on that side) or *incomplete* (``I``: the arc between the two ends was just
    added), headed at the left end (``R``, arcs point right, ``→``) or at the right end (``L``,
    ``←``). ``S(i, j)`` is the split sum that two incomplete spans share.
    """
    B, L, _ = scores.shape
    zero = scores.new_zeros(B)
    # C→(i, i) = C←(i, i) = 0: a word alone is a complete span with no dependents
    CR = {(i, i): zero for i in range(L)}
    CL = {(i, i): zero for i in range(L)}
    IR, IL = {}, {}
    for w in range(1, L):
        for i in range(L - w):
            j = i + w
            # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            S = _lse([CR[i, r] + CL[r + 1, j] for r in range(i, j)])
            # I→(i, j) = s(i → j) ⊗ S(i, j)
            IR[i, j] = scores[:, i, j] + S
            # I←(i, j) = s(j → i) ⊗ S(i, j)
            IL[i, j] = scores[:, j, i] + S
            # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
            CR[i, j] = _lse([IR[i, r] + CR[r, j] for r in range(i + 1, j + 1)])
            # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            CL[i, j] = _lse([CL[i, r] + IL[r, j] for r in range(i, j)])
            if i == 0 and not multiroot:
                # one root: ROOT's complete span C→(0, j) may only end at the last word, so
                # that I→(0, r) is used once, at the top (as in supar)
                CR[0, j] = torch.where(lengths == j, CR[0, j], NEG)
    # log Z = C→(0, n): ROOT heads the whole sentence
    return _at_length(CR, lengths, 1)


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
# Binary constituency trees over spans: CKY (Kasami 1965; Younger 1967) in the log semiring,
# with span scores as in Stern et al. (2017) and Kim et al. (2019).
# ---------------------------------------------------------------------------------------------

def cky_log_partition(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` log-sum of the scores of all binary bracketings.

    Args:
        scores: ``[B, N, N]`` span scores, ``scores[b, i, j]`` for words ``i..j`` inclusive
            (``i <= j``); a tree's score is the sum over its ``2n - 1`` spans.
        lengths: ``[B]`` word counts in ``1..N``.
    """
    B, N, _ = scores.shape
    # beta(i, i) = s(i, i): a one-word span
    beta = {(i, i): scores[:, i, i] for i in range(N)}
    for w in range(1, N):
        for i in range(N - w):
            j = i + w
            # beta(i, j) = s(i, j) ⊗ ⊕_{i<=k<j} beta(i, k) ⊗ beta(k+1, j)
            beta[i, j] = scores[:, i, j] + _lse([beta[i, k] + beta[k + 1, j] for k in range(i, j)])
    # log Z = beta(0, n-1)
    return _at_length(beta, lengths, 0)


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
