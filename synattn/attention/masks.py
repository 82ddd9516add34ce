"""Attention masks: which keys each query may attend to.

Masks are boolean and *positive*: True where query i may attend key j. They broadcast as
``[batch_size | 1, 1, n, m]`` over heads. Masked logits are filled with the most negative finite
value of their dtype (never −inf), so a row whose keys are all masked gives a uniform, finite
softmax that the attention then zeroes: no NaN in the output nor in the gradients.
"""

from __future__ import annotations

import torch
from torch import Tensor


def attention_mask(key_padding_mask: Tensor | None, causal: bool, query_length: int,
                   key_length: int, query_start: int = 0, device: torch.device | None = None
                   ) -> Tensor | None:
    """Builds the positive mask of one attention call.

    Args:
        key_padding_mask: ``[batch_size, m]`` bool, True at padding keys (the convention of
            ``torch.nn.MultiheadAttention``), or None.
        causal: forbid keys after the query (``j > query_start + i``).
        query_length: n, the number of queries.
        key_length: m, the number of keys (cached keys included).
        query_start: absolute position of the first query (the cache length when decoding).
        device: device of the mask when there is no padding mask.

    Returns:
        ``[batch_size | 1, 1, n, m]`` bool, or None when every pair is allowed.

    Example:
        >>> attention_mask(None, True, 2, 3, query_start=1)[0, 0].int().tolist()
        [[1, 1, 0], [1, 1, 1]]
    """
    allowed = None
    if key_padding_mask is not None:
        if key_padding_mask.shape[-1] != key_length:
            raise ValueError(f"key_padding_mask covers {key_padding_mask.shape[-1]} keys, "
                             f"but the attention has {key_length} keys")
        allowed = ~key_padding_mask.bool()[:, None, None, :]  # [B, 1, 1, m]
        device = key_padding_mask.device
    if causal:
        rows = torch.arange(query_start, query_start + query_length, device=device)
        cols = torch.arange(key_length, device=device)
        future = (cols[None, :] <= rows[:, None])[None, None]  # [1, 1, n, m]
        allowed = future if allowed is None else allowed & future
    return allowed


def fill_masked(logits: Tensor, allowed: Tensor | None) -> Tensor:
    """Returns ``logits`` with disallowed entries set to the dtype's most negative finite value."""
    if allowed is None:
        return logits
    return logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)


def alive_rows(allowed: Tensor | None) -> Tensor | None:
    """Returns ``[batch_size | 1, 1, n, 1]`` bool: rows with at least one allowed key."""
    if allowed is None:
        return None
    return allowed.any(dim=-1, keepdim=True)


def upcast(x: Tensor) -> Tensor:
    """Returns ``x`` in float32 when it is in a lower precision (bf16/fp16), else unchanged."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
