"""The attention function that ``transformers`` models call when ``config._attn_implementation``
is ``"synattn"`` (registered in ``transformers.AttentionInterface`` and, for the masks, in
``transformers.AttentionMaskInterface`` with the ``sdpa`` mask builder).

``transformers`` calls it as ``fn(module, query, key, value, attention_mask, dropout=...,
scaling=..., **kwargs)`` with ``query [B, H, n, d_k]``, ``key``/``value [B, H_kv, m, d_k]`` (after
the model's own position encodings and cache update), a boolean ``attention_mask
[B, 1, n, m]`` (True: may attend) or None (no padding; causal when ``module.is_causal``), and the
keyword arguments the model's ``forward`` received, passed down through its layers. It returns
``(output [B, n, H, d_k], attention probabilities or None)``.

A module without synattn features goes straight to ``transformers``' own ``sdpa`` function, so a
model whose features are all off computes exactly what the plain model computes. A module with
features runs the steps of :class:`synattn.attention.MultiheadAttention` (see
``synattn/attention/feature.py``) on the model's own queries, keys and values: the weights of the
model are used as they are and keep their names.

The state of one forward pass (the batch's syntax, the auxiliary losses, the hidden states that
some features read, what features hand from one layer to the next) travels as one keyword
argument, ``synattn_call`` (:class:`SynattnCall`), set
by a forward pre-hook of the model from the ``syntax_*`` inputs of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from synattn.attention.core import attend_features, check_compatible
from synattn.attention.feature import AttentionContext, AttentionExtras, AttentionFeature
from synattn.attention.masks import attention_mask as build_mask
from synattn.hf.features import Site
from synattn.methods.bird_eye import BirdEyeReweighting
from synattn.syntax.inputs import SyntaxInputs

IMPLEMENTATION = "synattn"
"""Name of the attention implementation in ``transformers.AttentionInterface``."""

SITE_ATTRIBUTE = "_synattn_site"
"""Plain (non-module) attribute of an HF attention module pointing to its :class:`SiteAttention`."""


@dataclass
class SynattnCall:
    """What one forward pass of a model with synattn features carries and collects.

    Attributes:
        syntax: the batch's syntax by side (``"encoder"``, ``"decoder"``); cross-attention reads
            the decoder's.
        losses: auxiliary losses by ``"<site>.<name>"`` (``"encoder_1.parse"``), each already
            multiplied by its weight λ.
        head_log_probs: ``[batch_size, n, m]`` log-distributions of the supervised heads, by
            ``"<site>.<name>"``.
        hidden: the input hidden states of the attention modules whose features read them.
        need_weights: the model was asked for its attention probabilities
            (``output_attentions``; some models do not pass that flag down to the attention).
        carry: by side, what the features of this forward hand from one layer to the next
            (``AttentionContext.carry``; the Tree Transformer's a-values).
    """

    syntax: dict[str, SyntaxInputs] = field(default_factory=dict)
    losses: dict[str, Tensor] = field(default_factory=dict)
    head_log_probs: dict[str, Tensor] = field(default_factory=dict)
    hidden: dict[str, Tensor] = field(default_factory=dict)
    need_weights: bool = False
    carry: dict[str, dict[str, Any]] = field(default_factory=dict)


class SiteAttention(nn.Module):
    """The synattn features of one attention module of an HF model, and how they attend.

    It runs :func:`synattn.attention.attend_features`, the steps of
    :class:`~synattn.attention.MultiheadAttention` between its projections (the same code, so
    both compute the same thing), on the model's queries, keys and values; this module has no
    projections of its own.

    Args:
        site: where the module is (side, layer, heads, sizes).
        features: the features, applied in order.
        reads_hidden: some feature reads the attention's input hidden states.
    """

    def __init__(self, site: Site, features: Sequence[AttentionFeature], reads_hidden: bool):
        super().__init__()
        check_compatible(features)
        self.site = site
        self.features = nn.ModuleList(features)
        self.reads_hidden = reads_hidden

    def _features(self) -> Sequence[AttentionFeature]:
        return cast(Sequence[AttentionFeature], self.features)  # (an nn.ModuleList of them)

    def check(self, is_self: bool, causal: bool, query_start: int) -> None:
        """Raises ``ValueError`` when a feature cannot run in this call."""
        for feature in self._features():
            name = type(feature).__name__
            if feature.self_attention_only and not is_self:
                raise ValueError(f"{name} at {self.site.key} is a self-attention feature")
            if feature.causal_only and not causal:
                raise ValueError(f"{name} at {self.site.key} needs causal self-attention")
            if query_start > 0 and not cacheable(feature):
                raise ValueError(f"{name} at {self.site.key} does not support a key/value cache "
                                 "(incremental decoding); generate with use_cache=False "
                                 "(synattn.hf.generate does so)")

    def attend(self, module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
               mask: Tensor | None, dropout: float, scaling: float | None,
               kwargs: dict[str, Any]) -> tuple[Tensor, Tensor | None]:
        """Runs the features on the model's ``query``/``key``/``value``; returns HF's pair."""
        call = kwargs.get("synattn_call") or SynattnCall()
        b, h, n, d_k = query.shape
        if key.shape[1] != h:  # grouped-query attention
            key, value = repeat_kv(key, h // key.shape[1]), repeat_kv(value, h // value.shape[1])
        m = key.shape[2]
        side = self.site.side
        is_self, causal = side != "cross", side == "decoder"
        query_start = m - n if is_self else 0
        self.check(is_self, causal, query_start)
        allowed, extra = _allowed(mask, causal, n, m, query_start, query.device)
        position_bias = kwargs.get("position_bias")  # T5's relative position bias
        if position_bias is not None:
            extra = position_bias if extra is None else extra + position_bias
        x = call.hidden.get(self.site.key)
        if self.reads_hidden and x is None:
            raise ValueError(f"features at {self.site.key} read the hidden states, but the model "
                             "was called without synattn's forward hooks (call the model itself)")
        syntax = _expand(call.syntax.get("decoder" if side == "cross" else side), b)
        ctx = AttentionContext(q=query, k=key, v=value, x=x, allowed=allowed,
                               query_start=query_start,
                               scale=d_k ** -0.5 if scaling is None else scaling, syntax=syntax,
                               is_self=is_self, extras=AttentionExtras(), mask_bias=extra,
                               carry=call.carry.setdefault(side, {}))
        need_weights = bool(kwargs.get("output_attentions", False)) or call.need_weights
        mixed = attend_features(self._features(), ctx, dropout=dropout if module.training else 0.0,
                                need_weights=need_weights,
                                plain_causal=causal and mask is None and query_start == 0)
        for name, loss in ctx.extras.losses.items():
            call.losses[f"{self.site.key}.{name}"] = loss
        for name, log_probs in ctx.extras.head_log_probs.items():
            call.head_log_probs[f"{self.site.key}.{name}"] = log_probs
        return mixed.transpose(1, 2).contiguous().to(query.dtype), ctx.extras.probs  # [B, n, H, d_k]


def cacheable(feature: AttentionFeature) -> bool:
    """Whether ``feature`` works in a ``transformers`` model's incremental decoding.

    BET(SF) keeps the levels of past positions in synattn's own ``KVCache.extra``, which the
    ``transformers`` cache does not carry, so it needs the whole sequence at every step here.
    """
    return feature.cacheable and not isinstance(feature, BirdEyeReweighting)


def _expand(syntax: SyntaxInputs | None, batch_size: int) -> SyntaxInputs | None:
    """Repeats each row of ``syntax`` when the batch was expanded for generation
    (``num_beams``, ``num_return_sequences``: ``transformers`` repeats each example in place)."""
    if syntax is None or syntax.batch_size in (None, batch_size) or batch_size % syntax.batch_size:
        return syntax
    rows = torch.arange(syntax.batch_size).repeat_interleave(batch_size // syntax.batch_size)
    return syntax.index_select(rows.to(next(iter(syntax.present().values())).device))


def _allowed(mask: Tensor | None, causal: bool, n: int, m: int, query_start: int,
             device: torch.device) -> tuple[Tensor | None, Tensor | None]:
    """(positive mask ``[B | 1, 1, n, m]`` or None, additive float mask or None) of HF's mask."""
    if mask is None:
        return build_mask(None, causal and n > 1, n, m, query_start, device), None
    if mask.dtype == torch.bool:
        return mask, None
    allowed = mask > torch.finfo(mask.dtype).min / 2  # an additive float mask
    return allowed, mask.masked_fill(~allowed, 0.0)


def synattn_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                      attention_mask: Tensor | None, dropout: float = 0.0,
                      scaling: float | None = None, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
    """The ``"synattn"`` attention function (signature of ``transformers.AttentionInterface``)."""
    site = module.__dict__.get(SITE_ATTRIBUTE)
    if site is not None and len(site.features) > 0:
        return site.attend(module, query, key, value, attention_mask, dropout, scaling, kwargs)
    call = kwargs.get("synattn_call")
    if kwargs.get("output_attentions", False) or (call is not None and call.need_weights):
        return _plain_with_weights(module, query, key, value, attention_mask, dropout, scaling,
                                   kwargs.get("position_bias"))
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, **kwargs)


def _plain_with_weights(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                        mask: Tensor | None, dropout: float, scaling: float | None,
                        position_bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """Plain attention that also returns its probabilities (``output_attentions=True``)."""
    h, n, m = query.shape[1], query.shape[2], key.shape[2]
    if key.shape[1] != h:
        key, value = repeat_kv(key, h // key.shape[1]), repeat_kv(value, h // value.shape[1])
    causal = bool(getattr(module, "is_causal", False))
    allowed, extra = _allowed(mask, causal, n, m, m - n if causal else 0, query.device)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    logits = torch.matmul(query, key.transpose(-1, -2)) * scale  # [B, H, n, m]
    for term in (extra, position_bias):
        if term is not None:
            logits = logits + term
    if allowed is not None:
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    dropped = nn.functional.dropout(probs, dropout, training=module.training and dropout > 0)
    return torch.matmul(dropped, value).transpose(1, 2).contiguous(), probs  # [B, n, H, d_k]


AttentionInterface.register(IMPLEMENTATION, synattn_attention)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
