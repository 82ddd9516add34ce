"""Matrix-Tree ``log Z`` by the GTH elimination in log space: the fallback of
:mod:`synattn.structs.dependency.matrix_tree` for extreme scales and masked arcs, differentiable by autograd.

The float64 GTH elimination of :mod:`synattn.structs.dependency.matrix_tree` scales each column by its
largest weight; when a column's scores span more than :data:`SAFE_SPREAD` (weights underflow next
to the largest) or a pivot falls below ``SAFE_PIVOT`` (a pivot made of underflowed or masked
weights only), its ``log Z`` can be far off (scores ×500: 4070 against the exact 3704, or
``inf``). Here every weight is kept as its logarithm; pivots and Schur updates are log-sums of
non-negative terms, exact at any scale. Marginals and their backward come from autograd (first
and second derivatives of :func:`_log_space_log_z`), at ``O(B·N³)`` memory: the price of the
rare sentences that need it.
"""

from __future__ import annotations

import math

import torch

from ..constants import LOG0, NEG, SAFE_SPREAD
from .arc_scores import usable_arcs
from .matrix_tree_gth import _single_root_order


def _wide_columns(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[B]`` True where some word's usable, unmasked in-arc scores span more than
    :data:`SAFE_SPREAD`."""
    usable = usable_arcs(lengths, scores.shape[-1]) & (scores > NEG)
    s = scores.detach().double()
    top = torch.where(usable, s, -float("inf")).amax(1)
    low = torch.where(usable, s, float("inf")).amin(1)
    spread = torch.where(top > low, top - low, 0.0)  # [B, N+1]
    return spread.amax(1) > SAFE_SPREAD


def _log_weights(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """:func:`_weights` in log space, unscaled (``log W [B, R, N]``, :data:`LOG0` for no arc).

    Masked arcs (``<= NEG``) get a score low enough that every tree using one weighs less than
    ``e^-1000`` times the best tree without (for a sentence that has one), but not so low that
    the single-root elimination, whose intermediate pivots may consist of masked arcs only,
    cancels digits: ``n·lo - (n-1)·hi - 1000 - n log(n+1)`` with ``lo``/``hi`` the smallest and
    largest unmasked usable score of the sentence. No tree without a masked arc weighs less than
    ``exp(n·lo)``, and all trees with one together weigh less than ``exp(n·lo - 1000)``: a
    sentence has a tree without masked arcs if and only if its ``log Z`` exceeds ``n·lo - 500``
    (how the GPU path's kernel, :mod:`synattn.structs.triton_kernels.matrix_tree`, tells).
    """
    s = scores.double()
    batch, L, _ = s.shape
    N = L - 1
    valid = torch.arange(1, L, device=s.device) <= lengths.unsqueeze(-1)  # [B, N]
    into = usable_arcs(lengths, L)[:, :, 1:]  # [B, N+1, N]
    s = s[:, :, 1:]
    free = into & (s > NEG)
    hi = torch.where(free, s, -float("inf")).amax((1, 2)).clamp_min(0.0)
    lo = torch.where(free, s, float("inf")).amin((1, 2)).clamp_max(0.0)
    n = lengths.double()
    soft = n * lo - (n - 1) * hi - 1000.0 - n * torch.log(n + 1)
    w = torch.where(free, s, torch.where(into, soft[:, None, None], LOG0))
    root, words = w[:, 0], w[:, 1:]
    if multiroot:  # padded words: one unit arc from ROOT
        return torch.cat((words, torch.where(valid, root, 0.0).unsqueeze(1)), 1)
    order = _single_root_order(N, w.device)
    words = words[:, order][:, :, order]
    first = torch.where(valid[:, order], words[:, -1], 0.0).unsqueeze(1)  # unit arcs to padding
    return torch.cat((words[:, :-1], first, root[:, order].unsqueeze(1)), 1)


def _has_tree(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """``[B]`` True where some tree avoids every masked arc (``<= NEG``): every word is reachable
    from ROOT (multi-root), or from one word that ROOT may head, without ROOT (single root)."""
    L = scores.shape[-1]
    arcs = usable_arcs(lengths, L) & (scores > NEG)  # [B, L, L]
    words = torch.arange(L, device=scores.device) > 0
    valid = words & (torch.arange(L, device=scores.device) <= lengths.unsqueeze(-1))  # [B, L]
    graph = arcs if multiroot else arcs & words[:, None] & words  # single root: without ROOT
    reach = (graph | torch.eye(L, dtype=torch.bool, device=scores.device)).double()
    for _ in range(max(1, math.ceil(math.log2(L)))):  # transitive closure by squaring
        reach = (reach @ reach > 0).double()
    spans = ((reach > 0) | ~valid.unsqueeze(1)).all(-1)  # [B, L]: reaches every word
    if multiroot:
        return spans[:, 0]
    return (spans & arcs[:, 0] & valid).any(-1)


def _log_space_log_z(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """``log Z [B]`` by the GTH elimination of :func:`_factorize` with every weight kept as its
    logarithm: pivots and Schur updates are log-sums of non-negative terms, so nothing
    underflows at any scale. Out of place, differentiable to any order by autograd
    (``O(B·N³)`` memory under autograd)."""
    A = _log_weights(scores, lengths, multiroot)
    N = A.shape[-1]
    log_z = A.new_zeros(A.shape[0])
    for _ in range(N if multiroot else N - 1):
        end = A.shape[1] if multiroot else A.shape[1] - 1  # single root: not the replaced row
        pivot = torch.logsumexp(A[:, 1:end, 0], -1)
        log_z = log_z + pivot
        row = A[:, 0, 1:] - pivot.unsqueeze(-1)
        A = torch.logsumexp(torch.stack((A[:, 1:, 1:], A[:, 1:, :1] + row.unsqueeze(1))), 0)
    return log_z if multiroot else log_z + A[:, -1, 0]


def _log_space_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                         need_marginals: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log Z`` and (optionally) marginals, as autograd's gradient, by :func:`_log_space_log_z`."""
    with torch.enable_grad():
        x = scores.detach().double().requires_grad_(need_marginals)
        log_z = _log_space_log_z(x, lengths, multiroot)
        if not need_marginals:
            return log_z.detach(), None
        (mu,) = torch.autograd.grad(log_z.sum(), x)
    return log_z.detach(), mu


def _log_space_marginals_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                                 direction: torch.Tensor, compiled: bool = False) -> torch.Tensor:
    """The Hessian of :func:`_log_space_log_z` times ``direction`` (autograd's double backward)."""
    with torch.enable_grad():
        x = scores.detach().double().requires_grad_()
        (mu,) = torch.autograd.grad(_log_space_log_z(x, lengths, multiroot).sum(), x,
                                    create_graph=True)
        (hv,) = torch.autograd.grad(mu, x, direction.double())
    return hv
