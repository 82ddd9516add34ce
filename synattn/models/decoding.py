"""Incremental decoding shared by the translation model and the language model.

A model that mixes this in has ``embed_target`` (a ``TokenEmbedding``), ``decoder`` (a causal
``TransformerStack``) and ``project`` (states → logits). ``decode_step`` feeds new tokens and
returns their logits; with caches in the state (``use_cache=True``) only the new tokens are
computed, without them the caller passes the whole prefix every time (the slow reference).

Decoder features at decode time: Shaw relative positions work (labels follow the absolute
positions); the supervised head works (it attends with its biaffine distribution; there is no
parser at decode time and no loss without targets); tree labels (``tree_distance``,
``traversal``) need the labels of the whole target in ``syntax``, so they work for teacher
forcing and for scoring a given target, not for free generation (the tree of tokens not yet
generated is unknown). Bird-Eye attention works: BET(SG) leaves the attention unchanged (its
pointer loss needs the hints, in training), BET(SF) keeps the levels of past positions in the
layer's cache. Segmentation / sigmoid cross-attention works (each query's chain is independent of
the other queries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from synattn.attention import SyntaxInputs
from synattn.models.state import DecoderState, ModelOutput

if TYPE_CHECKING:
    from synattn.models.embeddings import TokenEmbedding
    from synattn.models.stack import TransformerStack


def padding_or_none(padding: Tensor) -> Tensor | None:
    """Returns the padding mask, or None when it masks nothing (lets attention use its fast path)."""
    return padding if bool(padding.any()) else None


class IncrementalDecoding:
    """Mixin: ``decode_step`` over a :class:`DecoderState`."""

    if TYPE_CHECKING:  # what the model class provides (for the type checker only)
        config: Any
        embed_target: TokenEmbedding
        decoder: TransformerStack

        def project(self, h: Tensor) -> Tensor: ...

    def decode_step(self, tokens: Tensor, state: DecoderState, syntax: SyntaxInputs | None = None,
                    need_weights: bool = False) -> ModelOutput:
        """Feeds ``tokens [batch_size, t]`` and returns their ``logits [batch_size, t, vocab]``.

        With caches, the tokens continue the ones fed before (positions ``state.length ..``) and
        the caches grow; without, ``tokens`` is the whole prefix and the state is unchanged.
        """
        padding = tokens == self.config.pad_id  # [B, t]
        if state.layers is None:
            start, keys_padding = 0, padding
        else:
            start, keys_padding = state.length, state.append_padding(padding)
        x = self.embed_target(tokens, start)  # [B, t, d]
        h, extras = self.decoder(x, padding_or_none(keys_padding), syntax, state.memory,
                                 state.memory_padding_mask, state.layers, need_weights)
        out = ModelOutput(logits=self.project(h))
        out.update(extras)
        return out
