"""Structured span attention over a constituency tree CRF, against brute-force enumeration."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from synattn.attention import MultiheadAttention, SpanAttention
from synattn.attention.core import check_compatible
from synattn.attention.span import span_weights
from synattn.methods.syntactic import SyntacticAttention
from tests.helpers.spans import bracketings
from tests.helpers.structured import assert_bidirectional_self_attention_only

D, H = 8, 2
DK = D // H


def split(lin, x):
    b, t, _ = x.shape
    return F.linear(x, lin.weight, lin.bias).view(b, t, H, DK).transpose(1, 2)  # [B, H, t, d_k]


def layer(head=1, seed=0):
    torch.manual_seed(seed)
    feature = SpanAttention(DK, head=head)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    with torch.no_grad():
        feature.start.copy_(torch.randn(DK, DK) * 2)
        feature.end.copy_(torch.randn(DK, DK) * 2)
    return attn, feature


def brute_weights(theta: torch.Tensor, t: int, n: int) -> torch.Tensor:
    """w_t(k) by enumeration: a tree ∝ p(T)·d_T(t), a span of it containing t uniformly, a word of
    that span uniformly (``theta [N, N]`` span scores of query t)."""
    trees = bracketings(0, n - 1)
    scores = torch.stack([sum(theta[a, b] for a, b in tree) for tree in trees])
    prob = torch.softmax(scores, 0)
    w = theta.new_zeros(theta.shape[0])
    depth = [sum(a <= t <= b for a, b in tree) for tree in trees]
    norm = sum(p * d for p, d in zip(prob, depth))
    for p, _, tree in zip(prob, depth, trees):
        for a, b in tree:
            if a <= t <= b:  # p(T) d / E[d] · 1/d · 1/(b - a + 1)
                w[a:b + 1] += p / norm / (b - a + 1)
    return w


def test_weights_are_brute_force_and_other_heads_unchanged():
    attn, feature = layer()
    plain = MultiheadAttention(D, H).double()
    plain.load_state_dict({k: v for k, v in attn.state_dict().items()
                           if not k.startswith("features")})
    lengths = [5, 3, 1]
    x = torch.randn(3, 5, D, dtype=torch.float64)
    pad = torch.arange(5)[None, :] >= torch.tensor(lengths)[:, None]
    out, extras = attn(x, key_padding_mask=pad, need_weights=True)
    _, base = plain(x, key_padding_mask=pad, need_weights=True)
    q, k = split(attn.q_proj, x)[:, 1], split(attn.k_proj, x)[:, 1]
    expected = torch.zeros(3, 5, 5, dtype=torch.float64)
    for b, n in enumerate(lengths):
        start = q[b] @ feature.start @ k[b].T / math.sqrt(DK)  # [t, a]
        end = q[b] @ feature.end @ k[b].T / math.sqrt(DK)  # [t, b]
        for t in range(n):
            theta = (start[t][:, None] + end[t][None, :]).detach()
            expected[b, t] = brute_weights(theta, t, n)
    torch.testing.assert_close(extras.probs[:, 1], expected)
    torch.testing.assert_close(extras.probs[:, 0], base.probs[:, 0])
    rows = extras.probs[:, 1].sum(-1)
    valid = ~pad
    torch.testing.assert_close(rows[valid], torch.ones(int(valid.sum()), dtype=torch.float64))
    assert (extras.probs[:, 1][pad] == 0).all()  # padded queries
    assert (extras.probs[:, 1].transpose(1, 2)[pad] == 0).all()  # padded keys
    v = split(attn.v_proj, x)
    mixed = (extras.probs @ v).transpose(1, 2).reshape(3, 5, D)
    torch.testing.assert_close(out, F.linear(mixed, attn.out_proj.weight, attn.out_proj.bias))


def test_fresh_layer_is_the_uniform_tree_expectation():
    feature = SpanAttention(DK)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    x = torch.randn(1, 4, D, dtype=torch.float64)
    _, extras = attn(x, need_weights=True)
    zero = torch.zeros(4, 4, dtype=torch.float64)
    expected = torch.stack([brute_weights(zero, t, 4) for t in range(4)])
    torch.testing.assert_close(extras.probs[0, 0], expected)
    torch.testing.assert_close(expected, expected.flip(0, 1))  # mirror symmetry


def test_gradcheck_float64_with_padding():
    attn, _ = layer(head=0, seed=2)
    x = torch.randn(2, 4, D, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False] * 4, [False, False, True, True]])
    assert torch.autograd.gradcheck(lambda a: attn(a, key_padding_mask=pad)[0], (x,))
    params = [attn.features[0].start, attn.features[0].end]
    out = attn(x, key_padding_mask=pad)[0]
    grads = torch.autograd.grad(out.pow(2).sum(), params)
    assert all(g.abs().sum() > 0 for g in grads)


def test_length_one_no_nan():
    attn, _ = layer()
    x = torch.randn(2, 1, D, dtype=torch.float64, requires_grad=True)
    out, extras = attn(x, need_weights=True)
    (g,) = torch.autograd.grad(out.sum(), [x])
    assert torch.isfinite(out).all() and torch.isfinite(g).all()
    assert (extras.probs[:, 1] == 1).all()
    attn = attn.float()
    x = torch.randn(2, 3, D, requires_grad=True)
    pad = torch.tensor([[False] * 3, [False, True, True]])
    out, extras = attn(x, key_padding_mask=pad, need_weights=True)
    (g,) = torch.autograd.grad(out.sum(), [x])
    assert torch.isfinite(out).all() and torch.isfinite(g).all()
    assert extras.probs[1, 1, 0, 0] == 1 and (extras.probs[1, 1, 1:] == 0).all()


def test_span_weights_of_a_fixed_tree():
    # one tree ((0 1) 2): query 0 sees (0,0), (0,1), (0,2) -> weights 1/3 (1 + 1/2 + 1/3, ...)
    mu = torch.zeros(1, 3, 3, 3, dtype=torch.float64)
    for a, b in [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2)]:
        mu[0, :, a, b] = 1.0
    w = span_weights(mu, torch.tensor([3]))
    torch.testing.assert_close(w[0, 0], torch.tensor([1 + 1 / 2 + 1 / 3, 1 / 2 + 1 / 3, 1 / 3],
                                                     dtype=torch.float64) / 3)
    torch.testing.assert_close(w[0, 2], torch.tensor([1 / 3, 1 / 3, 1 + 1 / 3],
                                                     dtype=torch.float64) / 2)


def test_rejections():
    attn, _ = layer()
    x = torch.randn(1, 3, D, dtype=torch.float64)
    assert_bidirectional_self_attention_only(attn, x)
    with pytest.raises(ValueError, match="end of each"):
        attn(x, key_padding_mask=torch.tensor([[True, False, False]]))
    with pytest.raises(ValueError, match="both claim head 1"):
        check_compatible([SpanAttention(DK, head=1), SyntacticAttention(D, head=1)])
    check_compatible([SpanAttention(DK, head=1), SyntacticAttention(D, head=0)])
