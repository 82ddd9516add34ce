"""Slow, obviously-correct attention references shared by the attention and model tests (checked
against torch.nn.MultiheadAttention by tests/attention/test_reference.py).

The reference materialises everything: the ``[B, n, m, d_k]`` relative embeddings, the masked
logits with −inf, and the probabilities, with einsum written pair by pair.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from synattn.attention import MultiheadAttention


def projections(attn: MultiheadAttention, x, context=None):
    """Returns q, k, v ``[B, H, t, d_k]`` computed from the layer's weights."""
    src = x if context is None else context
    b, h, dk = x.shape[0], attn.heads, attn.head_dim

    def split(t):
        return t.view(b, -1, h, dk).transpose(1, 2)

    q = split(F.linear(x, attn.q_proj.weight, attn.q_proj.bias))
    k = split(F.linear(src, attn.k_proj.weight, attn.k_proj.bias))
    v = split(F.linear(src, attn.v_proj.weight, attn.v_proj.bias))
    return q, k, v


def naive_attention(attn: MultiheadAttention, x, context=None, allowed=None, key_embeddings=(),
                    value_embeddings=(), qk=None, head_logits=None):
    """Reference attention.

    Args:
        allowed: ``[B, n, m]`` bool or None.
        key_embeddings / value_embeddings: ``(table [L, d_k], labels [B, n, m])`` pairs, materialised
            as ``table[labels]`` ``[B, n, m, d_k]``.
        qk: optional replaced ``(q, k)``.
        head_logits: optional ``(head, logits [B, n, m])`` replacing one head's logits (unscaled).

    Returns:
        ``(out [B, n, d], probs [B, H, n, m])``.
    """
    q, k, v = projections(attn, x, context)
    if qk is not None:
        q, k = qk
    dk = attn.head_dim
    logits = torch.einsum("bhid,bhjd->bhij", q, k)
    for table, labels in key_embeddings:
        emb = table[labels.long()]  # [B, n, m, d_k] materialised
        logits = logits + torch.einsum("bhid,bijd->bhij", q, emb)
    logits = logits / math.sqrt(dk)
    if head_logits is not None:
        head, s = head_logits
        logits = logits.clone()
        logits[:, head] = s
    if allowed is not None:
        logits = logits.masked_fill(~allowed[:, None], float("-inf"))
    probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # fully masked rows -> 0
    out = torch.einsum("bhij,bhjd->bhid", probs, v)
    for table, labels in value_embeddings:
        emb = table[labels.long()]
        out = out + torch.einsum("bhij,bijd->bhid", probs, emb)
    b, h, n, _ = out.shape
    out = F.linear(out.transpose(1, 2).reshape(b, n, h * dk), attn.out_proj.weight, attn.out_proj.bias)
    return out, probs


def dense_allowed(key_padding_mask, causal: bool, n: int, m: int, start: int = 0, batch: int = 1):
    """``[B, n, m]`` bool mask written out pair by pair."""
    out = torch.ones(batch, n, m, dtype=torch.bool)
    for b in range(batch):
        for i in range(n):
            for j in range(m):
                if key_padding_mask is not None and bool(key_padding_mask[b, j]):
                    out[b, i, j] = False
                if causal and j > start + i:
                    out[b, i, j] = False
    return out


def random_heads(rng: np.random.Generator, n: int, roots: int = 1) -> np.ndarray:
    """A random dependency tree over n words (1-based heads, 0 = ROOT) with ``roots`` root words."""
    order = rng.permutation(n)
    heads = np.zeros(n, dtype=np.int64)
    for rank, word in enumerate(order):
        if rank >= roots:
            heads[word] = order[rng.integers(0, rank)] + 1
    return heads
