"""Structured syntactic attention in one encoder layer (Kim, Denton, Hoang, Rush 2017, sec. 3.2;
docs/methods.md §5): soft parents (and children) from a dependency CRF.

Settings::

    syntactic_attention: {layer: 1, head: 0, children_head: null, tree: projective,
                          multiroot: false, arc_dim: 64}

**Syntactic attention** (:class:`SyntacticAttention`, self-attention). Arc scores θ_{ij} (head i
→ dependent j, i = 0 the ROOT, a learned vector prepended to the layer input) come from a small
biaffine scorer over ReLU projections of the layer input (Dozat & Manning 2017 style)::

    h_i = relu(W_h x_i + b_h)     d_j = relu(W_d x_j + b_d)      θ_ij = h_i U d_jᵀ + u · h_i

The arc marginals p(i → j) come from the projective dependency CRF (Eisner inside-outside;
single- or multi-root) or the non-projective one (Matrix-Tree theorem). The chosen head's
attention becomes the soft parent: query j attends to key i with weight p(i → j) (the ROOT has no
key, so a row sums to 1 − p(ROOT → j)); optionally a second head attends to the soft children,
weight p(j → i). Choices we made: U and u start at 0 (every tree equally likely); padding gets
zero weight in both directions. ``tree="projective2o"`` takes the marginals of the second-order
projective CRF instead (arcs and adjacent siblings, McDonald and Pereira 2006), with sibling scores
from a trilinear :class:`SiblingScorer` over the same input.

**Sibling scores** (:class:`SiblingScorer`). With ``tree="projective2o"`` the arc marginals
come from the second-order projective CRF (:class:`synattn.structs.Dependency2oCRF`; McDonald and
Pereira 2006, Zhang et al. 2020), which scores a tree by its arcs and by every pair of adjacent
dependents ``s`` (inner) and ``m`` of a head ``h`` on the same side. The arcs come from the
biaffine :class:`ArcScorer`; the sibling scores from three ReLU projections of the layer input
(ROOT a learned vector prepended, as for the arcs) combined by a diagonal trilinear form, Zhang et
al.'s (2020) triaffine scorer with a diagonal core::

    a_h = relu(W_a x_h + b_a)   b_s = relu(W_b x_s + b_b)   c_m = relu(W_c x_m + b_c)
    θ(h, s, m) = Σ_k w_k a_hk b_sk c_mk

Choice we made: ``w`` starts at 0, so a fresh layer has no sibling scores and its marginals are
the first-order CRF's (tested).

The layer needs gradients through the marginals; :mod:`synattn.structs` provides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import bidirectional_keys, suffix_lengths, upcast
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, check_head, check_layer, register
from synattn.structs import Dependency2oCRF, DependencyCRF, NonProjectiveDependencyCRF

TREE_KINDS = ("projective", "nonprojective", "projective2o")
"""The dependency CRFs of syntactic attention: Eisner, Matrix-Tree, second-order Eisner."""


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


class ArcScorer(nn.Module):
    """Biaffine arc scores over ReLU projections, with a learned ROOT vector prepended.

    Args:
        d_model: width d of the input.
        arc_dim: width of the head/dependent projections.

    Example:
        >>> ArcScorer(16, 8)(torch.randn(2, 5, 16)).shape
        torch.Size([2, 6, 6])
    """

    def __init__(self, d_model: int, arc_dim: int = 64):
        super().__init__()
        self.root = nn.Parameter(torch.randn(d_model) / d_model ** 0.5)
        self.head = nn.Linear(d_model, arc_dim)
        self.dependent = nn.Linear(d_model, arc_dim)
        self.bilinear = nn.Parameter(torch.zeros(arc_dim, arc_dim))  # U
        self.head_bias = nn.Parameter(torch.zeros(arc_dim))  # u

    def forward(self, x: Tensor) -> Tensor:
        """Returns ``scores [batch_size, n + 1, n + 1]``, ``scores[b, i, j]`` = θ(i → j), 0 = ROOT."""
        b, _, d = x.shape
        x = torch.cat([self.root.to(x.dtype).expand(b, 1, d), x], dim=1)  # [B, n+1, d]
        heads = torch.relu(self.head(x))  # [B, n+1, a]
        deps = torch.relu(self.dependent(x))  # [B, n+1, a]
        scores = torch.matmul(torch.matmul(heads, self.bilinear.to(x.dtype)), deps.transpose(1, 2))
        return scores + torch.matmul(heads, self.head_bias.to(x.dtype))[:, :, None]  # [B, n+1, n+1]


class SyntacticAttention(AttentionFeature):
    """A head attends to each word's soft parent under a dependency CRF (and one to its children).

    Args:
        d_model: model width d (input of the arc scorer).
        head: the head whose attention becomes the soft parent p(i → j).
        children_head: a head whose attention becomes the soft children p(j → i) (None: none).
        tree: ``"projective"`` (Eisner), ``"nonprojective"`` (Matrix-Tree) or ``"projective2o"``
            (second-order Eisner with adjacent-sibling scores from a
            :class:`SiblingScorer` of width ``arc_dim``).
        multiroot: allow several words to hang from ROOT.
        arc_dim: width of the scorer's projections.

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> attn = MultiheadAttention(16, 4, features=[SyntacticAttention(16, head=0)])
        >>> out, extras = attn(torch.randn(2, 5, 16), need_weights=True)
        >>> extras.probs.shape
        torch.Size([2, 4, 5, 5])
    """

    needs_probs = True
    cacheable = False
    bidirectional_only = True
    reads_hidden = True

    def __init__(self, d_model: int, head: int = 0, children_head: int | None = None,
                 tree: str = "projective", multiroot: bool = False, arc_dim: int = 64):
        super().__init__()
        if tree not in TREE_KINDS:
            raise ValueError(f"unknown dependency tree kind {tree!r}; use one of {TREE_KINDS}")
        if children_head is not None and children_head == head:
            raise ValueError(f"the parent head and the children head are both head {head}")
        self.head, self.children_head = head, children_head
        self.tree, self.multiroot = tree, multiroot
        self.scorer = ArcScorer(d_model, arc_dim)
        self.siblings = SiblingScorer(d_model, arc_dim) if tree == "projective2o" else None

    @property
    def replaced_heads(self) -> list[int]:
        """The heads whose distribution this feature replaces."""
        return [self.head] + ([] if self.children_head is None else [self.children_head])

    def claims(self) -> list[Claim]:
        return [self.claim(self.replaced_heads)]

    def arc_marginals(self, scores: Tensor, lengths: Tensor, siblings: Tensor | None = None) -> Tensor:
        """p(i → j) ``[batch_size, n + 1, n + 1]`` of arc scores of the same shape (0 = ROOT) and,
        for ``tree="projective2o"``, sibling scores ``[batch_size, n + 1, n + 1, n + 1]``."""
        if self.tree == "projective2o":
            assert siblings is not None  # (scored for this tree)
            return Dependency2oCRF(scores, siblings, lengths, multiroot=self.multiroot).marginals
        crf = DependencyCRF if self.tree == "projective" else NonProjectiveDependencyCRF
        return crf(scores, lengths, multiroot=self.multiroot).marginals

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        who = "syntactic attention"
        b, _, n, _ = probs.shape
        lengths = suffix_lengths(bidirectional_keys(ctx, who), b, n, who).to(probs.device)
        assert ctx.x is not None  # (reads_hidden: the attention passes its input)
        scores = self.scorer(upcast(ctx.x))  # [B, n+1, n+1]
        siblings = None if self.siblings is None else self.siblings(upcast(ctx.x))  # [B, n+1, n+1, n+1]
        arcs = self.arc_marginals(scores, lengths, siblings)[:, 1:, 1:]  # [B, n, n] (head i, dependent j)
        valid = torch.arange(n, device=probs.device)[None, :] < lengths[:, None]  # [B, n]
        pairs = valid[:, :, None] & valid[:, None, :]  # [B, n, n]
        parents = arcs.transpose(1, 2) * pairs  # [B, n, n] row j: p(i → j)
        heads, rows = [self.head], [parents]
        if self.children_head is not None:
            heads.append(self.children_head)
            rows.append(arcs * pairs)  # row j: p(j → i)
        index = torch.tensor(heads, device=probs.device)
        return probs.index_copy(1, index, torch.stack(rows, dim=1).to(probs.dtype))  # [B, H, n, n]


@dataclass
class SyntacticAttentionConfig:
    """Structured syntactic attention in one encoder layer (Kim et al. 2017; docs/methods.md §5).

    Attributes:
        layer: 0-based layer index.
        head: the head that attends to each position's soft parent.
        children_head: a head that attends to the soft children (None: none).
        tree: ``projective`` (Eisner inside-outside), ``nonprojective`` (Matrix-Tree) or
            ``projective2o`` (second-order Eisner: arcs and adjacent siblings; McDonald and
            Pereira 2006).
        multiroot: allow several words under ROOT.
        arc_dim: width of the arc scorer's head/dependent projections.
    """

    layer: int = 0
    head: int = 0
    children_head: int | None = None
    tree: str = "projective"
    multiroot: bool = False
    arc_dim: int = 64


@register
class SyntacticAttentionMethod(Method):
    """One encoder layer's soft-parent (and soft-children) heads."""

    name = "syntactic_attention"
    config = SyntacticAttentionConfig
    sides = ("encoder",)
    order = 50  # replaces its heads after the constituent prior: they stay the soft parent/children

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return (f"{side}.syntactic_attention is set, but syntactic attention needs bidirectional "
                f"self-attention and the {side} is causal; use it in an encoder")

    @staticmethod
    def _claimed(syn: SyntacticAttentionConfig) -> list[int]:
        return [syn.head] + ([] if syn.children_head is None else [syn.children_head])

    def validate(self, model: Any, side: str, stack: Any) -> None:
        syn = stack.syntactic_attention
        if syn is None:
            return
        where = f"{side}.syntactic_attention"
        check_layer(syn.layer, f"{where}.layer", side, stack.layers)
        if syn.tree not in TREE_KINDS:
            raise ConfigError(f"{where}.tree={syn.tree!r}: use one of {', '.join(TREE_KINDS)}")
        if syn.arc_dim < 1:
            raise ConfigError(f"{where}.arc_dim={syn.arc_dim} must be at least 1")
        for name, head in zip(("head", "children_head"), self._claimed(syn)):
            check_head(head, f"{where}.{name}", model.heads)
        if syn.children_head == syn.head:
            raise ConfigError(f"{where}.head={syn.head} and {where}.children_head={syn.children_head} "
                              "are the same head")

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        syn = stack.syntactic_attention
        claimed = self._claimed(syn)
        return [Claim(f"{side}.syntactic_attention (layer {syn.layer}, heads {claimed})", tuple(claimed),
                      frozenset({syn.layer}))]

    def applies(self, stack: Any, layer: int) -> bool:
        return layer == stack.syntactic_attention.layer

    def feature(self, site: Site, settings: SyntacticAttentionConfig) -> AttentionFeature:
        return SyntacticAttention(site.d_model, settings.head, settings.children_head, settings.tree,
                                  settings.multiroot, settings.arc_dim)
