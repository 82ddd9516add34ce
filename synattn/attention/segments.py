"""Segmentation attention over labelled spans: the semi-Markov version of Kim et al. (2017)'s
segmentation attention (docs/methods_structured.md), on :class:`synattn.structs.SemiMarkovCRF`
(Sarawagi and Cohen 2004).

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
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import padding_keys, upcast
from synattn.attention.structured import suffix_lengths
from synattn.structs import SemiMarkovCRF


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
        b, h, n, m = probs.shape
        who = "span segmentation attention"
        lengths = suffix_lengths(padding_keys(ctx.allowed, who), b, m, who).to(probs.device)
        valid = torch.arange(m, device=probs.device)[None, :] < lengths[:, None]  # [B, m]
        scores = upcast(torch.matmul(ctx.q, ctx.k.transpose(-1, -2))) * ctx.scale  # [B, H, n, m]
        weights = self.marginals(scores, lengths) * valid[:, None, None, :]
        return weights.to(probs.dtype)
