"""Sibling scores for second-order syntactic attention: a trilinear scorer over the layer input.

For :class:`~synattn.attention.structured.SyntacticAttention` with ``tree="projective2o"`` the
arc marginals come from the second-order projective CRF
(:class:`synattn.structs.Dependency2oCRF`; McDonald and Pereira 2006, Zhang et al. 2020), which
scores a tree by its arcs and by every pair of adjacent dependents ``s`` (inner) and ``m`` of a
head ``h`` on the same side. The arcs come from the biaffine :class:`ArcScorer`; the sibling
scores from three ReLU projections of the layer input (ROOT a learned vector prepended, as for
the arcs) combined by a diagonal trilinear form, Zhang et al.'s (2020) triaffine scorer with a
diagonal core::

    a_h = relu(W_a x_h + b_a)   b_s = relu(W_b x_s + b_b)   c_m = relu(W_c x_m + b_c)
    θ(h, s, m) = Σ_k w_k a_hk b_sk c_mk

Choice we made: ``w`` starts at 0, so a fresh layer has no sibling scores and its marginals are
the first-order CRF's (tested).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SiblingScorer(nn.Module):
    """Sibling scores ``[batch_size, n+1, n+1, n+1]``, ``[b, h, s, m]``, 0 = ROOT.

    Args:
        d_model: width d of the input.
        dim: width of the three projections.

    Example:
        >>> SiblingScorer(16, 8)(torch.randn(2, 5, 16)).shape
        torch.Size([2, 6, 6, 6])
    """

    def __init__(self, d_model: int, dim: int = 64):
        super().__init__()
        self.root = nn.Parameter(torch.randn(d_model) / d_model ** 0.5)
        self.project = nn.Linear(d_model, 3 * dim)  # [a; b; c]
        self.weight = nn.Parameter(torch.zeros(dim))  # w

    def forward(self, x: Tensor) -> Tensor:
        """``x [batch_size, n, d]`` → ``θ [batch_size, n+1, n+1, n+1]``."""
        b, _, d = x.shape
        x = torch.cat([self.root.to(x.dtype).expand(b, 1, d), x], dim=1)  # [B, n+1, d]
        head, sibling, dependent = torch.relu(self.project(x)).chunk(3, dim=-1)  # [B, n+1, k] each
        return torch.einsum("bhk,bsk,bmk->bhsm", head * self.weight.to(x.dtype), sibling, dependent)
