"""One Transformer layer: self-attention, optional cross-attention, feed-forward (pre/post-norm)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from synattn.attention import AttentionExtras, AttentionFeature, KVCache, MultiheadAttention, SyntaxInputs
from synattn.models.config import ModelConfig


class TransformerLayer(nn.Module):
    """Vaswani et al. 2017 layer; ``norm="post"`` as in the paper, ``"pre"`` normalises the input
    of each sublayer instead (Xiong et al. 2020) and leaves the final LayerNorm to the stack.

    Args:
        config: model settings (widths, dropouts, norm, activation).
        features: the self-attention features of this layer.
        cross_attention: add encoder-decoder attention (decoder layers of a translation model).
        cross_features: the features of the encoder-decoder attention (e.g. segmentation).
    """

    def __init__(self, config: ModelConfig, features: list[AttentionFeature], cross_attention: bool,
                 cross_features: list[AttentionFeature] | None = None):
        super().__init__()
        d = config.d_model
        self.pre_norm = config.norm == "pre"
        self.self_attn = MultiheadAttention(d, config.heads, config.attention_dropout, features)
        self.self_norm = nn.LayerNorm(d)
        self.cross_attn = (MultiheadAttention(d, config.heads, config.attention_dropout, cross_features or ())
                           if cross_attention else None)
        self.cross_norm = nn.LayerNorm(d) if cross_attention else None
        activation = nn.ReLU() if config.activation == "relu" else nn.GELU()
        self.ffn = nn.Sequential(nn.Linear(d, config.ffn_dim), activation,
                                 nn.Dropout(config.activation_dropout), nn.Linear(config.ffn_dim, d))
        self.ffn_norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(config.dropout)

    def _residual(self, x: Tensor, norm: nn.LayerNorm, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def forward(self, x: Tensor, *, padding_mask: Tensor | None, causal: bool,
                syntax: SyntaxInputs | None = None, memory: Tensor | None = None,
                memory_padding_mask: Tensor | None = None, self_cache: KVCache | None = None,
                cross_cache: KVCache | None = None, need_weights: bool = False,
                carry: dict | None = None) -> tuple[Tensor, AttentionExtras, AttentionExtras | None]:
        """Runs the layer on ``x [batch_size, t, d]``.

        ``carry``: the dict of this forward pass that the attention features hand from layer to
        layer (the stack passes the same one to each of its layers).

        Returns:
            ``(x [batch_size, t, d], self-attention extras, cross-attention extras or None)``.
        """
        extras: dict[str, AttentionExtras] = {}

        def self_attention(h: Tensor) -> Tensor:
            out, extras["self"] = self.self_attn(h, key_padding_mask=padding_mask, causal=causal,
                                                 syntax=syntax, cache=self_cache,
                                                 need_weights=need_weights, carry=carry)
            return out

        def cross_attention(h: Tensor) -> Tensor:
            assert self.cross_attn is not None
            out, extras["cross"] = self.cross_attn(h, memory, key_padding_mask=memory_padding_mask,
                                                   cache=cross_cache, need_weights=need_weights,
                                                   carry=carry)
            return out

        x = self._residual(x, self.self_norm, self_attention)
        if self.cross_attn is not None and self.cross_norm is not None:  # (both or neither)
            x = self._residual(x, self.cross_norm, cross_attention)
        x = self._residual(x, self.ffn_norm, self.ffn)
        return x, extras["self"], extras.get("cross")
