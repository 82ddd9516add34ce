"""Pieces of the structured-attention tests (docs/methods.md §5): bilinear scores and the output of
given weights, computed from a layer's own projections."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from synattn.attention.cache import KVCache
from synattn.attention.core import MultiheadAttention
from synattn.methods.cross_attention import SegmentationAttention, SpanSegmentationAttention
from synattn.methods.syntactic import SyntacticAttention

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


# the layers of the tests, each with its parameters drawn away from their initial values

def seg_layer(mode="structured", normalize=False, seed=0):
    torch.manual_seed(seed)
    feature = SegmentationAttention(H, mode, normalize)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    if feature.pairwise is not None:
        with torch.no_grad():
            feature.pairwise.copy_(torch.randn(H, 2, 2) * 2)
    return attn, feature


def syn_layer(tree, multiroot, children_head=None, seed=0):
    torch.manual_seed(seed)
    feature = SyntacticAttention(D, head=1, children_head=children_head, tree=tree,
                                 multiroot=multiroot, arc_dim=5)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    with torch.no_grad():
        feature.scorer.bilinear.copy_(torch.randn(5, 5))
        feature.scorer.head_bias.copy_(torch.randn(5))
    return attn, feature


def span_layer(longest: int, seed: int = 0):
    torch.manual_seed(seed)
    feature = SpanSegmentationAttention(H, longest)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    with torch.no_grad():
        feature.transition.copy_(torch.randn(H, 2, 2))
        feature.length_scores.copy_(torch.randn(H, longest + 1, 2))
    return attn, feature


def second_order_layer(multiroot: bool, seed: int = 0, siblings: bool = True):
    torch.manual_seed(seed)
    feature = SyntacticAttention(D, head=1, children_head=0, tree="projective2o",
                                 multiroot=multiroot, arc_dim=4)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    with torch.no_grad():
        feature.scorer.bilinear.copy_(torch.randn(4, 4))
        feature.scorer.head_bias.copy_(torch.randn(4))
        if siblings:
            feature.siblings.weight.copy_(torch.randn(4) * 2)
    return attn, feature
