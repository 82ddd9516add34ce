"""Multi-head attention whose features compose (Vaswani et al. 2017, §3.2).

The plain layer is scaled dot-product attention over H heads. Features (relative positions, tree
relations, specialized heads, supervised heads, ...) plug in through the hooks of
:class:`~synattn.attention.feature.AttentionFeature`; see that module for the order of the steps
and for when the fused kernel (``scaled_dot_product_attention``) is used instead of the explicit
path. Both paths give the same result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention.cache import KVCache
from synattn.attention.claims import find_conflict
from synattn.attention.feature import AttentionContext, AttentionExtras, AttentionFeature
from synattn.attention.masks import alive_rows, attention_mask, fill_masked, upcast
from synattn.syntax.inputs import SyntaxInputs


class MultiheadAttention(nn.Module):
    """Self- or cross-attention with padding/causal masks, dropout, cache and features.

    Args:
        d_model: model width d.
        heads: number of heads H (``d_model % heads == 0``; d_k = d / H).
        dropout: dropout on the attention probabilities.
        features: the attention features of this layer, applied in order.
        bias: whether the four projections have biases.

    Example:
        >>> attn = MultiheadAttention(16, 4)
        >>> out, extras = attn(torch.randn(2, 5, 16), causal=True)
        >>> out.shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0,
                 features: Sequence[AttentionFeature] = (), bias: bool = True):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        check_compatible(features)
        for feature in features:  # tables built for another head width fail at the first matmul otherwise
            width = getattr(feature, "head_dim", None)
            if isinstance(width, int) and width != self.head_dim:
                raise ValueError(f"{type(feature).__name__} was built for heads of width {width}, but this "
                                 f"attention's heads are {self.head_dim} wide (d_model {d_model} / {heads} heads)")
        self.features = nn.ModuleList(features)

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # [B, H, t, d_k]

    def forward(self, x: Tensor, context: Tensor | None = None, *,
                key_padding_mask: Tensor | None = None, causal: bool = False,
                syntax: SyntaxInputs | None = None, cache: KVCache | None = None,
                need_weights: bool = False, attn_mask: Tensor | None = None,
                carry: dict | None = None) -> tuple[Tensor, AttentionExtras]:
        """Attends from ``x`` to itself (``context`` None) or to ``context``.

        Args:
            x: ``[batch_size, n, d_model]`` queries' input.
            context: ``[batch_size, m, d_model]`` keys' and values' input for cross-attention.
            key_padding_mask: ``[batch_size, m]`` bool, True at padding keys; with a
                self-attention cache it covers the cached keys too.
            causal: forbid attending to later positions (decoder self-attention).
            syntax: the batch's syntax fields, for the features that read them.
            cache: key/value cache; self-attention appends to it, cross-attention fills it once.
            need_weights: return the attention probabilities in the extras (explicit path).
            attn_mask: a further mask in ``torch.nn.MultiheadAttention``'s convention, ``[n, m]``
                or ``[batch_size * heads, n, m]``: bool, True where attending is **not** allowed,
                or float, added to the logits (``-inf`` entries count as not allowed).
            carry: the dict of this forward pass that the features hand from layer to layer
                (pass the same one to every layer of the forward; None: a fresh one).

        Returns:
            ``(out [batch_size, n, d_model], AttentionExtras)``. A query whose keys are all masked
            attends to nothing: its probabilities are zero and its output is the output
            projection's bias.
        """
        is_self = context is None
        for feature in self.features:
            if feature.self_attention_only and not is_self:
                raise ValueError(f"{type(feature).__name__} is a self-attention feature")
            if feature.causal_only and not causal:
                raise ValueError(f"{type(feature).__name__} needs causal self-attention (causal=True)")
            if cache is not None and not feature.cacheable:
                raise ValueError(f"{type(feature).__name__} does not support a key/value cache")
        q = self._split(self.q_proj(x))  # [B, H, n, d_k]
        query_start = cache.length if (cache is not None and is_self) else 0
        if cache is not None and cache.static and cache.key is not None and cache.value is not None:
            k, v = cache.key, cache.value
        else:
            source = x if is_self else context
            k, v = self._split(self.k_proj(source)), self._split(self.v_proj(source))  # [B, H, m, d_k]
            if cache is not None:
                cache.static = not is_self
                k, v = cache.append(k, v)
        allowed = attention_mask(key_padding_mask, causal, q.shape[2], k.shape[2], query_start,
                                 x.device)
        mask_bias = None
        if attn_mask is not None:
            allowed, mask_bias = merge_attn_mask(allowed, attn_mask, q.shape[0], self.heads, q.shape[2],
                                                 k.shape[2], bool(self.features))
        ctx = AttentionContext(q=q, k=k, v=v, x=x, allowed=allowed, query_start=query_start,
                               scale=1.0 / math.sqrt(self.head_dim), syntax=syntax,
                               is_self=is_self, extras=AttentionExtras(), cache=cache, mask_bias=mask_bias,
                               carry={} if carry is None else carry)
        plain_causal = causal and key_padding_mask is None and attn_mask is None and query_start == 0
        dropout = self.dropout if self.training else 0.0
        features = cast(Sequence[AttentionFeature], self.features)  # (an nn.ModuleList of them)
        mixed = attend_features(features, ctx, dropout=dropout, need_weights=need_weights,
                                plain_causal=plain_causal)
        b, _, n, _ = mixed.shape
        out = self.out_proj(mixed.transpose(1, 2).reshape(b, n, self.d_model))  # [B, n, d]
        return out, ctx.extras


def attend_features(features: Sequence[AttentionFeature], ctx: AttentionContext, *,
                    dropout: float = 0.0, need_weights: bool = False,
                    plain_causal: bool = False) -> Tensor:
    """Runs the attention steps of ``features`` (``feature.py``) on a prepared context.

    This is :class:`MultiheadAttention` between its projections: queries, keys and values (and the
    mask, syntax, cache) are in ``ctx``; the result is the mixed values ``[B, H, n, d_k]``, before
    the output projection. Other modules that own their projections (``synattn.hf``) call it too.

    Args:
        features: the features of the layer, applied in order (checked by :func:`check_compatible`).
        ctx: the call's state; ``ctx.q``/``ctx.k`` are replaced by the features' ``queries_keys``,
            ``ctx.mask_bias`` (an additive float mask) is added to the logits, losses and
            (``need_weights``) probabilities are written into ``ctx.extras``.
        dropout: dropout probability on the attention probabilities (0 in evaluation).
        need_weights: materialise the probabilities into ``ctx.extras.probs`` (explicit path).
        plain_causal: the only mask is the causal one and queries start at 0 (lets the fused
            kernel use ``is_causal``).

    Example:
        >>> q = k = v = torch.randn(1, 2, 3, 4)
        >>> ctx = AttentionContext(q=q, k=k, v=v, x=torch.randn(1, 3, 8), allowed=None,
        ...                        query_start=0, scale=0.5, syntax=None, is_self=True,
        ...                        extras=AttentionExtras())
        >>> attend_features([], ctx).shape
        torch.Size([1, 2, 3, 4])
    """
    for feature in features:
        ctx.q, ctx.k = feature.queries_keys(ctx)
    if need_weights or any(f.needs_probs for f in features):
        return _explicit(features, ctx, need_weights, dropout)
    return _fused(features, ctx, plain_causal, dropout)


def _bias(features: Sequence[AttentionFeature], ctx: AttentionContext) -> Tensor | None:
    bias = ctx.mask_bias
    for feature in features:
        term = feature.logit_bias(ctx)
        if term is not None:
            bias = term if bias is None else bias + term
    return bias


def _explicit(features: Sequence[AttentionFeature], ctx: AttentionContext, need_weights: bool,
              dropout: float, bias: Tensor | None = None) -> Tensor:
    """Materialises the probabilities; returns the mixed values ``[B, H, n, d_k]``.

    ``bias``: the features' logit bias if already computed (else it is computed here).
    """
    logits = upcast(torch.matmul(ctx.q * ctx.scale, ctx.k.transpose(-1, -2)))  # [B, H, n, m]
    bias = _bias(features, ctx) if bias is None else bias
    if bias is not None:
        logits = logits.add_(bias)  # in place: fresh tensor, nothing saved it for backward
    if ctx.allowed is not None:
        logits = logits.masked_fill_(~ctx.allowed, torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)  # [B, H, n, m]
    for feature in features:
        override = feature.head_distribution(ctx)
        if override is not None:
            head, head_probs = override
            probs = probs.index_copy(1, torch.tensor([head], device=probs.device),
                                     head_probs[:, None].to(probs.dtype))
    for feature in features:
        probs = feature.adjust_probs(probs, ctx)
    probs = _zero_dead_rows(probs, ctx.allowed)
    if need_weights:
        ctx.extras.probs = probs
    dropped = _dropout(probs, dropout).to(ctx.v.dtype)
    mixed = torch.matmul(dropped, ctx.v)  # [B, H, n, d_k]
    for feature in features:
        term = feature.value_term(dropped, ctx)
        if term is not None:
            mixed = mixed + term.to(mixed.dtype)
    return mixed


def _fused(features: Sequence[AttentionFeature], ctx: AttentionContext, plain_causal: bool,
           dropout: float) -> Tensor:
    """Runs ``scaled_dot_product_attention``; returns the mixed values ``[B, H, n, d_k]``."""
    bias = _bias(features, ctx)
    if bias is not None and bias.requires_grad and bias.device.type == "cpu":
        # SDPA with a mask that needs a gradient takes its unfused path, which on CPU is
        # slower than the explicit one (measured: benchmarks/bench_attention.py)
        return _explicit(features, ctx, False, dropout, bias)
    plain_causal = plain_causal and bias is None  # no dead rows: each query sees itself
    if plain_causal:
        mixed = F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, dropout_p=dropout,
                                               is_causal=True, scale=ctx.scale)
    else:
        mask = None
        if bias is not None:
            mask = fill_masked(bias.to(ctx.q.dtype), ctx.allowed)  # [B | 1, H | 1, n, m]
        elif ctx.allowed is not None:
            mask = fill_masked(ctx.q.new_zeros(ctx.allowed.shape), ctx.allowed)  # [B | 1, 1, n, m]
        mixed = F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask,
                                               dropout_p=dropout, scale=ctx.scale)
    for feature in features:
        override = feature.head_distribution(ctx)
        if override is not None:
            head, head_probs = override
            head_probs = _dropout(head_probs, dropout)
            head_mixed = torch.matmul(head_probs.to(ctx.v.dtype), ctx.v[:, head])  # [B, n, d_k]
            mixed = mixed.index_copy(1, torch.tensor([head], device=mixed.device),
                                     head_mixed[:, None].to(mixed.dtype))
    return mixed if plain_causal else _zero_dead_rows(mixed, ctx.allowed)


def _dropout(probs: Tensor, p: float) -> Tensor:
    return probs if p == 0.0 else F.dropout(probs, p, training=True)


def check_compatible(features: Sequence[AttentionFeature]) -> None:
    """Raises ``ValueError`` naming both features when two of them cannot share a layer, by the
    rule of :func:`synattn.attention.claims.find_conflict` on their ``claims()``.

    Example:
        >>> from synattn.attention.span import SpanAttention
        >>> check_compatible([SpanAttention(4, head=0), SpanAttention(4, head=0)])
        Traceback (most recent call last):
        ...
        ValueError: SpanAttention and SpanAttention cannot share a layer: both claim head 0
    """
    message = find_conflict([feature.claims() for feature in features])
    if message:
        raise ValueError(message)


def merge_attn_mask(allowed: Tensor | None, attn_mask: Tensor, batch_size: int, heads: int, n: int, m: int,
                    has_features: bool) -> tuple[Tensor | None, Tensor | None]:
    """Joins an ``attn_mask`` of ``torch.nn.MultiheadAttention`` (``[n, m]`` or ``[B * H, n, m]``;
    bool True = not allowed, or additive float) to the positive mask ``allowed``.

    Returns:
        ``(allowed, bias)``: the joined positive mask and the finite additive part (or None).
    """
    if attn_mask.dim() == 2:
        mask = attn_mask[None, None]  # [1, 1, n, m]
    elif attn_mask.dim() == 3 and attn_mask.shape[0] == batch_size * heads:
        if has_features:
            raise ValueError("a per-head attn_mask [batch_size * heads, n, m] cannot be combined with "
                             "attention features (they read one mask per sentence); give [n, m]")
        mask = attn_mask.view(batch_size, heads, *attn_mask.shape[1:])
    else:
        raise ValueError(f"attn_mask has shape {tuple(attn_mask.shape)}; expected ({n}, {m}) or "
                         f"({batch_size * heads}, {n}, {m})")
    if mask.shape[-2:] != (n, m):
        raise ValueError(f"attn_mask covers {tuple(mask.shape[-2:])} query/key pairs, the attention has ({n}, {m})")
    bias = None
    if mask.dtype == torch.bool:
        blocked = mask
    else:
        blocked = torch.isneginf(mask)
        bias = mask.masked_fill(blocked, 0.0)
    if not bool(blocked.any()):
        return allowed, bias
    return (~blocked if allowed is None else allowed & ~blocked), bias


def _zero_dead_rows(x: Tensor, allowed: Tensor | None) -> Tensor:
    """Zeroes the rows ``[..., n, :]`` of ``x`` whose keys are all masked (skipped when none is)."""
    alive = alive_rows(allowed)  # [B | 1, 1, n, 1]
    if alive is None or bool(alive.all()):
        return x
    return x * alive
