"""Converters between synattn's score layouts and those of torch-struct 0.5 and supar 1.1.4.

Neither library is needed: these are tensor re-arrangements (tested against the libraries when
they are installed). Scores and marginals of the same structure share a layout, so every
``*_from_*`` function also converts the peers' marginals (for torch-struct's labelled spans use
:func:`span_marginals_from_torch_struct`, which sums the labels). Lengths are word (position)
counts in all three libraries.

- **dependency** -- ours ``[B, N+1, N+1]``, ``[b, h, d]`` for head ``h`` → dependent ``d``,
  ROOT = index 0. torch-struct (``DependencyCRF``, ``NonProjectiveDependencyCRF``):
  ``[B, N, N]``, ``[b, h-1, d-1]`` over the words with ROOT → ``d`` on the diagonal
  ``[b, d-1, d-1]``. supar (``DependencyCRF``, ``MatrixTree``): ``[B, N+1, N+1]``, ``[b, d, h]``
  (dependent first), ROOT = 0.
- **sibling (second-order)** -- ours ``[B, N+1, N+1, N+1]``, ``[b, h, s, m]`` for adjacent
  dependents ``s`` (inner) and ``m`` of head ``h``; supar (``Dependency2oCRF``, ``DependencyMFVI``,
  ``DependencyLBP``): ``s_sib[b, m, h, s]``.
- **linear chain** -- ours ``[B, n-1, C, C]``, ``[b, i, p, c]`` for ``y_i = p, y_{i+1} = c``, or
  ``unary [B, n, C]`` with ``transition [C, C]`` (``[p, c]``). torch-struct: ``[B, n-1, C, C]``,
  ``[b, i, c, p]`` (to, from). supar: ``scores [B, n, C]`` and ``trans [C+1, C+1]`` with start
  scores ``trans[C, :C]`` and end scores ``trans[:C, C]``.
- **constituency** -- ours ``[B, N, N]``, ``[b, i, j]`` for words ``i..j`` inclusive, ``i <= j``.
  torch-struct (``TreeCRF``): ``[B, N, N, NT]``, ``[b, i, j, label]`` (``log Z`` sums over the
  labels). supar (``ConstituencyCRF``): fenceposts ``[B, N+1, N+1]``, ``[b, i, j+1]``.
"""

from __future__ import annotations

import torch

# ---------------------------------------------------------------------------------------------
# Dependency CRFs.
# ---------------------------------------------------------------------------------------------


def arcs_to_torch_struct(scores: torch.Tensor) -> torch.Tensor:
    """``[B, N+1, N+1]`` arc scores ``[b, h, d]`` → torch-struct's ``[B, N, N]`` (ROOT arcs on
    the diagonal)."""
    out = scores[:, 1:, 1:].clone()
    out.diagonal(dim1=1, dim2=2).copy_(scores[:, 0, 1:])
    return out


def arcs_from_torch_struct(potentials: torch.Tensor) -> torch.Tensor:
    """torch-struct's ``[B, N, N]`` (scores or marginals) → ``[B, N+1, N+1]`` ``[b, h, d]``;
    entries no tree uses (arcs into ROOT, self-loops) are 0."""
    batch, N, _ = potentials.shape
    out = potentials.new_zeros(batch, N + 1, N + 1)
    out[:, 1:, 1:] = potentials
    out[:, 0, 1:] = potentials.diagonal(dim1=1, dim2=2)
    out[:, 1:, 1:].diagonal(dim1=1, dim2=2).zero_()
    return out


def arcs_to_supar(scores: torch.Tensor) -> torch.Tensor:
    """``[B, N+1, N+1]`` ``[b, h, d]`` → supar's ``[b, d, h]`` (same shape, ROOT = 0)."""
    return scores.transpose(1, 2).contiguous()


def arcs_from_supar(scores: torch.Tensor) -> torch.Tensor:
    """supar's ``[B, N+1, N+1]`` ``[b, d, h]`` (scores or marginals) → ``[b, h, d]``."""
    return scores.transpose(1, 2).contiguous()


def siblings_to_supar(siblings: torch.Tensor) -> torch.Tensor:
    """Sibling scores ``[B, N+1, N+1, N+1]`` ``[b, h, s, m]`` (head, inner sibling, dependent) →
    supar's ``Dependency2oCRF`` ``s_sib[b, m, h, s]`` (same shape, ROOT = 0)."""
    return siblings.permute(0, 3, 1, 2).contiguous()


def siblings_from_supar(s_sib: torch.Tensor) -> torch.Tensor:
    """supar's ``s_sib[b, m, h, s]`` (scores or marginals) → ``[b, h, s, m]``."""
    return s_sib.permute(0, 2, 3, 1).contiguous()


# ---------------------------------------------------------------------------------------------
# Linear chains.
# ---------------------------------------------------------------------------------------------


def chain_edge_potentials(unary: torch.Tensor, transition: torch.Tensor) -> torch.Tensor:
    """``unary [B, n, C]`` and ``transition [C, C]`` (or ``[B, C, C]``) → edge form
    ``[B, n-1, C, C]``: ``[b, i, p, c] = transition[p, c] + unary[b, i+1, c]``, plus
    ``unary[b, 0, p]`` at ``i = 0`` (needs ``n >= 2``)."""
    if unary.shape[1] < 2:
        raise ValueError("the edge form needs chains of at least 2 positions")
    trans = transition if transition.dim() == 3 else transition.unsqueeze(0)
    edge = trans.unsqueeze(1) + unary[:, 1:, None, :]  # [B, n-1, C(p), C(c)]
    first = edge[:, :1] + unary[:, :1, :, None]
    return torch.cat((first, edge[:, 1:]), 1)


def chain_to_torch_struct(log_potentials: torch.Tensor) -> torch.Tensor:
    """Edge form ``[B, n-1, C, C]`` ``[b, i, p, c]`` (from, to) → torch-struct's (to, from)."""
    return log_potentials.transpose(-1, -2).contiguous()


def chain_from_torch_struct(log_potentials: torch.Tensor) -> torch.Tensor:
    """torch-struct's ``[B, n-1, C, C]`` (to, from), scores or edge marginals → (from, to)."""
    return log_potentials.transpose(-1, -2).contiguous()


def chain_to_supar(unary: torch.Tensor,
                   transition: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``unary [B, n, C]``, ``transition [C, C]`` → supar's ``(scores [B, n, C], trans
    [C+1, C+1])`` with zero start and end transitions."""
    C = unary.shape[-1]
    trans = transition.new_zeros(C + 1, C + 1)
    trans[:C, :C] = transition
    return unary, trans


def chain_from_supar(scores: torch.Tensor, trans: torch.Tensor,
                     lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """supar's ``(scores [B, n, C], trans [C+1, C+1])`` → ``(unary [B, n, C], transition
    [C, C])``: the start scores ``trans[C, :C]`` join the first unary and the end scores
    ``trans[:C, C]`` the unary at each chain's last position ``lengths - 1`` (default ``n - 1``)."""
    batch, n, C = scores.shape
    if lengths is None:
        lengths = torch.full((batch,), n, dtype=torch.long, device=scores.device)
    last = torch.arange(n, device=scores.device) == (lengths.to(scores.device) - 1)[:, None]
    unary = scores + torch.where(last[..., None], trans[:C, C], 0.0)  # (-inf end scores stay)
    unary = torch.cat((unary[:, :1] + trans[C, :C], unary[:, 1:]), 1)
    return unary, trans[:C, :C].clone()


def semi_markov_to_torch_struct(log_potentials: torch.Tensor) -> torch.Tensor:
    """:class:`~synattn.structs.SemiMarkovCRF` potentials ``[B, n-1, K, C, C]`` ``[b, s, k, p, c]``
    (from, to) → torch-struct's ``SemiMarkovCRF`` ``[b, s, k, c, p]`` (to, from)."""
    return log_potentials.transpose(-1, -2).contiguous()


def semi_markov_from_torch_struct(log_potentials: torch.Tensor) -> torch.Tensor:
    """torch-struct's ``SemiMarkovCRF`` scores or marginals ``[B, n-1, K, C, C]`` (to, from) →
    (from, to). The compact labellings ``[B, n]`` are the same in both libraries."""
    return log_potentials.transpose(-1, -2).contiguous()


# ---------------------------------------------------------------------------------------------
# Constituency CRFs.
# ---------------------------------------------------------------------------------------------


def spans_to_torch_struct(scores: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` inclusive span scores → torch-struct's ``TreeCRF`` ``[B, N, N, 1]``."""
    return scores.unsqueeze(-1).contiguous()


def spans_from_torch_struct(potentials: torch.Tensor) -> torch.Tensor:
    """torch-struct's labelled span scores ``[B, N, N, NT]`` → ``[B, N, N]``: the labels'
    log-sum-exp, which gives the same ``log Z`` (a tree's labels are independent given it)."""
    return torch.logsumexp(potentials, -1)


def span_marginals_from_torch_struct(marginals: torch.Tensor) -> torch.Tensor:
    """torch-struct's ``[B, N, N, NT]`` span-label marginals → span marginals ``[B, N, N]``."""
    return marginals.sum(-1)


def spans_to_supar(scores: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` ``[b, i, j]`` (words ``i..j``) → supar's fenceposts ``[B, N+1, N+1]``
    ``[b, i, j+1]``; entries that are not spans (``i >= j+1``) are 0."""
    batch, N, _ = scores.shape
    out = scores.new_zeros(batch, N + 1, N + 1)
    upper = torch.ones(N, N, dtype=torch.bool, device=scores.device).triu()
    out[:, :N, 1:] = torch.where(upper, scores, 0.0)
    return out


def spans_from_supar(scores: torch.Tensor) -> torch.Tensor:
    """supar's fencepost ``[B, N+1, N+1]`` (scores or marginals) → ``[B, N, N]``, 0 below the
    diagonal."""
    N = scores.shape[-1] - 1
    upper = torch.ones(N, N, dtype=torch.bool, device=scores.device).triu()
    return torch.where(upper, scores[:, :N, 1:], 0.0)


def span_pairs_to_supar(pairs: torch.Tensor) -> torch.Tensor:
    """Span-pair scores ``[B, N, N, N]`` ``[b, i, j, k]`` (spans ``i..j`` and ``i..k``) → supar's
    ``ConstituencyMFVI`` fenceposts ``s_pair[b, i, j+1, k+1]`` ``[B, N+1, N+1, N+1]``; entries
    that are not two spans are 0."""
    batch, N = pairs.shape[:2]
    out = pairs.new_zeros(batch, N + 1, N + 1, N + 1)
    upper = torch.ones(N, N, dtype=torch.bool, device=pairs.device).triu()
    out[:, :N, 1:, 1:] = torch.where(upper.unsqueeze(2) & upper.unsqueeze(1), pairs, 0.0)
    return out


def span_pairs_from_supar(s_pair: torch.Tensor) -> torch.Tensor:
    """supar's fencepost ``s_pair[b, i, j, k]`` → ``[B, N, N, N]`` ``[b, i, j-1, k-1]``, 0 where
    ``i..j-1`` or ``i..k-1`` is not a span."""
    N = s_pair.shape[-1] - 1
    upper = torch.ones(N, N, dtype=torch.bool, device=s_pair.device).triu()
    return torch.where(upper.unsqueeze(2) & upper.unsqueeze(1), s_pair[:, :N, 1:, 1:], 0.0)
