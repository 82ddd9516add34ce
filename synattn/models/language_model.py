"""Decoder-only (causal) Transformer language model."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention import SyntaxInputs
from synattn.models.config import LanguageModelConfig
from synattn.models.decoding import IncrementalDecoding
from synattn.models.embeddings import TokenEmbedding
from synattn.models.pretrained import PretrainedModel
from synattn.models.stack import TransformerStack
from synattn.models.state import DecoderState, ModelOutput


class TransformerLM(IncrementalDecoding, PretrainedModel):
    """Causal language model: ``logits[:, t]`` predicts token ``t + 1``.

    Example:
        >>> lm = TransformerLM(LanguageModelConfig(vocab_size=20, d_model=16, heads=2, ffn_dim=32,
        ...                                        decoder=StackConfig(layers=1)))
        >>> lm(torch.randint(3, 20, (2, 5))).logits.shape
        torch.Size([2, 5, 20])
    """

    config_class = LanguageModelConfig

    def __init__(self, config: LanguageModelConfig):
        super().__init__(config)
        c = config
        self.embed_target = TokenEmbedding(c.vocab_size, c.d_model, c.pad_id, c.absolute_positions, c.dropout)
        self.decoder = TransformerStack(c, c.decoder, "decoder", cross_attention=False, causal=True)
        self.output = None if c.tie_output else nn.Linear(c.d_model, c.vocab_size, bias=False)

    def project(self, h: Tensor) -> Tensor:
        """States ``[batch_size, t, d]`` → logits ``[batch_size, t, vocab_size]``."""
        return F.linear(h, self.embed_target.weight) if self.output is None else self.output(h)

    def forward(self, tokens: Tensor, syntax: SyntaxInputs | None = None,
                need_weights: bool = False) -> ModelOutput:
        """Runs over ``tokens [batch_size, t]``; returns ``logits [batch_size, t, vocab_size]``."""
        return self.decode_step(tokens, self.start_decoding(use_cache=False), syntax, need_weights)

    def start_decoding(self, use_cache: bool = True) -> DecoderState:
        """An empty state for :meth:`decode_step` (feed the prompt first)."""
        return DecoderState(self.decoder.new_caches() if use_cache else None)
