"""Structured span attention: a head attends to the constituents that contain its query, under a
constituency tree CRF scored by that query (the structured-attention recipe of Kim, Denton, Hoang
and Rush 2017, with :class:`synattn.structs.TreeCRF` as the structure).

For query t of the chosen head and span (a, b) of the n keys (words a..b inclusive)::

    θ_t(a, b) = (q_t W_s k_aᵀ + q_t W_e k_bᵀ) / sqrt(d_k)          (start and end key features)
    μ_t(a, b) = p_t((a, b) ∈ T)                                    (CKY inside-outside)
    Z_t       = Σ_{a ≤ t ≤ b} μ_t(a, b)                            (expected number of spans ∋ t)
    w_t(k)    = (1/Z_t) Σ_{a ≤ min(t, k), b ≥ max(t, k)} μ_t(a, b) / (b − a + 1)
    c_t       = Σ_k w_t(k) v_k

``w_t`` is a distribution over the keys: the probability of word k when one draws a tree T with
probability ∝ p_t(T)·d_T(t) (d_T(t): the number of spans of T containing t, the word's own span
included), one of those d_T(t) spans uniformly and one word of it uniformly. Equivalently c_t is
the marginal-weighted mean over the spans containing t of the mean value inside each span. The
spans containing t always include the one-word span (t, t) and the whole sentence, each with
μ = 1, so Z_t >= 2 for n >= 2 and a one-word sentence attends to its word with weight 1.
Choices we made: W_s and W_e start at 0 (every bracketing equally likely); padding keys and
padded queries get zero weight; the layer replaces one head's distribution.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import bidirectional_keys, suffix_lengths, upcast
from synattn.structs import TreeCRF


def span_weights(marginals: Tensor, lengths: Tensor) -> Tensor:
    """``w_t(k)`` ``[batch_size, n, m]`` from per-query span marginals ``[batch_size, n, m, m]``.

    ``marginals[b, t, a, c]`` is ``p_t((a, c) ∈ T)`` for query ``t`` (0 outside each sentence of
    ``lengths [batch_size]`` keys); rows of queries ``t >= lengths[b]`` come out 0.
    """
    m = marginals.shape[-1]
    pos = torch.arange(m, device=marginals.device)
    t = pos[:, None, None]  # [n(t), m(a), m(c)] with n = m
    contains = (pos[None, :, None] <= t) & (t <= pos[None, None, :])  # a <= t <= c
    size = (pos[None, :] - pos[:, None] + 1).clamp_min(1).to(marginals.dtype)  # [m(a), m(c)]
    mu = marginals * contains  # [B, n, m, m]
    total = mu.sum((-1, -2))  # Z_t [B, n]
    pooled = (mu / size).cumsum(-2)  # [B, n, k, c]: Σ_{a <= k} μ(a, c) / |(a, c)|
    inside = pos[:, None] <= pos[None, :]  # k <= c
    w = (pooled * inside).sum(-1)  # [B, n, k]: Σ_{a <= k <= c}
    valid = pos[None, :] < lengths[:, None]  # [B, m]
    alive = valid[:, :, None] & valid[:, None, :] & (total > 0)[..., None]
    return torch.where(alive, w / total.clamp_min(torch.finfo(w.dtype).tiny)[..., None], 0.0)


class SpanAttention(AttentionFeature):
    """One head's attention becomes the marginal-weighted mean over the constituents containing
    each query, under a tree CRF over the keys scored by that query (formula in the module doc).

    Args:
        head_dim: d_k of the attention.
        head: the head whose distribution is replaced.

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> attn = MultiheadAttention(16, 4, features=[SpanAttention(4, head=1)])
        >>> out, extras = attn(torch.randn(2, 5, 16), need_weights=True)
        >>> torch.allclose(extras.probs[:, 1].sum(-1), torch.ones(2, 5))
        True
    """

    needs_probs = True
    cacheable = False
    bidirectional_only = True

    def __init__(self, head_dim: int, head: int = 0):
        super().__init__()
        self.head = head
        self.start = nn.Parameter(torch.zeros(head_dim, head_dim))  # W_s
        self.end = nn.Parameter(torch.zeros(head_dim, head_dim))  # W_e

    @property
    def replaced_heads(self) -> list[int]:
        return [self.head]

    def claims(self) -> list[Claim]:
        return [self.claim(self.replaced_heads)]

    def span_scores(self, q: Tensor, k: Tensor, scale: float) -> Tensor:
        """θ_t(a, b) ``[B, n, m, m]`` of one head's ``q [B, n, d_k]`` and ``k [B, m, d_k]``."""
        start = torch.matmul(torch.matmul(q, self.start.to(q.dtype)), k.transpose(-1, -2))
        end = torch.matmul(torch.matmul(q, self.end.to(q.dtype)), k.transpose(-1, -2))
        return (start[..., :, None] + end[..., None, :]) * scale  # [B, n, m, m]

    def weights(self, q: Tensor, k: Tensor, scale: float, lengths: Tensor) -> Tensor:
        """w_t(k) ``[batch_size, n, m]`` for one head's queries and keys and the key lengths."""
        b, n, _ = q.shape
        m = k.shape[1]
        theta = self.span_scores(q, k, scale).reshape(b * n, m, m)
        mu = self.span_marginals(theta, lengths.repeat_interleave(n)).view(b, n, m, m)
        return span_weights(mu, lengths)

    def span_marginals(self, scores: Tensor, lengths: Tensor) -> Tensor:
        """μ ``[K, m, m]`` of span scores ``[K, m, m]`` (a tree CRF per query), lengths ``[K]``."""
        return TreeCRF(scores, lengths).marginals

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        who = "span attention"
        b, _, n, _ = probs.shape
        lengths = suffix_lengths(bidirectional_keys(ctx, who), b, n, who).to(probs.device)
        q, k = upcast(ctx.q[:, self.head]), upcast(ctx.k[:, self.head])
        w = self.weights(q, k, ctx.scale, lengths)  # [B, n, n]
        return probs.index_copy(1, torch.tensor([self.head], device=probs.device),
                                w.unsqueeze(1).to(probs.dtype))
