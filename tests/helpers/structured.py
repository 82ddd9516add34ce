"""Pieces of the structured-attention tests (docs/methods.md §5): bilinear scores and the output of
given weights, computed from a layer's own projections."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from synattn.attention.cache import KVCache

D, H = 8, 2


DK = D // H


def split(lin, x):
    b, t, _ = x.shape
    return F.linear(x, lin.weight, lin.bias).view(b, t, H, DK).transpose(1, 2)  # [B, H, t, d_k]


def bilinear_scores(attn, x, context):
    return split(attn.q_proj, x) @ split(attn.k_proj, context).transpose(-1, -2) / math.sqrt(DK)


def output_from_weights(attn, weights, source):
    """out_proj(Σ_j w_ij v_j) per head, ``weights [B, H, n, m]``."""
    b, _, n, _ = weights.shape
    mixed = (weights @ split(attn.v_proj, source)).transpose(1, 2).reshape(b, n, D)
    return F.linear(mixed, attn.out_proj.weight, attn.out_proj.bias)


SRC_PAD = torch.tensor([[False] * 4, [False, False, True, True], [False, True, True, True]])


def assert_bidirectional_self_attention_only(attn, x):
    """A structured layer over the keys' structure refuses causal, cached and cross-attention."""
    with pytest.raises(ValueError, match="causal"):
        attn(x, causal=True)
    with pytest.raises(ValueError, match="cache"):
        attn(x, cache=KVCache())
    with pytest.raises(ValueError, match="self-attention"):
        attn(x, context=x)
