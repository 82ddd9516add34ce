"""MultiheadAttention core: plain equivalence, masks, fused vs explicit path, cache, bf16."""

from __future__ import annotations

import pytest
import torch

from synattn.attention import KVCache, MultiheadAttention, SyntaxInputs, attention_mask
from synattn.methods.relations import RelativePositions, TreeRelations
from synattn.methods.specialized import SpecializedHeads
from synattn.methods.supervised import SupervisedHead
from tests.helpers.attention import dense_allowed, naive_attention

D, H = 16, 4


def _padding(batch: int, m: int, lengths) -> torch.Tensor:
    pad = torch.zeros(batch, m, dtype=torch.bool)
    for b, length in enumerate(lengths):
        pad[b, length:] = True
    return pad


def _syntax(batch: int, n: int, seed: int = 0) -> SyntaxInputs:
    g = torch.Generator().manual_seed(seed)
    return SyntaxInputs(
        tree_dist=torch.randint(0, 10, (batch, n, n), generator=g, dtype=torch.int8),
        traversal=torch.randint(0, 21, (batch, n, n), generator=g, dtype=torch.int8),
        pos=torch.randint(0, 7, (batch, n), generator=g),
        deprel=torch.randint(0, 5, (batch, n), generator=g),
        head_targets=torch.randint(0, n, (batch, n), generator=g))


def _features(name: str):
    dk = D // H
    return {
        "plain": [],
        "shaw": [RelativePositions(3, dk)],
        "shaw_keys_only": [RelativePositions(3, dk, values=False)],
        "tree_dist": [TreeRelations("tree_dist", 10, dk)],
        "traversal_keys_only": [TreeRelations("traversal", 21, dk, values=False)],
        "tree_shaw": [TreeRelations("tree_dist", 10, dk), RelativePositions(3, dk)],
        "specialized": [SpecializedHeads(7, dk, heads=[0, 2], source="pos")],
        "specialized_deprel": [SpecializedHeads(5, dk, heads=[1], source="deprel")],
        "supervised": [SupervisedHead(dk, head=1)],
        "all": [SpecializedHeads(7, dk, heads=[0]), SupervisedHead(dk, head=3),
                TreeRelations("traversal", 21, dk), RelativePositions(2, dk)],
    }[name]


ALL_FEATURES = ["plain", "shaw", "shaw_keys_only", "tree_dist", "traversal_keys_only", "tree_shaw",
                "specialized", "specialized_deprel", "supervised", "all"]


def test_mask_matches_pairwise_definition():
    pad = _padding(2, 6, [6, 3])
    for causal in (False, True):
        for start in (0, 2):
            n = 6 - start
            got = attention_mask(pad, causal, n, 6, start)
            expected = dense_allowed(pad, causal, n, 6, start, batch=2)
            assert torch.equal(got[:, 0].expand(2, n, 6), expected)
    assert attention_mask(None, False, 3, 3) is None


@pytest.mark.parametrize("causal", [False, True])
def test_plain_equals_reference_self_and_cross(causal):
    torch.manual_seed(0)
    attn = MultiheadAttention(D, H).eval()
    x, mem = torch.randn(3, 5, D), torch.randn(3, 7, D)
    pad = _padding(3, 5, [5, 2, 4])
    for need_weights in (False, True):
        out, _ = attn(x, key_padding_mask=pad, causal=causal, need_weights=need_weights)
        expected, _ = naive_attention(attn, x, allowed=dense_allowed(pad, causal, 5, 5, batch=3))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        mpad = _padding(3, 7, [7, 1, 3])
        out, _ = attn(x, mem, key_padding_mask=mpad, need_weights=need_weights)
        expected, _ = naive_attention(attn, x, mem, allowed=dense_allowed(mpad, False, 5, 7, batch=3))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ALL_FEATURES)
@pytest.mark.parametrize("causal", [False, True])
def test_fused_path_equals_explicit_path(name, causal):
    torch.manual_seed(1)
    attn = MultiheadAttention(D, H, features=_features(name)).eval()
    x = torch.randn(2, 6, D, requires_grad=True)
    pad = _padding(2, 6, [6, 4])
    syntax = _syntax(2, 6)
    fused, extras_f = attn(x, key_padding_mask=pad, causal=causal, syntax=syntax)
    explicit, extras_e = attn(x, key_padding_mask=pad, causal=causal, syntax=syntax, need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # (a bias that needs no gradient goes to SDPA as its mask, also on CPU)
        inference, _ = attn(x, key_padding_mask=pad, causal=causal, syntax=syntax)
    torch.testing.assert_close(inference, explicit.detach(), atol=1e-5, rtol=1e-5)
    assert extras_e.probs.shape == (2, H, 6, 6)
    assert extras_f.losses.keys() == extras_e.losses.keys()
    for key in extras_f.losses:
        torch.testing.assert_close(extras_f.losses[key], extras_e.losses[key])
    (g_fused,) = torch.autograd.grad(fused.square().sum(), x)
    (g_explicit,) = torch.autograd.grad(explicit.square().sum(), x)
    torch.testing.assert_close(g_fused, g_explicit, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["shaw", "tree_dist", "tree_shaw", "supervised"])
def test_feature_with_neutral_parameters_equals_plain(name):
    torch.manual_seed(2)
    attn = MultiheadAttention(D, H, features=_features(name)).eval()
    plain = MultiheadAttention(D, H).eval()
    plain.load_state_dict(attn.state_dict(), strict=False)
    with torch.no_grad():  # zero relative tables; the supervised head starts at U = I, u = 0
        for feature in attn.features:
            for p_name, p in feature.named_parameters():
                if "table" in p_name:
                    p.zero_()
    x = torch.randn(2, 5, D)
    for causal in (False, True):
        out, _ = attn(x, causal=causal, syntax=_syntax(2, 5))
        expected, _ = plain(x, causal=causal)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ALL_FEATURES)
def test_padding_is_never_attended(name):
    torch.manual_seed(3)
    attn = MultiheadAttention(D, H, features=_features(name)).eval()
    x = torch.randn(2, 6, D)
    pad = _padding(2, 6, [6, 3])
    syntax = _syntax(2, 6)
    out, extras = attn(x, key_padding_mask=pad, syntax=syntax, need_weights=True)
    assert float(extras.probs[1, :, :, 3:].detach().abs().max()) == 0.0
    x2 = x.clone()
    x2[1, 3:] = torch.randn(3, D) * 10  # change the padding's content
    for need_weights in (False, True):
        out2, _ = attn(x2, key_padding_mask=pad, syntax=syntax, need_weights=need_weights)
        torch.testing.assert_close(out2[:, :3], out[:, :3], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out2[0], out[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["plain", "shaw", "tree_shaw", "supervised", "all"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_give_zeros_not_nan(name, need_weights):
    torch.manual_seed(4)
    attn = MultiheadAttention(D, H, features=_features(name))
    x = torch.randn(2, 5, D, requires_grad=True)
    pad = _padding(2, 5, [5, 0])  # the second sequence is all padding
    syntax = _syntax(2, 5)
    out, extras = attn(x, key_padding_mask=pad, syntax=syntax, need_weights=need_weights)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1], attn.out_proj.bias.expand(5, D))
    if need_weights:
        assert float(extras.probs[1].detach().abs().max()) == 0.0
    loss = out.square().sum() + sum(extras.losses.values(), torch.tensor(0.0))
    loss.backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ALL_FEATURES)
def test_bf16_autocast_on_cpu(name):
    torch.manual_seed(5)
    attn = MultiheadAttention(D, H, features=_features(name)).eval()
    x = torch.randn(2, 6, D)
    pad = _padding(2, 6, [6, 2])
    syntax = _syntax(2, 6)
    expected, _ = attn(x, key_padding_mask=pad, causal=True, syntax=syntax)
    for need_weights in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, extras = attn(x, key_padding_mask=pad, causal=True, syntax=syntax,
                               need_weights=need_weights)
        assert out.dtype == torch.bfloat16
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), expected, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("name", ["plain", "shaw", "tree_dist", "tree_shaw", "supervised",
                                  "traversal_keys_only"])
def test_cached_incremental_equals_full_causal(name):
    torch.manual_seed(6)
    attn = MultiheadAttention(D, H, features=_features(name)).eval()
    x = torch.randn(2, 7, D)
    syntax = _syntax(2, 7)
    full, full_extras = attn(x, causal=True, syntax=syntax, need_weights=True)
    cache, steps, pieces = KVCache(), [], [(0, 3), (3, 4), (4, 7)]  # a prompt, then steps
    for start, end in pieces:
        out, extras = attn(x[:, start:end], causal=True, syntax=syntax, cache=cache)
        steps.append(out)
        for key, log_probs in extras.head_log_probs.items():
            expected = full_extras.head_log_probs[key][:, start:end, :end]
            torch.testing.assert_close(log_probs, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 7


def test_cross_attention_cache_is_computed_once():
    torch.manual_seed(7)
    attn = MultiheadAttention(D, H).eval()
    x, mem = torch.randn(2, 4, D), torch.randn(2, 6, D)
    pad = _padding(2, 6, [6, 3])
    full, _ = attn(x, mem, key_padding_mask=pad)
    cache = KVCache()
    steps = [attn(x[:, t:t + 1], mem, key_padding_mask=pad, cache=cache)[0] for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.static and cache.length == 6
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.key.shape[0] == 3


def test_dropout_only_in_training():
    torch.manual_seed(8)
    attn = MultiheadAttention(D, H, dropout=0.5, features=[RelativePositions(2, D // H)])
    x = torch.randn(2, 5, D)
    a, _ = attn.eval()(x)
    b, _ = attn.eval()(x)
    torch.testing.assert_close(a, b)
    c, _ = attn.train()(x)
    assert not torch.allclose(a, c)


def test_feature_misuse_is_reported():
    attn = MultiheadAttention(D, H, features=[TreeRelations("tree_dist", 10, D // H)])
    with pytest.raises(ValueError, match="tree_dist"):
        attn(torch.randn(1, 3, D))
    with pytest.raises(ValueError, match="self-attention"):
        attn(torch.randn(1, 3, D), torch.randn(1, 4, D))
    spec = MultiheadAttention(D, H, features=[SpecializedHeads(3, D // H)])
    with pytest.raises(ValueError, match="cache"):
        spec(torch.randn(1, 3, D), syntax=SyntaxInputs(pos=torch.zeros(1, 3, dtype=torch.long)),
             cache=KVCache())
    with pytest.raises(ValueError, match="divisible"):
        MultiheadAttention(10, 3)
