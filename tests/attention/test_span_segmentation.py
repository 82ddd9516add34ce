"""Segmentation attention over labelled spans (semi-Markov CRF) against enumeration of the
segmentations at toy size, its reduction to the chain version, shapes, gradients and config."""

from __future__ import annotations

import pytest
import torch

from synattn.attention.segments import SpanSegmentationAttention
from synattn.attention.structured import SegmentationAttention
from synattn.models import EncoderDecoderConfig, EncoderDecoderTransformer
from tests.helpers.structured import SRC_PAD, D, H, bilinear_scores, output_from_weights, span_layer


def labelled_segmentations(length: int, longest: int):
    """Every segmentation of ``length`` positions into segments of ``1..longest`` positions,
    each labelled 0 or 1: lists of ``(start, size, label)``."""
    if length == 0:
        yield []
        return
    for size in range(1, min(longest, length) + 1):
        for rest in labelled_segmentations(length - size, longest):
            for label in (0, 1):
                yield [(0, size, label)] + [(a + size, k, c) for a, k, c in rest]


def brute_force(theta: torch.Tensor, transition: torch.Tensor, length_scores: torch.Tensor,
                longest: int) -> torch.Tensor:
    """p(j inside a segment labelled 1) ``[L]`` by enumeration, the scores of the module doc."""
    L = theta.shape[0]
    segs = list(labelled_segmentations(L, longest))
    scores = []
    for seg in segs:
        total, previous = theta.new_zeros(()), None
        for a, k, c in seg:
            total = total + c * theta[a:a + k].sum() + length_scores[k, c]
            if previous is not None:
                total = total + transition[previous, c]
            previous = c
        scores.append(total)
    p = torch.softmax(torch.stack(scores), 0)
    out = torch.zeros(L, dtype=theta.dtype)
    for weight, seg in zip(p, segs):
        for a, k, c in seg:
            if c == 1:
                out[a:a + k] += weight
    return out


@pytest.mark.parametrize("longest", [1, 2, 3])
def test_weights_are_the_probabilities_of_selected_segments(longest):
    attn, feature = span_layer(longest)
    x = torch.randn(3, 2, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    out, extras = attn(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    theta = bilinear_scores(attn, x, context)
    expected = torch.zeros_like(theta)
    for b, length in enumerate([4, 2, 1]):
        for h in range(H):
            for i in range(2):
                expected[b, h, i, :length] = brute_force(
                    theta[b, h, i, :length], feature.transition[h].detach(),
                    feature.length_scores[h].detach(), longest)
    assert extras.probs.shape == (3, H, 2, 4)
    assert ((extras.probs >= 0) & (extras.probs <= 1)).all()
    torch.testing.assert_close(extras.probs, expected)
    torch.testing.assert_close(out, output_from_weights(attn, expected, context))


def test_one_position_segments_are_the_chain_segmentation_attention():
    torch.manual_seed(1)
    spans, chain = SpanSegmentationAttention(H, 1), SegmentationAttention(H)
    with torch.no_grad():
        chain.pairwise.copy_(torch.randn(H, 2, 2))
        spans.transition.copy_(chain.pairwise)
    theta = torch.randn(2, H, 3, 5, dtype=torch.float64)
    lengths = torch.tensor([5, 3])
    torch.testing.assert_close(spans.marginals(theta, lengths)[1, ..., :3],
                               chain.marginals(theta, lengths)[1, ..., :3])
    torch.testing.assert_close(spans.marginals(theta, lengths)[0], chain.marginals(theta, lengths)[0])


def test_gradients_reach_every_parameter_and_gradcheck_holds():
    attn, feature = span_layer(2)
    x = torch.randn(2, 2, D, dtype=torch.float64)
    context = torch.randn(2, 4, D, dtype=torch.float64)
    out, _ = attn(x, context=context, key_padding_mask=SRC_PAD[:2])
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in attn.parameters())
    assert feature.length_scores.grad.abs().sum() > 0 and feature.transition.grad.abs().sum() > 0
    theta = torch.randn(1, 1, 1, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: feature.marginals(t.expand(1, H, 1, 4), torch.tensor([4])),
                                    (theta,))


def test_config_option_builds_the_feature_and_bad_values_are_errors():
    tiny = dict(d_model=16, heads=2, ffn_dim=32, dropout=0.0, src_vocab_size=20, tgt_vocab_size=20)
    config = EncoderDecoderConfig.from_dict(dict(tiny, decoder=dict(
        layers=1, cross_attention="segments", cross_attention_max_segment=3)))
    model = EncoderDecoderTransformer(config)
    features = [f for m in model.modules() if isinstance(m, SpanSegmentationAttention) for f in [m]]
    assert len(features) == 1 and features[0].max_length == 3
    src, tgt = torch.randint(4, 20, (2, 5)), torch.randint(4, 20, (2, 3))
    assert torch.isfinite(model(src, tgt).logits).all()
    with pytest.raises(ValueError, match="cross_attention_max_segment=0"):
        EncoderDecoderConfig.from_dict(dict(tiny, decoder=dict(
            cross_attention="segments", cross_attention_max_segment=0)))
    with pytest.raises(ValueError, match="max_length must be"):
        SpanSegmentationAttention(2, 0)


def test_decoding_with_the_static_cross_cache_equals_the_full_pass():
    from synattn.attention.cache import KVCache
    attn, _ = span_layer(3, seed=2)
    x = torch.randn(3, 3, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    full, _ = attn(x, context=context, key_padding_mask=SRC_PAD)
    cache = KVCache()
    steps = [attn(x[:, t:t + 1], context=context, key_padding_mask=SRC_PAD, cache=cache)[0]
             for t in range(3)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
