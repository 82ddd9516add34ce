"""Key/value cache of one attention layer, for incremental decoding.

Self-attention appends the keys and values of the new positions at every step; cross-attention
computes the keys and values of the encoder memory once and reuses them (``static``). A feature
that keeps per-position state of its own across steps (BET(SF)'s token levels) stores it in
``extra``: everything there has the batch as its first dimension and is reordered with the keys
and values, so beam search needs no feature-specific code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Cached keys and values ``[batch_size, heads, t, d_k]`` of one attention layer.

    Attributes:
        key, value: the cached keys and values (None before the first step).
        static: True for cross-attention (computed once from the encoder memory).
        extra: per-feature state by name, each a tensor ``[batch_size, ...]``, reordered with
            the cache.

    Example:
        >>> cache = KVCache()
        >>> cache.length
        0
    """

    key: Tensor | None = None
    value: Tensor | None = None
    static: bool = False
    extra: dict[str, Tensor] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Number of cached positions (the absolute position of the next query in self-attention)."""
        return 0 if self.key is None else self.key.shape[2]

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Appends new ``[batch_size, heads, t_new, d_k]`` keys/values; returns all of them."""
        if self.key is not None and self.value is not None:  # (set together)
            key = torch.cat([self.key, key], dim=2)  # [B, H, t + t_new, d_k]
            value = torch.cat([self.value, value], dim=2)
        self.key, self.value = key, value
        return key, value

    def reorder(self, index: Tensor) -> None:
        """Keeps the batch rows ``index`` (``[new_batch]`` long), e.g. the surviving beams."""
        if self.key is not None and self.value is not None:  # (set together)
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)
        self.extra = {name: value.index_select(0, index) for name, value in self.extra.items()}
