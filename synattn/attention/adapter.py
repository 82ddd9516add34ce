"""A drop-in replacement for ``torch.nn.MultiheadAttention`` with synattn's attention features.

:class:`SyntaxMultiheadAttention` takes ``torch.nn.MultiheadAttention``'s constructor and call
signature (``query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
is_causal``; ``batch_first``), so it can replace the attention of ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer`` or someone else's model. Syntax inputs (tree-distance labels, POS
tags, head targets, ...) do not travel through those models' call signatures: bind them for a
forward pass with :func:`bind_syntax` (``TreeRelations``: :mod:`synattn.methods.relations`)::

    layer = nn.TransformerEncoderLayer(16, 2, batch_first=True)
    layer.self_attn = SyntaxMultiheadAttention.from_torch(
        layer.self_attn, features=[TreeRelations("tree_dist", num_labels=10, head_dim=8)])
    with bind_syntax(SyntaxInputs(tree_dist=labels)):
        out = layer(x)

The layers called inside one :func:`bind_syntax` block also share that block's carry (what the
features of a forward hand from one layer to the next, e.g. the constituent prior's a-values): run
one forward pass per block when a stack has such layers.

With no features and copied weights it computes what ``torch.nn.MultiheadAttention`` computes
(tested). The features' losses and diagnostics of the last call are in :attr:`last_extras`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from synattn.attention.core import MultiheadAttention
from synattn.attention.feature import AttentionExtras, AttentionFeature
from synattn.syntax.inputs import SyntaxInputs

_BOUND: contextvars.ContextVar[dict | None] = contextvars.ContextVar("synattn_bound_syntax", default=None)
_CARRY: contextvars.ContextVar[dict | None] = contextvars.ContextVar("synattn_bound_carry", default=None)


@contextmanager
def bind_syntax(syntax: SyntaxInputs | None, *modules: nn.Module) -> Iterator[None]:
    """Binds ``syntax`` for the forward passes run inside the ``with`` block.

    Args:
        syntax: the batch's syntax fields (batch-first, ``[batch_size, n, n]`` labels etc.).
        modules: bind them to the :class:`SyntaxMultiheadAttention` layers inside these modules
            only (e.g. an encoder, when a decoder has other inputs); none: to every such layer.
            Bindings nest: an inner block wins for the layers it names.

    The block also gives the layers called inside it one fresh carry (see the module docstring).
    """
    current = dict(_BOUND.get() or {})
    if modules:
        for module in modules:
            for layer in module.modules():
                if isinstance(layer, SyntaxMultiheadAttention):
                    current[id(layer)] = syntax
    else:
        current[None] = syntax
    token, carry_token = _BOUND.set(current), _CARRY.set({})
    try:
        yield
    finally:
        _CARRY.reset(carry_token)
        _BOUND.reset(token)


def _is_causal_mask(mask: Tensor) -> bool:
    """Whether a 2-D ``attn_mask`` blocks exactly the keys after each query."""
    n, m = mask.shape
    if n != m:
        return False
    future = torch.ones(n, m, dtype=torch.bool, device=mask.device).triu(1)
    blocked = mask if mask.dtype == torch.bool else torch.isneginf(mask)
    return bool((blocked == future).all()) and (mask.dtype == torch.bool or bool((mask[~future] == 0).all()))


class SyntaxMultiheadAttention(nn.Module):
    """``torch.nn.MultiheadAttention``'s interface over :class:`MultiheadAttention` and features.

    Args:
        embed_dim, num_heads, dropout, bias, batch_first: as ``torch.nn.MultiheadAttention``
            (``kdim``/``vdim`` other than ``embed_dim`` and ``add_bias_kv``/``add_zero_attn`` are
            not supported).
        features: synattn attention features of this layer (see :mod:`synattn.attention`).

    Causal features (Bird-Eye) see ``is_causal=True`` or a causal ``attn_mask`` as causal
    attention. Per-head masks ``[batch_size * heads, n, m]`` work without features only.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, features: Sequence[AttentionFeature] = ()):
        super().__init__()
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.attention = MultiheadAttention(embed_dim, num_heads, dropout, features, bias)
        # torch's Transformer layers take a fused fast path (which skips self_attn.forward) only
        # when these say the layer is torch's own; they say it is not
        self._qkv_same_embed_dim = False
        self.in_proj_bias = None
        self.last_extras = AttentionExtras()

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, features: Sequence[AttentionFeature] = ()
                   ) -> SyntaxMultiheadAttention:
        """The same layer (weights copied) with ``features`` added."""
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("only a torch MultiheadAttention with kdim = vdim = embed_dim, no bias_kv "
                             "and no zero attention can be converted")
        bias = mha.in_proj_bias is not None
        layer = cls(mha.embed_dim, mha.num_heads, mha.dropout, bias, mha.batch_first, features)
        core = layer.attention
        with torch.no_grad():
            for proj, weight in zip((core.q_proj, core.k_proj, core.v_proj), mha.in_proj_weight.chunk(3)):
                proj.weight.copy_(weight)
            if bias:
                for proj, b in zip((core.q_proj, core.k_proj, core.v_proj), mha.in_proj_bias.chunk(3)):
                    proj.bias.copy_(b)
            core.out_proj.weight.copy_(mha.out_proj.weight)
            if core.out_proj.bias is not None:
                core.out_proj.bias.copy_(mha.out_proj.bias)
        return layer.to(mha.out_proj.weight.device, mha.out_proj.weight.dtype)

    def bound_syntax(self) -> SyntaxInputs | None:
        """The syntax inputs bound to this layer by the enclosing :func:`bind_syntax` (or None)."""
        bound = _BOUND.get() or {}
        return bound.get(id(self), bound.get(None))

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        """As ``torch.nn.MultiheadAttention.forward``: self-attention when ``query``, ``key`` and
        ``value`` are the same tensor, else cross-attention to ``key`` (which must be ``value``).

        Returns:
            ``(output, weights)``: weights ``[batch_size, n, m]`` (averaged over heads) or
            ``[batch_size, heads, n, m]`` when ``need_weights``, else None.
        """
        if key is not value and not torch.equal(key, value):
            raise ValueError("SyntaxMultiheadAttention reads keys and values from the same tensor (key is value)")
        self_attention = query is key or (query.shape == key.shape and torch.equal(query, key))
        unbatched = query.dim() == 2
        if unbatched:
            query, key = query.unsqueeze(1), key.unsqueeze(1)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        if not self.batch_first or unbatched:
            query, key = query.transpose(0, 1), key.transpose(0, 1)
        if key_padding_mask is not None and key_padding_mask.dtype != torch.bool:
            key_padding_mask = torch.isneginf(key_padding_mask) | (key_padding_mask != 0)
        causal = is_causal or (attn_mask is not None and attn_mask.dim() == 2 and _is_causal_mask(attn_mask))
        if causal and attn_mask is not None and attn_mask.dim() == 2 and _is_causal_mask(attn_mask):
            attn_mask = None  # the causal flag says it all (and lets causal features run)
        out, extras = self.attention(query, None if self_attention else key, key_padding_mask=key_padding_mask,
                                     causal=causal, syntax=self.bound_syntax(), need_weights=need_weights,
                                     attn_mask=attn_mask, carry=_CARRY.get())
        self.last_extras = extras
        if not self.batch_first or unbatched:
            out = out.transpose(0, 1)
        if unbatched:
            out = out.squeeze(1)
        weights = None
        if need_weights:
            weights = extras.probs.mean(1) if average_attn_weights else extras.probs
            if unbatched:
                weights = weights.squeeze(0)
        return out, weights
