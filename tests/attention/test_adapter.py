"""SyntaxMultiheadAttention: torch.nn.MultiheadAttention's interface, syntax bound per forward."""

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

from synattn.attention import MultiheadAttention, SyntaxInputs
from synattn.attention.adapter import SyntaxMultiheadAttention, bind_syntax
from synattn.methods.relations import TreeRelations
from synattn.trees.relations import batch_relation_labels


def _pair(d=16, heads=4, batch_first=True, bias=True, seed=0):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(d, heads, batch_first=batch_first, bias=bias).double().eval()
    return mha, SyntaxMultiheadAttention.from_torch(mha).eval()


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
@settings(max_examples=25, deadline=None)
@given(batch_first=st.booleans(), mask_kind=st.sampled_from(["none", "bool", "float", "causal", "per_head"]),
       padding=st.booleans(), need_weights=st.booleans(), average=st.booleans(), cross=st.booleans(),
       bias=st.booleans(), seed=st.integers(0, 10))
def test_equal_to_torch_mha_without_features(batch_first, mask_kind, padding, need_weights, average, cross,
                                             bias, seed):
    mha, ours = _pair(batch_first=batch_first, bias=bias, seed=seed)
    b, n, m = 3, 5, (4 if cross else 5)
    x = torch.randn(b, n, 16, dtype=torch.float64)
    mem = torch.randn(b, m, 16, dtype=torch.float64) if cross else x
    kpm = None
    if padding:
        kpm = torch.zeros(b, m, dtype=torch.bool)
        kpm[0, -2:] = True
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(n, m, generator=torch.Generator().manual_seed(seed)) < 0.3
        mask[:, 0] = False  # every query keeps a key (torch gives NaN otherwise)
    elif mask_kind == "float":
        mask = torch.randn(n, m, dtype=torch.float64)
    elif mask_kind == "causal" and not cross:
        mask = nn.Transformer.generate_square_subsequent_mask(n, dtype=torch.float64)
    elif mask_kind == "per_head":
        mask = torch.randn(b * 4, n, m, dtype=torch.float64)
    q, k = (x, mem) if batch_first else (x.transpose(0, 1), mem.transpose(0, 1))
    k = q if not cross else k
    expected = mha(q, k, k, key_padding_mask=kpm, need_weights=need_weights, attn_mask=mask,
                   average_attn_weights=average)
    got = ours(q, k, k, key_padding_mask=kpm, need_weights=need_weights, attn_mask=mask,
               average_attn_weights=average)
    torch.testing.assert_close(got[0], expected[0])
    if need_weights:
        torch.testing.assert_close(got[1], expected[1])
    else:
        assert got[1] is None


def test_unbatched_input_and_bad_masks():
    mha, ours = _pair(batch_first=False)
    x = torch.randn(5, 16, dtype=torch.float64)
    torch.testing.assert_close(ours(x, x, x)[0], mha(x, x, x)[0])
    with pytest.raises(ValueError, match="attn_mask has shape"):
        ours(x, x, x, attn_mask=torch.zeros(2, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="same tensor"):
        ours(x, x, torch.randn(5, 16, dtype=torch.float64))


def _labels(heads_list, n):
    heads = torch.zeros(len(heads_list), n, dtype=torch.long)
    lens = torch.zeros(len(heads_list), dtype=torch.long)
    for i, h in enumerate(heads_list):
        heads[i, :len(h)] = torch.tensor(h)
        lens[i] = len(h)
    dist, _ = batch_relation_labels(heads.numpy(), lens.numpy(), 4, 2)
    return torch.as_tensor(dist)


def test_inside_transformer_encoder_layer_equals_torch_then_reads_bound_syntax():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    expected = layer(x, src_key_padding_mask=pad)
    relation = TreeRelations("tree_dist", num_labels=6, head_dim=8)
    layer.self_attn = SyntaxMultiheadAttention.from_torch(layer.self_attn, features=[relation]).double()
    nn.init.zeros_(relation.key_table)
    nn.init.zeros_(relation.value_table)
    syntax = SyntaxInputs(tree_dist=_labels([[0, 1, 2, 3, 4, 5], [2, 0, 2, 3]], 6))
    with bind_syntax(syntax):  # zero relation embeddings: torch's result
        torch.testing.assert_close(layer(x, src_key_padding_mask=pad)[:, :4], expected[:, :4])
        nn.init.normal_(relation.key_table)
        changed = layer(x, src_key_padding_mask=pad)
    assert not torch.allclose(changed, expected)
    with pytest.raises(ValueError):
        layer(x, src_key_padding_mask=pad)  # outside the block: the feature has no labels
    # the same through nn.TransformerEncoder (two copies of the layer)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    with bind_syntax(syntax, encoder):
        assert encoder(x, src_key_padding_mask=pad).shape == (2, 6, 16)


def test_binding_to_some_modules_only():
    a = SyntaxMultiheadAttention(8, 2, batch_first=True)
    b = SyntaxMultiheadAttention(8, 2, batch_first=True)
    s1, s2 = SyntaxInputs(), SyntaxInputs()
    with bind_syntax(s1):
        with bind_syntax(s2, b):
            assert a.bound_syntax() is s1 and b.bound_syntax() is s2
        assert b.bound_syntax() is s1
    assert a.bound_syntax() is None


def test_core_attn_mask_float_and_bool_agree():
    torch.manual_seed(1)
    attn = MultiheadAttention(16, 4).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    blocked = torch.rand(5, 5) < 0.4
    blocked[:, 0] = False
    additive = torch.zeros(5, 5, dtype=torch.float64).masked_fill(blocked, float("-inf"))
    torch.testing.assert_close(attn(x, attn_mask=blocked)[0], attn(x, attn_mask=additive)[0])
    torch.testing.assert_close(attn(x, attn_mask=blocked, need_weights=True)[0], attn(x, attn_mask=blocked)[0])
