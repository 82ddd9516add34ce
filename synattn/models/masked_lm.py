"""Encoder-only masked language model (bidirectional self-attention)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention import SyntaxInputs
from synattn.models.config import MaskedLMConfig
from synattn.models.decoding import padding_or_none
from synattn.models.embeddings import TokenEmbedding
from synattn.models.pretrained import PretrainedModel
from synattn.models.stack import TransformerStack
from synattn.models.state import ModelOutput


class MaskedLM(PretrainedModel):
    """Masked LM: logits for every position; the loss is taken where the input holds ``mask_id``.

    With ``encoder.constituent`` it is the Tree Transformer (docs/methods.md §3): the output's
    ``constituent_links["encoder"]`` holds every layer's link probabilities
    ``[batch_size, layers, n − 1]``, which ``synattn induce`` decodes into trees.

    Example:
        >>> mlm = MaskedLM(MaskedLMConfig(vocab_size=20, d_model=16, heads=2, ffn_dim=32,
        ...                               encoder=StackConfig(layers=1)))
        >>> mlm(torch.randint(4, 20, (2, 5))).logits.shape
        torch.Size([2, 5, 20])
    """

    config_class = MaskedLMConfig

    def __init__(self, config: MaskedLMConfig):
        super().__init__(config)
        c = config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, c.pad_id, c.absolute_positions, c.dropout)
        self.encoder = TransformerStack(c, c.encoder, "encoder", cross_attention=False, causal=False)
        self.output = None if c.tie_output else nn.Linear(c.d_model, c.vocab_size, bias=False)

    def forward(self, tokens: Tensor, syntax: SyntaxInputs | None = None,
                need_weights: bool = False) -> ModelOutput:
        """Runs over ``tokens [batch_size, n]``; returns ``logits [batch_size, n, vocab_size]``."""
        padding = tokens == self.config.pad_id
        h, extras = self.encoder(self.embed(tokens), padding_or_none(padding), syntax,
                                 need_weights=need_weights)
        out = ModelOutput(logits=F.linear(h, self.embed.weight) if self.output is None else self.output(h))
        out.update(extras)
        return out
