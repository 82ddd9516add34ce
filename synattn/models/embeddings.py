"""Token embeddings scaled by sqrt(d), plus optional sinusoidal positions (Vaswani et al. 2017, §3.4–3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_positions(start: int, length: int, d_model: int, device: torch.device | None = None
                         ) -> Tensor:
    """Sinusoidal encodings of positions ``start .. start + length − 1``.

    Returns:
        ``[length, d_model]``: ``sin(p / 10000^(2i/d))`` in even and ``cos`` in odd columns.
    """
    positions = torch.arange(start, start + length, device=device, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, d_model, 2, device=device, dtype=torch.float32)
                      * (-math.log(10000.0) / d_model))  # [d / 2]
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(positions * rates)
    table[:, 1::2] = torch.cos(positions * rates[: d_model // 2])
    return table  # [length, d]


class TokenEmbedding(nn.Module):
    """``dropout(E[x] · sqrt(d) + PE(positions))``.

    Args:
        vocab_size: number of tokens.
        d_model: width d.
        pad_id: id whose embedding stays zero.
        absolute_positions: add sinusoidal position encodings.
        dropout: dropout after the sum.
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int, absolute_positions: bool,
                 dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, std=d_model ** -0.5)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()
        self.scale = math.sqrt(d_model)
        self.absolute_positions = absolute_positions
        self.dropout = nn.Dropout(dropout)

    @property
    def weight(self) -> Tensor:
        return self.embedding.weight

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        """Embeds ``tokens [batch_size, t]`` at positions ``start ..``; returns ``[batch_size, t, d]``."""
        x = self.embedding(tokens) * self.scale  # [B, t, d]
        if self.absolute_positions:
            x = x + sinusoidal_positions(start, tokens.shape[1], x.shape[-1], x.device).to(x.dtype)
        return self.dropout(x)
