"""Specialized POS/deprel heads (docs/methods.md §1) against a reference."""

from __future__ import annotations

import pytest
import torch

from synattn.attention import MultiheadAttention, SyntaxInputs
from synattn.methods.specialized import SpecializedHeads
from tests.helpers.attention import dense_allowed, naive_attention, projections

D, H = 16, 4
DK = D // H


@pytest.mark.parametrize("source", ["pos", "deprel"])
def test_specialized_heads_take_query_key_from_labels(source):
    torch.manual_seed(0)
    feature = SpecializedHeads(6, DK, heads=[1, 3], source=source, label_dim=5)
    attn = MultiheadAttention(D, H, features=[feature]).double().eval()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    labels = torch.randint(0, 6, (2, 5))
    syntax = SyntaxInputs(**{source: labels})
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    q, k, _ = projections(attn, x)
    e = feature.embedding.weight[labels]  # [B, n, label_dim]
    q, k = q.clone(), k.clone()
    for slot, head in enumerate([1, 3]):
        rows = slice(slot * DK, (slot + 1) * DK)
        q[:, head] = e @ feature.query.weight[rows].t()
        k[:, head] = e @ feature.key.weight[rows].t()
    expected, probs = naive_attention(attn, x, allowed=dense_allowed(pad, False, 5, 5, batch=2), qk=(q, k))
    for need_weights in (False, True):
        out, extras = attn(x, key_padding_mask=pad, syntax=syntax, need_weights=need_weights)
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(extras.probs, probs)
    # the specialized heads' distributions depend on the labels only, the others on the tokens
    _, other = attn(torch.randn_like(x), key_padding_mask=pad, syntax=syntax, need_weights=True)
    torch.testing.assert_close(other.probs[:, [1, 3]], extras.probs[:, [1, 3]])
    assert not torch.allclose(other.probs[:, [0, 2]], extras.probs[:, [0, 2]])
