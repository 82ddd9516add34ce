"""A stack of Transformer layers (encoder or decoder) with per-layer attention features."""

from __future__ import annotations

from torch import Tensor, nn

from synattn.attention import SyntaxInputs
from synattn.methods.constituent import recorded_links
from synattn.models.config import ModelConfig, StackConfig
from synattn.models.features import cross_features, layer_features
from synattn.models.layer import TransformerLayer
from synattn.models.state import LayerCache, StackExtras


class TransformerStack(nn.Module):
    """``stack.layers`` layers; causal self-attention for decoders; a final LayerNorm when pre-norm.

    Each forward makes one ``carry`` dict, passed to every layer in order: what the attention
    features hand from one layer to the next lives there, never on the modules. With
    ``stack.constituent`` (Tree Transformer) the a-values of the layers travel in it; after the
    forward, the stack's extras hold them, ``[batch_size, layers, n − 1]``, under
    ``constituent_links[side]``.

    Args:
        config: model settings.
        stack: this stack's layers and features.
        side: ``"encoder"`` or ``"decoder"`` (names of losses and attentions).
        cross_attention: decoder layers attend to an encoder memory.
        causal: self-attention sees only earlier positions.
    """

    def __init__(self, config: ModelConfig, stack: StackConfig, side: str, cross_attention: bool,
                 causal: bool):
        super().__init__()
        self.side, self.causal = side, causal
        shared: dict = {}  # what the methods share between the stack's layers
        self.layers = nn.ModuleList(
            TransformerLayer(config, layer_features(config, stack, side, i, shared),
                             cross_attention, cross_features(config, stack, i) if cross_attention else None)
            for i in range(stack.layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else nn.Identity()

    def new_caches(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.layers]

    def forward(self, x: Tensor, padding_mask: Tensor | None, syntax: SyntaxInputs | None = None,
                memory: Tensor | None = None, memory_padding_mask: Tensor | None = None,
                caches: list[LayerCache] | None = None, need_weights: bool = False
                ) -> tuple[Tensor, StackExtras]:
        """Runs the layers on ``x [batch_size, t, d]``.

        Args:
            padding_mask: ``[batch_size, t_keys]`` bool, True at padding (with caches: all keys so far).
            syntax: the sequence's syntax fields, for the layers' features.
            memory, memory_padding_mask: encoder output ``[batch_size, n, d]`` and its padding.
            caches: per-layer key/value caches for incremental decoding.
            need_weights: collect the attention probabilities.

        Returns:
            ``(states [batch_size, t, d], extras)``.
        """
        extras = StackExtras()
        carry: dict = {}  # this forward's values handed from layer to layer
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            x, self_extras, cross_extras = layer(
                x, padding_mask=padding_mask, causal=self.causal, syntax=syntax, memory=memory,
                memory_padding_mask=memory_padding_mask,
                self_cache=None if cache is None else cache.self_attn,
                cross_cache=None if cache is None else cache.cross_attn, need_weights=need_weights,
                carry=carry)
            extras.add(f"{self.side}.{i}", "self", self_extras)
            extras.add(f"{self.side}.{i}", "cross", cross_extras)
        links = recorded_links(carry)
        if links is not None:
            extras.constituent_links[self.side] = links  # [B, L, t − 1]
        return self.final_norm(x), extras
