"""Structured cross-attention (docs/methods.md §5): segmentation attention against brute-force
enumeration of the chain, its sigmoid baseline; segmentation over labelled spans (semi-Markov CRF)
against enumeration of the segmentations at toy size, its reduction to the chain version, gradients
and config; a translation model that trains with it and decodes with a cache."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.attention import MultiheadAttention
from synattn.attention.cache import KVCache
from synattn.data.batching import collate_examples
from synattn.data.subwords import BOS, EOS, PAD
from synattn.generate import beam_search, greedy_search
from synattn.methods.cross_attention import SegmentationAttention, SpanSegmentationAttention
from synattn.models import EncoderDecoderConfig, EncoderDecoderTransformer
from synattn.train.tasks import TranslationTask
from tests.helpers.models import copy_pairs, tiny_mt
from tests.helpers.structured import (
    SRC_PAD,
    D,
    H,
    bilinear_scores,
    output_from_weights,
    seg_layer,
    span_layer,
)


def brute_chain(theta, pairwise):
    """p(z_i = 1) of one binary chain by enumerating all 2^L labelings."""
    length = theta.shape[0]
    log_weights, labelings = [], list(itertools.product([0, 1], repeat=length))
    for z in labelings:
        score = sum(theta[i] * z[i] for i in range(length))
        score = score + sum(pairwise[z[i - 1], z[i]] for i in range(1, length))
        log_weights.append(score)
    p = torch.softmax(torch.stack(log_weights), 0)
    return torch.stack([sum(p[k] for k, z in enumerate(labelings) if z[i]) for i in range(length)])


@pytest.mark.parametrize("normalize", [False, True])
def test_segmentation_weights_are_brute_force_marginals(normalize):
    attn, feature = seg_layer(normalize=normalize)
    x = torch.randn(3, 2, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    out, extras = attn(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    theta = bilinear_scores(attn, x, context)  # [B, H, n, m]
    expected = torch.zeros_like(theta)
    for b, length in enumerate([4, 2, 1]):
        for h in range(H):
            for i in range(2):
                p = brute_chain(theta[b, h, i, :length], feature.pairwise[h].detach())
                expected[b, h, i, :length] = 2 * p / p.sum() if normalize else p
    torch.testing.assert_close(extras.probs, expected)
    torch.testing.assert_close(out, output_from_weights(attn, expected, context))
    fresh, _ = attn(x, context=context, key_padding_mask=SRC_PAD)  # without need_weights
    torch.testing.assert_close(fresh, out)


def test_sigmoid_baseline_and_zero_pairwise():
    attn, _ = seg_layer("sigmoid")
    x = torch.randn(3, 2, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    _, extras = attn(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    expected = torch.sigmoid(bilinear_scores(attn, x, context)) * ~SRC_PAD[:, None, None, :]
    torch.testing.assert_close(extras.probs, expected)
    # a structured layer whose pairwise table is 0 (its initial state) is the sigmoid baseline
    torch.manual_seed(0)
    structured = MultiheadAttention(D, H, features=[SegmentationAttention(H)]).double()
    structured.load_state_dict(attn.state_dict(), strict=False)
    _, same = structured(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    torch.testing.assert_close(same.probs, expected)


def test_segmentation_gradcheck_padding_and_length_one():
    attn, feature = seg_layer(seed=1)
    x = torch.randn(2, 2, D, dtype=torch.float64, requires_grad=True)
    context = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False] * 3, [False, True, True]])

    assert torch.autograd.gradcheck(lambda a, c: attn(a, context=c, key_padding_mask=pad)[0],
                                    (x, context))
    out, extras = attn(x, context=context, key_padding_mask=pad, need_weights=True)
    assert (extras.probs[1, :, :, 1:] == 0).all()
    grads = torch.autograd.grad(out.sum(), [feature.pairwise, context])
    assert grads[0].abs().sum() > 0 and (grads[1][1, 1:] == 0).all()  # padding gets no gradient
    # a one-position source gives the sigmoid of its score, finite weights and gradients
    src = torch.randn(2, 1, D, dtype=torch.float64, requires_grad=True)
    out, extras = attn(x, context=src, need_weights=True)
    (g,) = torch.autograd.grad(out.sum(), [src])
    assert torch.isfinite(out).all() and torch.isfinite(g).all()
    torch.testing.assert_close(extras.probs, torch.sigmoid(bilinear_scores(attn, x, src)))


@pytest.mark.parametrize("feature", ["segmentation", "span segmentation"])
def test_decoding_with_the_static_cross_cache_equals_the_full_pass(feature):
    attn, _ = seg_layer(seed=2) if feature == "segmentation" else span_layer(3, seed=2)
    x = torch.randn(3, 3, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    full, _ = attn(x, context=context, key_padding_mask=SRC_PAD)
    cache = KVCache()
    steps = [attn(x[:, t:t + 1], context=context, key_padding_mask=SRC_PAD, cache=cache)[0]
             for t in range(3)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


# ------------------------------------------------------------------------------------------------
# segments: the semi-Markov version


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


# ------------------------------------------------------------------------------------------------
# in a translation model: training and cached decoding


@pytest.mark.parametrize("decoder", [dict(cross_attention="segmentation"),
                                     dict(cross_attention="segmentation", bird_eye="sf")])
def test_mt_with_segmentation_cross_attention_trains_and_decodes_with_cache(decoder):
    torch.manual_seed(6)
    model = tiny_mt(encoder=dict(layers=1), decoder=dict(layers=2, **decoder))
    batch = collate_examples(copy_pairs(12, seed=7))
    task = TranslationTask(0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(30):
        loss, logs = task.loss(model, batch)
        optimizer.zero_grad()
        (loss / logs["ntokens"]).backward()
        optimizer.step()
        losses.append(float(logs["nll_loss"] / logs["ntokens"]))
    assert losses[-1] < 0.75 * losses[0], losses
    pairwise = model.decoder.layers[0].cross_attn.features[0].pairwise
    assert pairwise.abs().sum() > 0  # the CRF's transition table learned
    model.eval()
    bos = torch.full((batch.src.shape[0], 1), BOS)
    with torch.no_grad():
        for search, kwargs in ((greedy_search, {}), (beam_search, dict(beam_size=3))):
            cached, full = (search(model, model.start_decoding(batch.src, use_cache=use), bos, 8, eos_id=EOS,
                                   pad_id=PAD, **kwargs) for use in (True, False))
            assert torch.equal(cached.tokens, full.tokens)
            torch.testing.assert_close(cached.scores, full.scores)
