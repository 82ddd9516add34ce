"""Structured attention: segmentation and syntactic attention (Kim, Denton, Hoang, Rush
2017; docs/methods.md §5), on the dynamic programs of :mod:`synattn.structs`.

**Segmentation attention** (:class:`SegmentationAttention`, encoder-decoder attention). For every
query q (decoder state) and head, a binary variable z_i per source position i forms a linear-chain
CRF with unary θ_i(1) = x_i W q — the head's bilinear score q · k_i / sqrt(d_k) — θ_i(0) = 0, and a
learned 2 × 2 pairwise table b_{z_{i−1} z_i} per head. The attention weights are the marginals
p(z_i = 1 | x, q) (forward-backward), so the context is Σ_i p(z_i = 1) v_i: every position is
selected independently of the others' weights, and contiguous segments are favoured by the
pairwise terms. All B · H · n chains (one per batch row, head and query) run as one batch of the
chain CRF (``synattn.structs.LinearChainCRF`` in unary + transition form, whose marginals
backpropagate in the signed log-space semifield, as in Kim et al. 2017, appendix), of the source lengths.
Options: ``normalize`` (the public code's 2 p_i / Σ_j p_j; off by default, per the paper) and
``mode="sigmoid"``, the sigmoid-attention baseline p_i = σ(θ_i(1)), the same model without
pairwise terms. Choice we made: the pairwise table starts at 0, so a fresh layer equals the
sigmoid baseline.

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
from a trilinear :class:`~synattn.attention.sibling_scores.SiblingScorer` over the same input.

Both layers need gradients through the marginals; :mod:`synattn.structs` provides them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import bidirectional_keys, padding_keys, upcast
from synattn.attention.sibling_scores import SiblingScorer
from synattn.structs import Dependency2oCRF, DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF

SEGMENTATION_MODES = ("structured", "sigmoid")
TREE_KINDS = ("projective", "nonprojective", "projective2o")


def suffix_lengths(keys: Tensor | None, batch_size: int, key_length: int, who: str) -> Tensor:
    """Sequence lengths ``[batch_size]`` from the valid keys ``[batch_size | 1, m]`` (None: all).

    Raises:
        ValueError: the padding is not a suffix of every sequence.
    """
    if keys is None:
        return torch.full((batch_size,), key_length, dtype=torch.long)
    keys = keys.expand(batch_size, key_length)  # [B, m]
    lengths = keys.sum(-1)  # [B]
    suffix = torch.arange(key_length, device=keys.device)[None, :] < lengths[:, None]
    if not torch.equal(keys, suffix):
        raise ValueError(f"{who} needs the padding at the end of each sequence")
    return lengths


def chain_marginals(unary: Tensor, pairwise: Tensor, lengths: Tensor, crf: type | None = None
                    ) -> Tensor:
    """p(z_i = 1) of binary linear-chain CRFs with unary θ_i(1) = ``unary``, θ_i(0) = 0.

    Args:
        unary: ``[chains, m]`` θ_i(1).
        pairwise: ``[chains, 2, 2]`` b_{z_{i−1}, z_i} (from → to).
        lengths: ``[chains]`` chain lengths (≥ 1).
        crf: the chain CRF class, called as ``crf(unary=[chains, m, 2], transition=[chains, 2, 2],
            lengths=lengths)`` with node marginals ``.marginals [chains, m, 2]`` (default
            ``synattn.structs.LinearChainCRF``).

    Returns:
        ``[chains, m]`` marginals, 0 beyond each length.
    """
    crf = LinearChainCRF if crf is None else crf
    scores = torch.stack([torch.zeros_like(unary), unary], dim=-1)  # [K, m, 2] θ_i(z_i)
    return crf(unary=scores, transition=pairwise, lengths=lengths).marginals[..., 1]  # [K, m]


class SegmentationAttention(AttentionFeature):
    """Every head's attention becomes the marginals of a binary linear-chain CRF per query.

    Args:
        heads: number of heads H of the attention (one pairwise table per head).
        mode: ``"structured"`` (the CRF) or ``"sigmoid"`` (the baseline, no pairwise terms).
        normalize: rescale the weights to 2 p_i / Σ_j p_j (the public code), off by default.

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> attn = MultiheadAttention(16, 4, features=[SegmentationAttention(4, "sigmoid")])
        >>> out, extras = attn(torch.randn(2, 3, 16), context=torch.randn(2, 5, 16), need_weights=True)
        >>> bool((extras.probs.sum(-1) > 1).any())  # not a distribution
        True
    """

    needs_probs = True
    self_attention_only = False
    chain_crf: type | None = None  # None: synattn.structs.LinearChainCRF

    def __init__(self, heads: int, mode: str = "structured", normalize: bool = False):
        super().__init__()
        if mode not in SEGMENTATION_MODES:
            raise ValueError(f"unknown segmentation attention mode {mode!r}; use one of {SEGMENTATION_MODES}")
        self.mode, self.normalize = mode, normalize
        self.pairwise = nn.Parameter(torch.zeros(heads, 2, 2)) if mode == "structured" else None

    def claims(self) -> list[Claim]:
        return [self.claim(alone=True)]  # it replaces every head's distribution, logit biases included

    def marginals(self, unary: Tensor, lengths: Tensor) -> Tensor:
        """p(z_i = 1) ``[batch_size, heads, n, m]`` of unary scores ``[batch_size, heads, n, m]``."""
        b, h, n, m = unary.shape
        assert self.pairwise is not None  # (mode "structured")
        pairwise = self.pairwise.to(unary.dtype)[None, :, None].expand(b, h, n, 2, 2)  # [B, H, n, 2, 2]
        chains = lengths.to(unary.device)[:, None, None].expand(b, h, n).reshape(-1)  # [B·H·n]
        p = chain_marginals(unary.reshape(-1, m), pairwise.reshape(-1, 2, 2), chains, self.chain_crf)
        return p.view(b, h, n, m)

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        b, h, n, m = probs.shape
        who = "segmentation attention"
        lengths = suffix_lengths(padding_keys(ctx.allowed, who), b, m, who).to(probs.device)
        valid = torch.arange(m, device=probs.device)[None, :] < lengths[:, None]  # [B, m]
        scores = upcast(torch.matmul(ctx.q, ctx.k.transpose(-1, -2))) * ctx.scale  # [B, H, n, m]
        if self.mode == "sigmoid":
            weights = torch.sigmoid(scores)
        else:
            weights = self.marginals(scores, lengths)
        weights = weights * valid[:, None, None, :]  # [B, H, n, m]
        if self.normalize:
            weights = 2.0 * weights / weights.sum(-1, keepdim=True).clamp(min=torch.finfo(weights.dtype).tiny)
        return weights.to(probs.dtype)


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
            :class:`~synattn.attention.sibling_scores.SiblingScorer` of width ``arc_dim``).
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
