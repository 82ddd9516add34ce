"""Key/value cache of one attention layer, for incremental decoding.

Self-attention appends the keys and values of the new positions at every step; cross-attention
computes the keys and values of the encoder memory once and reuses them (``static``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Cached keys and values ``[batch_size, heads, t, d_k]`` of one attention layer.

    Example:
        >>> cache = KVCache()
        >>> cache.length
        0
    """

    key: Tensor | None = None
    value: Tensor | None = None
    static: bool = False

    @property
    def length(self) -> int:
        """Number of cached positions (the absolute position of the next query in self-attention)."""
        return 0 if self.key is None else self.key.shape[2]

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Appends new ``[batch_size, heads, t_new, d_k]`` keys/values; returns all of them."""
        if self.key is not None:
            key = torch.cat([self.key, key], dim=2)  # [B, H, t + t_new, d_k]
            value = torch.cat([self.value, value], dim=2)
        self.key, self.value = key, value
        return key, value

    def reorder(self, index: Tensor) -> None:
        """Keeps the batch rows ``index`` (``[new_batch]`` long), e.g. the surviving beams."""
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)
