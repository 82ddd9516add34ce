"""Label-gather relative attention equals a naive reference that materialises [B, n, m, d_k]."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.attention import KVCache, MultiheadAttention, SyntaxInputs
from synattn.methods.relations import RelativePositions, TreeRelations, label_logits, label_values, sequential_labels
from synattn.trees.relations import batch_distance_labels, batch_traversal_labels, distance_vocab, traversal_vocab
from tests.helpers.attention import dense_allowed, naive_attention, random_heads

D, H = 12, 3
DK = D // H


def _batch_trees(rng, lengths):
    """Padded heads ``[B, n]`` of random trees and their lengths."""
    n = max(lengths)
    heads = np.zeros((len(lengths), n), dtype=np.int64)
    for b, length in enumerate(lengths):
        heads[b, :length] = random_heads(rng, length, roots=1 + int(rng.integers(0, 2)) if length > 1 else 1)
    return heads, np.array(lengths)


def _grads(loss, tensors):
    return torch.autograd.grad(loss, tensors, allow_unused=False)


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 3), n=st.integers(1, 7), m=st.integers(1, 7), num_labels=st.integers(1, 9),
       seed=st.integers(0, 10_000))
def test_label_gather_equals_materialised_einsum(b, n, m, num_labels, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, n, DK, generator=g, dtype=torch.float64, requires_grad=True)
    probs = torch.rand(b, H, n, m, generator=g, dtype=torch.float64, requires_grad=True)
    table = torch.randn(num_labels, DK, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, num_labels, (b, n, m), generator=g, dtype=torch.int16)
    emb = table[labels.long()]  # [B, n, m, d_k]
    ref_logits = torch.einsum("bhid,bijd->bhij", q, emb)
    ref_values = torch.einsum("bhij,bijd->bhid", probs, emb)
    got_logits, got_values = label_logits(q, table, labels), label_values(probs, table, labels)
    torch.testing.assert_close(got_logits, ref_logits)
    torch.testing.assert_close(got_values, ref_values)
    w1 = torch.randn(ref_logits.shape, generator=g, dtype=torch.float64)
    w2 = torch.randn(ref_values.shape, generator=g, dtype=torch.float64)
    ref = _grads((ref_logits * w1).sum() + (ref_values * w2).sum(), [q, probs, table])
    got = _grads((got_logits * w1).sum() + (got_values * w2).sum(), [q, probs, table])
    for a, e in zip(got, ref):
        torch.testing.assert_close(a, e)


def test_sequential_labels_are_clipped_offsets():
    for start, n, m, k in [(0, 5, 5, 2), (3, 1, 4, 1), (2, 3, 5, 8)]:
        labels = sequential_labels(start, n, m, k)[0]
        for i in range(n):
            for j in range(m):
                assert labels[i, j] == max(-k, min(k, j - (start + i))) + k


def _layer_and_reference_tables(kind: str, values: bool):
    """A layer with the named relation features, and the (feature, field) pairs to materialise."""
    feats = {
        "shaw": [RelativePositions(2, DK, values)],
        "tree_dist": [TreeRelations("tree_dist", len(distance_vocab(3)), DK, values)],
        "traversal": [TreeRelations("traversal", len(traversal_vocab(3)), DK, values)],
        "tree_shaw": [TreeRelations("tree_dist", len(distance_vocab(3)), DK, values),
                      RelativePositions(2, DK, values)],
        "traversal_shaw": [TreeRelations("traversal", len(traversal_vocab(3)), DK, values),
                           RelativePositions(3, DK, values)],
    }[kind]
    return MultiheadAttention(D, H, features=feats).double()


def _labels_of(feature, syntax, n):
    if isinstance(feature, RelativePositions):
        return sequential_labels(0, n, n, feature.max_relative).expand(syntax.tree_dist.shape[0], n, n)
    return getattr(syntax, feature.field)


@pytest.mark.parametrize("kind", ["shaw", "tree_dist", "traversal", "tree_shaw", "traversal_shaw"])
@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_relative_attention_on_real_trees_equals_naive(kind, values, causal):
    rng = np.random.default_rng(hash((kind, values, causal)) % 2**32)
    torch.manual_seed(int(rng.integers(0, 2**31)))
    heads, lengths = _batch_trees(rng, [7, 4, 1])
    syntax = SyntaxInputs(tree_dist=torch.as_tensor(batch_distance_labels(heads, lengths, max_distance=3)),
                          traversal=torch.as_tensor(batch_traversal_labels(heads, lengths, max_traversal=3)))
    attn = _layer_and_reference_tables(kind, values)
    n = heads.shape[1]
    x = torch.randn(3, n, D, dtype=torch.float64, requires_grad=True)
    pad = torch.as_tensor(np.arange(n)[None, :] >= lengths[:, None])
    keys = [(f.key_table, _labels_of(f, syntax, n)) for f in attn.features]
    vals = [(f.value_table, _labels_of(f, syntax, n)) for f in attn.features] if values else []
    expected, probs = naive_attention(attn, x, allowed=dense_allowed(pad, causal, n, n, batch=3),
                                      key_embeddings=keys, value_embeddings=vals)
    params = [x] + list(attn.parameters())
    w = torch.randn_like(expected)
    ref = _grads((expected * w).sum(), params)
    for need_weights in (False, True):
        out, extras = attn(x, key_padding_mask=pad, causal=causal, syntax=syntax, need_weights=need_weights)
        torch.testing.assert_close(out, expected)
        if need_weights:
            torch.testing.assert_close(extras.probs, probs)
        for a, e in zip(_grads((out * w).sum(), params), ref):
            torch.testing.assert_close(a, e)


def test_tree_labels_follow_query_positions_in_incremental_decoding():
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    heads, lengths = _batch_trees(rng, [6, 6])
    syntax = SyntaxInputs(traversal=torch.as_tensor(batch_traversal_labels(heads, lengths)))
    attn = MultiheadAttention(D, H, features=[TreeRelations("traversal", len(traversal_vocab()), DK),
                                              RelativePositions(2, DK)]).eval()
    x = torch.randn(2, 6, D)
    full, _ = attn(x, causal=True, syntax=syntax)
    cache = KVCache()
    steps = [attn(x[:, t:t + 1], causal=True, syntax=syntax, cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_too_short_labels_are_reported():
    attn = MultiheadAttention(D, H, features=[TreeRelations("tree_dist", 10, DK)])
    syntax = SyntaxInputs(tree_dist=torch.zeros(1, 3, 3, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"\[1, 3, 3\]"):
        attn(torch.randn(1, 5, D), syntax=syntax)


@pytest.mark.parametrize("labels, message", [
    (torch.full((1, 4, 4), 12), r"labels 12..12, but this table has 10 \(0..9\)"),
    (torch.full((1, 4, 4), -1), "labels -1..-1"),
    (torch.zeros(1, 4, 4), "holds torch.float32 values; labels are integer ids"),
])
def test_tree_labels_outside_the_table_are_errors(labels, message):
    attn = MultiheadAttention(16, 2, features=[TreeRelations("tree_dist", 10, 8)])
    with pytest.raises(ValueError, match=message):
        attn(torch.randn(1, 4, 16), syntax=SyntaxInputs(tree_dist=labels))


def test_a_table_of_another_head_width_is_an_error():
    with pytest.raises(ValueError, match="TreeRelations was built for heads of width 32, but this attention's "
                                         r"heads are 8 wide \(d_model 16 / 2 heads\)"):
        MultiheadAttention(16, 2, features=[TreeRelations("tree_dist", 10, 32)])
