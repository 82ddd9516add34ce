"""Specialized POS/deprel heads and the dependency-supervised biaffine head, against references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from synattn.attention import IGNORE_INDEX, MultiheadAttention, SpecializedHeads, SupervisedHead, SyntaxInputs
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


def _reference_scores(attn, head: SupervisedHead, x):
    q, k, _ = projections(attn, x)
    qh, kh = q[:, head.head], k[:, head.head]
    b, n, m = x.shape[0], x.shape[1], x.shape[1]
    s = torch.empty(b, n, m, dtype=x.dtype)
    for bi in range(b):
        for t in range(n):
            for j in range(m):
                s[bi, t, j] = (qh[bi, t] / math.sqrt(DK)) @ head.bilinear @ kh[bi, j] + head.key_bias @ kh[bi, j]
    return s


@pytest.mark.parametrize("causal", [False, True])
def test_supervised_head_is_biaffine_and_its_loss_is_cross_entropy(causal):
    torch.manual_seed(1)
    head = SupervisedHead(DK, head=2, weight=0.7)
    attn = MultiheadAttention(D, H, features=[head]).double().eval()
    with torch.no_grad():
        head.bilinear.copy_(torch.randn(DK, DK))
        head.key_bias.copy_(torch.randn(DK))
    x = torch.randn(2, 6, D, dtype=torch.float64)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    targets = torch.tensor([[1, 1, 1, 5, 3, 2], [2, 0, 2, 1, IGNORE_INDEX, IGNORE_INDEX]])
    allowed = dense_allowed(pad, causal, 6, 6, batch=2)
    s = _reference_scores(attn, head, x)
    expected, probs = naive_attention(attn, x, allowed=allowed, head_logits=(2, s))
    out, extras = attn(x, key_padding_mask=pad, causal=causal,
                       syntax=SyntaxInputs(head_targets=targets), need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(extras.probs, probs)
    fused, fused_extras = attn(x, key_padding_mask=pad, causal=causal, syntax=SyntaxInputs(head_targets=targets))
    torch.testing.assert_close(fused, expected)
    # reference loss: mean over targets that are allowed keys (left arcs only when causal)
    terms = []
    for b in range(2):
        for t in range(6):
            j = int(targets[b, t])
            if j >= 0 and allowed[b, t, j]:
                terms.append(-torch.log(probs[b, 2, t, j]))
    expected_loss = 0.7 * torch.stack(terms).mean()
    torch.testing.assert_close(extras.losses["parse"], expected_loss)
    torch.testing.assert_close(fused_extras.losses["parse"], expected_loss)
    if causal:
        assert float(extras.head_log_probs["parse"].detach().exp().triu(1).max()) == 0.0
        assert len(terms) < int((targets >= 0).sum())  # right-pointing arcs were left out


def test_supervised_head_without_valid_targets_has_zero_loss():
    attn = MultiheadAttention(D, H, features=[SupervisedHead(DK)])
    targets = torch.full((1, 4), IGNORE_INDEX)
    _, extras = attn(torch.randn(1, 4, D), syntax=SyntaxInputs(head_targets=targets))
    assert float(extras.losses["parse"].detach()) == 0.0


def test_supervised_head_learns_fixed_targets():
    """A few gradient steps on the parse loss alone drive the argmax to the targets."""
    torch.manual_seed(2)
    attn = MultiheadAttention(D, H, features=[SupervisedHead(DK, head=0)])
    x = torch.randn(4, 6, D)
    targets = torch.randint(0, 6, (4, 6))
    opt = torch.optim.Adam(attn.parameters(), lr=0.05)
    for _ in range(150):
        _, extras = attn(x, syntax=SyntaxInputs(head_targets=targets))
        opt.zero_grad()
        extras.losses["parse"].backward()
        opt.step()
    predicted = extras.head_log_probs["parse"].argmax(-1)
    assert float((predicted == targets).float().mean()) >= 0.95
    assert F.nll_loss(extras.head_log_probs["parse"].transpose(1, 2), targets) < 0.2
