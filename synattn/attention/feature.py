"""The plug-in interface of :class:`~synattn.attention.core.MultiheadAttention`.

One attention call runs these steps; a feature takes part by overriding the hooks it needs
(every hook's default leaves the computation unchanged)::

    q, k, v = projections of x (and of the context for cross-attention)
    q, k    = feature.queries_keys(ctx)          # replaced queries/keys (specialized heads)
    logits  = q kᵀ / sqrt(d_k) + Σ feature.logit_bias(ctx)     # additive biases (relative keys)
    probs   = softmax(mask(logits))
    probs[h]= feature.head_distribution(ctx)     # one head's own distribution (supervised head)
    probs   = feature.adjust_probs(probs, ctx)   # multiplicative priors, replaced distributions
    out     = dropout(probs) v + Σ feature.value_term(dropout(probs), ctx)   # relative values

When no active feature needs the probabilities themselves (``needs_probs`` False: only replaced
queries/keys, additive biases and per-head distributions) and the caller does not ask for them,
the call runs on ``torch.nn.functional.scaled_dot_product_attention`` with the biases as its
float mask; otherwise it runs the explicit path above. Both give the same result.

Auxiliary losses (already multiplied by their weight, ready to be summed into the training loss)
and diagnostic distributions are written into ``ctx.extras``. A feature that keeps state across
decoding steps stores it in ``ctx.cache.extra`` (reordered with the cache by beam search). A
feature that hands values from one layer to the next within one forward pass (the Tree
Transformer's a-values) keeps them in ``ctx.carry``, a dict the caller creates for each forward
and passes to every layer: no feature keeps per-forward state on itself.

A feature declares what it takes of its layer in ``claims()`` (the heads it replaces or trains, a
slot a layer has one of, the direction it needs: :class:`synattn.attention.claims.Claim`);
``MultiheadAttention`` checks every pair when it is built, by the rule model configs use too
(:func:`synattn.attention.claims.find_conflict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from synattn.attention.cache import KVCache
from synattn.attention.claims import Claim
from synattn.syntax.inputs import SyntaxInputs


@dataclass
class AttentionExtras:
    """What an attention call returns besides its output.

    Attributes:
        losses: auxiliary losses by name, each a scalar already scaled by its weight (λ).
        probs: ``[batch_size, heads, n, m]`` attention probabilities (before dropout), only when
            the call was made with ``need_weights=True``; fully masked rows are zero.
        head_log_probs: ``[batch_size, n, m]`` log-distributions of supervised heads by name
            (for attachment scores); masked entries hold a very negative finite value.
    """

    losses: dict[str, Tensor] = field(default_factory=dict)
    probs: Tensor | None = None
    head_log_probs: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class AttentionContext:
    """The state of one attention call, as the features see it.

    Attributes:
        q: ``[batch_size, heads, n, d_k]`` queries (after ``queries_keys``).
        k: ``[batch_size, heads, m, d_k]`` keys (including cached keys).
        v: ``[batch_size, heads, m, d_k]`` values (including cached values).
        x: ``[batch_size, n, d_model]`` the input of the queries (None in a Hugging Face model's
            attention when no feature of the site reads it: ``reads_hidden``).
        allowed: ``[batch_size | 1, 1, n, m]`` bool, True where query i may attend key j
            (None: every pair allowed).
        query_start: absolute position of the first query (the cache length in incremental
            decoding, else 0); key j is at absolute position j.
        scale: ``1 / sqrt(d_k)``.
        syntax: the batch's syntax fields (None when the batch has none).
        is_self: True for self-attention, False for cross-attention.
        extras: where features write losses and diagnostics.
        cache: the layer's key/value cache in incremental decoding (None otherwise); features
            keep their own per-position state in ``cache.extra``.
        mask_bias: ``[batch_size | 1, heads | 1, n, m]`` the caller's additive float mask
            (``attn_mask``), added to the logits with the features' biases (None: none).
        carry: what the features of one forward pass hand from one layer to the next, by key;
            the same dict for every layer of that forward (a call on its own gets a fresh one).
    """

    q: Tensor
    k: Tensor
    v: Tensor
    x: Tensor | None
    allowed: Tensor | None
    query_start: int
    scale: float
    syntax: SyntaxInputs | None
    is_self: bool
    extras: AttentionExtras
    cache: KVCache | None = None
    mask_bias: Tensor | None = None
    carry: dict[str, Any] = field(default_factory=dict)

    @property
    def query_length(self) -> int:
        return self.q.shape[2]

    @property
    def key_length(self) -> int:
        return self.k.shape[2]


class AttentionFeature(nn.Module):
    """Base class of the features that plug into :class:`MultiheadAttention`.

    Class attributes:
        needs_probs: True when the feature overrides ``adjust_probs`` or ``value_term`` (it needs
            the probabilities, so the call cannot use the fused kernel).
        self_attention_only: True when the feature is defined for self-attention only.
        cacheable: True when the feature works in incremental decoding (with a key/value cache).
        causal_only: True when the feature is defined for causal self-attention only.
        bidirectional_only: True when the feature is defined for bidirectional self-attention
            only (its call raises on a causal mask).
        reads_hidden: True when the feature reads ``ctx.x``, the attention's input hidden states
            (a Hugging Face site captures them only for such features).
    """

    needs_probs: bool = False
    self_attention_only: bool = True
    cacheable: bool = True
    causal_only: bool = False
    bidirectional_only: bool = False
    reads_hidden: bool = False

    def claims(self) -> list[Claim]:
        """What the feature takes of its layer (default: :meth:`claim` with no heads or slot)."""
        return [self.claim()]

    def claim(self, heads: tuple[int, ...] | list[int] = (), **what) -> Claim:
        """A :class:`Claim` named after the feature's class, with the direction it needs
        (``causal_only`` / ``bidirectional_only``); ``what``: ``slot`` or ``alone``."""
        direction = "causal" if self.causal_only else "bidirectional" if self.bidirectional_only else None
        return Claim(type(self).__name__, tuple(int(h) for h in heads), direction=direction, **what)

    def queries_keys(self, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """Returns replaced ``(q, k)``, same shapes as ``ctx.q`` and ``ctx.k``."""
        return ctx.q, ctx.k

    def logit_bias(self, ctx: AttentionContext) -> Tensor | None:
        """Returns an additive logit bias ``[batch_size | 1, heads | 1, n, m]`` or None."""
        return None

    def head_distribution(self, ctx: AttentionContext) -> tuple[int, Tensor] | None:
        """Returns ``(head, probs [batch_size, n, m])``: a head whose distribution is replaced."""
        return None

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        """Returns adjusted probabilities ``[batch_size, heads, n, m]`` (needs ``needs_probs``)."""
        return probs

    def value_term(self, probs: Tensor, ctx: AttentionContext) -> Tensor | None:
        """Returns a term ``[batch_size, heads, n, d_k]`` added to ``probs @ v`` or None."""
        return None
