"""Structured encoder-decoder attention: segmentation attention (Kim, Denton, Hoang, Rush 2017,
sec. 3.1; docs/methods.md §5), its sigmoid baseline, or its semi-Markov version over labelled
segments (docs/methods_structured.md), in every layer of a translation decoder or in the layers
listed.

Settings (flat keys of a stack config)::

    cross_attention: segmentation     # or sigmoid, or segments; null: softmax
    cross_attention_layers: null      # the decoder layers that get it (null: every layer)
    cross_attention_normalize: false  # the public code's 2 p_i / Σ_j p_j (segmentation, sigmoid)
    cross_attention_max_segment: 4    # segments: the longest segment, in source pieces

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

**Segments** (:class:`SpanSegmentationAttention`, ``cross_attention: segments``): the semi-Markov
version of segmentation attention over labelled spans (docs/methods_structured.md), on
:class:`synattn.structs.SemiMarkovCRF` (Sarawagi and Cohen 2004).
For every query q (decoder state) and head, the source positions ``0..m-1`` are cut into
contiguous segments of ``1..max_length`` positions, each labelled *selected* (1) or *not* (0).
A labelled segmentation scores the sum over its segments ``[a, b]`` with label ``c`` after a
segment labelled ``p`` of

    c · Σ_{i=a..b} θ_i  +  T[p, c]  +  ℓ[b - a + 1, c]

with ``θ_i = q · k_i / sqrt(d_k)`` (the head's scaled dot product, as the chain version), a 2 × 2
transition table ``T`` per head (from → to; none before the first segment) and a
per-head length score ``ℓ [max_length + 1, 2]``. The attention weight of query q on source
position j is

    p(j lies inside a segment labelled 1 | x, q) = Σ_{segments [a, b] ∋ j} p([a, b] labelled 1)

from the semi-Markov CRF's segment marginals (forward-backward), so the context is
``Σ_j p_j v_j``; the weights do not sum to 1. Choices we made: ``T`` and ``ℓ`` start at 0, and
with ``max_length = 1`` (one-position segments only) the layer is the linear-chain segmentation
attention with the same table (tested). The semi-Markov layout needs a position 0 before the
segments (torch-struct's convention): a dummy position labelled 0 stands before the source.

Both need gradients through the marginals; :mod:`synattn.structs` provides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import padding_keys, suffix_lengths, upcast
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, check_layers, register
from synattn.structs import LinearChainCRF, SemiMarkovCRF

SEGMENTATION_MODES = ("structured", "sigmoid")
"""The modes of :class:`SegmentationAttention`: the chain CRF, or the sigmoid baseline."""


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


def key_scores(probs: Tensor, ctx: AttentionContext, who: str) -> tuple[Tensor, Tensor, Tensor]:
    """What both segmentation features read of a cross-attention call: each sentence's number of
    keys ``[B]`` (padding must be a suffix; ``who`` names the feature in the error), the valid keys
    ``[B, m]`` and the scaled query-key scores ``[B, H, n, m]`` in float32 or wider."""
    b, _, _, m = probs.shape
    lengths = suffix_lengths(padding_keys(ctx.allowed, who), b, m, who).to(probs.device)
    valid = torch.arange(m, device=probs.device)[None, :] < lengths[:, None]
    scores = upcast(torch.matmul(ctx.q, ctx.k.transpose(-1, -2))) * ctx.scale
    return lengths, valid, scores


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
        lengths, valid, scores = key_scores(probs, ctx, "segmentation attention")
        if self.mode == "sigmoid":
            weights = torch.sigmoid(scores)
        else:
            weights = self.marginals(scores, lengths)
        weights = weights * valid[:, None, None, :]  # [B, H, n, m]
        if self.normalize:
            weights = 2.0 * weights / weights.sum(-1, keepdim=True).clamp(min=torch.finfo(weights.dtype).tiny)
        return weights.to(probs.dtype)


def segment_potentials(unary: Tensor, transition: Tensor, length_scores: Tensor) -> Tensor:
    """Semi-Markov log-potentials ``[chains, m, K, 2, 2]`` (``K = max_length + 1``) of binary
    segmentations of ``m`` positions behind a dummy position 0 labelled 0.

    Args:
        unary: ``[chains, m]`` θ_i (the score of position i when selected).
        transition: ``[chains, 2, 2]`` T[p, c].
        length_scores: ``[chains, K, 2]`` ℓ[k, c] (row 0 unused).
    """
    chains, m = unary.shape
    K = length_scores.shape[1]
    prefix = torch.cat((unary.new_zeros(chains, 1), unary.cumsum(-1)), -1)  # [chains, m+1]
    s = torch.arange(m, device=unary.device)[:, None]
    k = torch.arange(K, device=unary.device)[None, :]
    end = (s + k).clamp(max=m)  # [m, K] (segments past the end are never used)
    inside = prefix[:, end] - prefix[:, s.expand(m, K)]  # [chains, m, K]: Σ θ over s..s+k-1
    labels = torch.stack((torch.zeros_like(inside), inside), -1)  # [chains, m, K, 2(c)]
    own = (labels + length_scores[:, None]).unsqueeze(-2)  # [chains, m, K, 1, 2]
    # the first segment follows the dummy, labelled 0, with no transition score
    first = torch.tensor([0.0, -float("inf")], dtype=own.dtype, device=own.device)[:, None]
    return torch.cat((own[:, :1] + first, own[:, 1:] + transition[:, None, None]), 1)


def selected_marginals(unary: Tensor, transition: Tensor, length_scores: Tensor,
                       lengths: Tensor) -> Tensor:
    """``[chains, m]`` p(position j inside a segment labelled 1), 0 beyond each length.

    Args as :func:`segment_potentials`; ``lengths [chains]`` in ``1..m``.
    """
    m = unary.shape[1]
    edge = segment_potentials(unary, transition, length_scores)
    mu = SemiMarkovCRF(edge, lengths + 1).marginals  # [chains, m, K, 2, 2]
    chosen = mu[..., 1].sum(-1)  # [chains, m(s), K]: segment s+1..s+k (source s..s+k-1) selected
    out = torch.zeros_like(unary)
    for k in range(1, chosen.shape[-1]):
        for offset in range(k):  # position j = s + offset is inside the segment (s, k)
            out = out + nn.functional.pad(chosen[:, :m - offset, k], (offset, 0))
    return out


class SpanSegmentationAttention(AttentionFeature):
    """Every head's attention becomes p(position inside a selected segment) of a semi-Markov CRF
    per query (see the module).

    Args:
        heads: number of heads H (one transition table and length score per head).
        max_length: the longest segment, in positions (``>= 1``).

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> attn = MultiheadAttention(16, 4, features=[SpanSegmentationAttention(4, 3)])
        >>> out, extras = attn(torch.randn(2, 3, 16), context=torch.randn(2, 5, 16), need_weights=True)
        >>> extras.probs.shape, bool(((extras.probs >= 0) & (extras.probs <= 1)).all())
        (torch.Size([2, 4, 3, 5]), True)
    """

    needs_probs = True
    self_attention_only = False

    def __init__(self, heads: int, max_length: int = 4):
        super().__init__()
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"span segmentation attention: max_length must be a whole number "
                             f">= 1, got {max_length!r}")
        self.max_length = max_length
        self.transition = nn.Parameter(torch.zeros(heads, 2, 2))
        self.length_scores = nn.Parameter(torch.zeros(heads, max_length + 1, 2))

    def claims(self) -> list[Claim]:
        return [self.claim(alone=True)]  # it replaces every head's distribution

    def marginals(self, unary: Tensor, lengths: Tensor) -> Tensor:
        """``[batch_size, heads, n, m]`` weights of unary scores ``[batch_size, heads, n, m]``."""
        b, h, n, m = unary.shape
        dtype = unary.dtype
        transition = self.transition.to(dtype)[None, :, None].expand(b, h, n, 2, 2)
        length = self.length_scores.to(dtype)[None, :, None].expand(b, h, n, -1, 2)
        chains = lengths.to(unary.device)[:, None, None].expand(b, h, n).reshape(-1)
        p = selected_marginals(unary.reshape(-1, m), transition.reshape(-1, 2, 2),
                               length.reshape(b * h * n, -1, 2), chains)
        return p.view(b, h, n, m)

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        lengths, valid, scores = key_scores(probs, ctx, "span segmentation attention")
        weights = self.marginals(scores, lengths) * valid[:, None, None, :]
        return weights.to(probs.dtype)


CROSS_ATTENTION = ("segmentation", "sigmoid", "segments")
"""Structured encoder-decoder attention (docs/methods.md §5): the chain CRF, its sigmoid baseline,
or the semi-Markov CRF over labelled segments."""

MAX_SEGMENT = 4
"""The default of ``cross_attention_max_segment`` (the longest segment, in source pieces), defined once."""


def cross_attention_features(site: Site, settings: Any) -> list[AttentionFeature]:
    """The features of ``cross_attention`` at ``site`` from ``settings`` (a stack config, or a
    :class:`CrossAttentionConfig`): one :class:`SegmentationAttention` or
    :class:`SpanSegmentationAttention` over all heads."""
    if settings.cross_attention == "segments":
        return [SpanSegmentationAttention(site.heads, settings.cross_attention_max_segment)]
    mode = "structured" if settings.cross_attention == "segmentation" else "sigmoid"
    return [SegmentationAttention(site.heads, mode, settings.cross_attention_normalize)]


@dataclass
class CrossAttentionConfig:
    """Structured encoder-decoder attention (docs/methods.md §5): flat keys of a stack config.

    Attributes:
        cross_attention: ``segmentation`` (binary chain CRF), ``sigmoid`` or ``segments``
            (semi-Markov CRF over labelled segments); None: softmax.
        cross_attention_layers: the decoder layers whose cross-attention it is (None: every
            layer; the others keep softmax), as ``relation_layers`` chooses the relations' layers.
        cross_attention_normalize: rescale the weights to 2 p_i / Σ_j p_j (the public SAN code;
            segmentation and sigmoid); off by default, as in the paper.
        cross_attention_max_segment: the longest segment, in source pieces (segments).
    """

    cross_attention: str | None = None
    cross_attention_normalize: bool = False
    cross_attention_max_segment: int = MAX_SEGMENT
    cross_attention_layers: list[int] | None = None


@register
class CrossAttention(Method):
    """Segmentation (or sigmoid) attention on a translation decoder's cross-attention."""

    name = "cross_attention"
    config = CrossAttentionConfig
    flat = True
    sides = ("cross",)
    order = 0

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return (f"{side}.cross_attention={stack.cross_attention!r}, but the {side} of this {model.model_type} "
                "model has no cross-attention (only a translation decoder attends to the source)")

    def validate(self, model: Any, side: str, stack: Any) -> None:
        kind = stack.cross_attention
        if kind is not None and kind not in CROSS_ATTENTION:
            raise ConfigError(f"{side}.cross_attention={kind!r}: use one of {', '.join(CROSS_ATTENTION)} "
                              "(or null for softmax attention)")
        if stack.cross_attention_normalize and kind not in ("segmentation", "sigmoid"):
            raise ConfigError(f"{side}.cross_attention_normalize=true, but {side}.cross_attention is "
                              + ("not set" if kind is None else f"{kind!r}")
                              + " (normalize applies to segmentation or sigmoid)")
        if stack.cross_attention_layers is not None and kind is None:
            raise ConfigError(f"{side}.cross_attention_layers is set, but {side}.cross_attention is not set")
        check_layers(stack.cross_attention_layers, f"{side}.cross_attention_layers", side, stack.layers)
        if stack.cross_attention_max_segment < 1:
            raise ConfigError(f"{side}.cross_attention_max_segment={stack.cross_attention_max_segment}: "
                              "the longest segment must be >= 1 source piece")

    def cross_features(self, model: Any, stack: Any, site: Site) -> list[AttentionFeature]:
        if stack.cross_attention is None or (stack.cross_attention_layers is not None
                                             and site.layer not in stack.cross_attention_layers):
            return []
        return cross_attention_features(site, stack)
