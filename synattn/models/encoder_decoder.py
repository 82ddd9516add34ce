"""Encoder-decoder Transformer for translation (Vaswani et al. 2017) with syntax-aware attention."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention import SyntaxInputs
from synattn.models.config import EncoderDecoderConfig
from synattn.models.decoding import IncrementalDecoding, padding_or_none
from synattn.models.embeddings import TokenEmbedding
from synattn.models.pretrained import PretrainedModel
from synattn.models.stack import TransformerStack
from synattn.models.state import DecoderState, ModelOutput, StackExtras


class EncoderDecoderTransformer(IncrementalDecoding, PretrainedModel):
    """Translation model: encoder over the source, causal decoder with cross-attention.

    Source syntax (``src_syntax``) feeds the encoder's features; target syntax (``tgt_syntax``,
    indexed by decoder input positions, BOS at 0) feeds the decoder's. The auxiliary losses
    (``ModelOutput.losses``, e.g. ``encoder.3.parse``) are weighted already; the training loss is
    the translation loss plus ``ModelOutput.aux_loss``.

    Example:
        >>> config = EncoderDecoderConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16,
        ...     heads=2, ffn_dim=32, encoder=StackConfig(layers=1), decoder=StackConfig(layers=1))
        >>> model = EncoderDecoderTransformer(config)
        >>> model(torch.randint(3, 20, (2, 5)), torch.randint(3, 20, (2, 4))).logits.shape
        torch.Size([2, 4, 20])
    """

    config_class = EncoderDecoderConfig

    def __init__(self, config: EncoderDecoderConfig):
        super().__init__(config)
        c = config
        self.embed_source = TokenEmbedding(c.src_vocab_size, c.d_model, c.pad_id, c.absolute_positions, c.dropout)
        self.embed_target = (self.embed_source if c.share_embeddings else
                             TokenEmbedding(c.tgt_vocab_size, c.d_model, c.pad_id, c.absolute_positions, c.dropout))
        self.encoder = TransformerStack(c, c.encoder, "encoder", cross_attention=False, causal=False)
        self.decoder = TransformerStack(c, c.decoder, "decoder", cross_attention=True, causal=True)
        self.output = None if c.tie_output else nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)

    def project(self, h: Tensor) -> Tensor:
        """Decoder states ``[batch_size, t, d]`` → logits ``[batch_size, t, tgt_vocab_size]``."""
        return F.linear(h, self.embed_target.weight) if self.output is None else self.output(h)

    def encode(self, src: Tensor, syntax: SyntaxInputs | None = None, need_weights: bool = False
               ) -> tuple[Tensor, Tensor, StackExtras]:
        """Encodes ``src [batch_size, n]``; returns ``(memory [batch_size, n, d], padding [batch_size, n], extras)``."""
        padding = src == self.config.pad_id
        memory, extras = self.encoder(self.embed_source(src), padding_or_none(padding), syntax,
                                      need_weights=need_weights)
        return memory, padding, extras

    def forward(self, src: Tensor, tgt: Tensor, src_syntax: SyntaxInputs | None = None,
                tgt_syntax: SyntaxInputs | None = None, need_weights: bool = False) -> ModelOutput:
        """Teacher-forced pass.

        Args:
            src: ``[batch_size, n]`` source ids (``pad_id`` at padding).
            tgt: ``[batch_size, m]`` decoder input ids (BOS first).
            src_syntax, tgt_syntax: syntax fields of the source / decoder input positions.
            need_weights: also return every layer's attention probabilities.

        Returns:
            ``ModelOutput`` with ``logits [batch_size, m, tgt_vocab_size]``.
        """
        state = self.start_decoding(src, src_syntax, use_cache=False, need_weights=need_weights)
        out = self.decode_step(tgt, state, tgt_syntax, need_weights=need_weights)
        assert state.encoder_extras is not None  # (start_decoding ran the encoder)
        out.update(state.encoder_extras)
        return out

    def start_decoding(self, src: Tensor, src_syntax: SyntaxInputs | None = None,
                       use_cache: bool = True, need_weights: bool = False) -> DecoderState:
        """Encodes the source and returns the state for :meth:`decode_step`."""
        memory, padding, extras = self.encode(src, src_syntax, need_weights)
        return DecoderState(self.decoder.new_caches() if use_cache else None, memory=memory,
                            memory_padding_mask=padding_or_none(padding), encoder_extras=extras)
