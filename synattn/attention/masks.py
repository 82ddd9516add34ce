"""Attention masks: which keys each query may attend to.

Masks are boolean and *positive*: True where query i may attend key j. They broadcast as
``[batch_size | 1, 1, n, m]`` over heads. Masked logits are filled with the most negative finite
value of their dtype (never −inf), so a row whose keys are all masked gives a uniform, finite
softmax that the attention then zeroes: no NaN in the output nor in the gradients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from synattn.attention.feature import AttentionContext


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


def padding_keys(allowed: Tensor | None, who: str) -> Tensor | None:
    """Returns the valid keys ``[batch_size | 1, m]`` (bool) of a mask made of key padding only.

    Args:
        allowed: ``[batch_size | 1, 1, n, m]`` positive mask of one call, or None.
        who: the feature that needs it (named in the error).

    Raises:
        ValueError: the mask differs between queries (a causal mask).

    Example:
        >>> padding_keys(attention_mask(torch.tensor([[False, True]]), False, 2, 2), "x").tolist()
        [[True, False]]
    """
    if allowed is None:
        return None
    keys = allowed[:, 0, :1, :]  # [B | 1, 1, m]
    if allowed.shape[-2] != 1 and not bool((allowed[:, 0] == keys).all()):
        raise ValueError(f"{who} needs a bidirectional mask (key padding only), not a causal one")
    return keys[:, 0]  # [B | 1, m]


def bidirectional_keys(ctx: AttentionContext, who: str) -> Tensor | None:
    """Returns the valid keys ``[batch_size | 1, m]`` (bool) of a bidirectional self-attention.

    Features that look at the whole sentence (constituent links, dependency trees) need plain
    encoder self-attention: no cache, and a mask made of key padding only.

    Raises:
        ValueError: cross-attention, incremental decoding or a causal mask.
    """
    if not ctx.is_self or ctx.query_start != 0 or ctx.query_length != ctx.key_length:
        raise ValueError(f"{who} works in bidirectional self-attention over a whole sequence only")
    return padding_keys(ctx.allowed, who)


def suffix_lengths(keys: Tensor | None, batch_size: int, key_length: int, who: str) -> Tensor:
    """Sequence lengths ``[batch_size]`` from the valid keys ``[batch_size | 1, m]`` (None: all).

    Raises:
        ValueError: the padding is not a suffix of every sequence.
    """
    if keys is None:
        return torch.full((batch_size,), key_length, dtype=torch.long)
    keys = keys.expand(batch_size, key_length)  # [B, m]
    lengths = keys.sum(-1)  # [B]
    suffix = torch.arange(key_length, device=keys.device)[None, :] < lengths[:, None]
    if not torch.equal(keys, suffix):
        raise ValueError(f"{who} needs the padding at the end of each sequence")
    return lengths
