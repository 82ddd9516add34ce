"""The attention references of tests/helpers/attention.py agree with independent implementations:
torch.nn.MultiheadAttention, and a walk to ROOT for the random trees."""

from __future__ import annotations

import numpy as np
import torch

from synattn.attention import MultiheadAttention
from tests.helpers.attention import dense_allowed, naive_attention, random_heads

# The reference itself agrees with torch.nn.MultiheadAttention (an independent implementation).


def _torch_mha_like(attn: MultiheadAttention) -> torch.nn.MultiheadAttention:
    ref = torch.nn.MultiheadAttention(attn.d_model, attn.heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
        ref.out_proj.weight.copy_(attn.out_proj.weight)
        ref.out_proj.bias.copy_(attn.out_proj.bias)
    return ref


def test_reference_matches_torch_multihead_attention():
    torch.manual_seed(0)
    attn = MultiheadAttention(16, 4)
    x, mem = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 4:] = True
    ref = _torch_mha_like(attn)
    expected, _ = ref(x, mem, mem, key_padding_mask=pad, need_weights=False)
    got, _ = naive_attention(attn, x, mem, allowed=dense_allowed(pad, False, 5, 7, batch=3))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    expected, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    got, _ = naive_attention(attn, x, allowed=dense_allowed(None, True, 5, 5, batch=3))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_random_heads_are_trees():
    rng = np.random.default_rng(0)
    for n in range(1, 9):
        heads = random_heads(rng, n, roots=1 + n % 2 if n > 1 else 1)
        for word in range(1, n + 1):  # every word reaches ROOT within n steps
            node, steps = word, 0
            while node != 0 and steps <= n:
                node, steps = heads[node - 1], steps + 1
            assert node == 0
