"""Incremental decoding with a key/value cache equals full recomputation; greedy and beam search."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from synattn.attention import SyntaxInputs
from synattn.generate import beam_search, greedy_search
from synattn.methods.bird_eye import BirdEyeReweighting
from synattn.methods.cross_attention import SegmentationAttention
from synattn.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    LanguageModelConfig,
    StackConfig,
    TransformerLM,
)
from synattn.trees.relations import batch_distance_labels, batch_traversal_labels, head_targets
from tests.helpers.attention import random_heads

TINY = dict(d_model=16, heads=2, ffn_dim=32, dropout=0.0)

DECODER_FEATURES = {
    "plain_post": dict(norm="post", decoder=dict(layers=2)),
    "plain_pre": dict(norm="pre", decoder=dict(layers=2)),
    "shaw": dict(decoder=dict(layers=2, relations=["sequential"], max_relative_position=2)),
    "shaw_keys_only": dict(decoder=dict(layers=2, relations=["sequential"], relative_values=False)),
    "supervised": dict(decoder=dict(layers=2, supervised_head=dict(layer=1, head=1))),
    "tree_distance": dict(decoder=dict(layers=2, relations=["tree_distance"])),
    "traversal_shaw": dict(decoder=dict(layers=2, relations=["traversal", "sequential"])),
    "all_no_positions": dict(absolute_positions=False, norm="pre",
                             decoder=dict(layers=2, relations=["traversal", "tree_distance", "sequential"],
                                          supervised_head=dict(layer=0, head=0))),
    "bird_eye_sg": dict(decoder=dict(layers=2, bird_eye=dict(variant="sg", pointer_head=1))),
    "bird_eye_sf": dict(norm="pre", decoder=dict(layers=2, bird_eye="sf", relations=["sequential"],
                                                 supervised_head=dict(layer=1, head=0))),
    # cross-attention features: translation only (the language model has no cross-attention)
    "segmentation": dict(decoder=dict(layers=2, cross_attention="segmentation")),
    "sigmoid_sf": dict(decoder=dict(layers=2, cross_attention="sigmoid", cross_attention_normalize=True,
                                    bird_eye="sf")),
}


def _target_syntax(batch: int, m: int, seed: int) -> SyntaxInputs:
    """Tree labels and head targets of random trees over all m positions."""
    rng = np.random.default_rng(seed)
    heads = np.stack([random_heads(rng, m) for _ in range(batch)])
    lengths = np.full(batch, m)
    return SyntaxInputs(tree_dist=torch.as_tensor(batch_distance_labels(heads, lengths)),
                        traversal=torch.as_tensor(batch_traversal_labels(heads, lengths)),
                        head_targets=torch.as_tensor(np.stack([head_targets(h) for h in heads])))


@torch.no_grad()
def _away_from_init(model):
    """BET(SF)'s γ and the segmentation pairwise tables start at 0 (plain diagonal-free / sigmoid
    attention); move them so that the cached levels and the chain CRF matter."""
    for module in model.modules():
        if isinstance(module, BirdEyeReweighting):
            module.gamma.fill_(0.7)
        if isinstance(module, SegmentationAttention) and module.pairwise is not None:
            module.pairwise.normal_(0.0, 1.0)
    return model


def _models(name: str):
    """The translation model and, unless the features are cross-attention ones, the LM."""
    features = DECODER_FEATURES[name]
    torch.manual_seed(0)
    mt = _away_from_init(EncoderDecoderTransformer(EncoderDecoderConfig.from_dict(
        dict(TINY, src_vocab_size=13, tgt_vocab_size=11, encoder=dict(layers=1), **features)))).eval()
    if "cross_attention" in features.get("decoder", {}):
        return mt, None
    lm = _away_from_init(TransformerLM(LanguageModelConfig.from_dict(dict(TINY, vocab_size=11, **features)))).eval()
    return mt, lm


@pytest.mark.parametrize("name", list(DECODER_FEATURES))
@torch.no_grad()
def test_cached_decoding_equals_full_recomputation(name):
    mt, lm = _models(name)
    src = torch.randint(3, 13, (2, 5))
    src[1, 3:] = 0  # source padding
    tokens = torch.randint(3, 11, (2, 7))
    tokens[:, 0] = 1
    syntax = _target_syntax(2, 7, seed=1)
    runs = [(mt, mt(src, tokens, tgt_syntax=syntax), mt.start_decoding(src))]
    if lm is not None:
        runs.append((lm, lm(tokens, syntax), lm.start_decoding()))
    for model, full, state in runs:
        logits = []
        for start, end in [(0, 2), (2, 3), (3, 4), (4, 7)]:  # a 2-token prompt, then steps
            out = model.decode_step(tokens[:, start:end], state, syntax)
            logits.append(out.logits)
            for key, log_probs in out.head_log_probs.items():
                torch.testing.assert_close(log_probs, full.head_log_probs[key][:, start:end, :end],
                                           atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.cat(logits, 1), full.logits, atol=1e-5, rtol=1e-5)
        assert state.length == 7


def test_tree_labels_are_required_when_the_decoder_uses_them():
    mt, _ = _models("tree_distance")
    state = mt.start_decoding(torch.randint(3, 13, (1, 4)))
    with pytest.raises(ValueError, match="tree_dist"):
        greedy_search(mt, state, torch.ones(1, 1, dtype=torch.long), 3, eos_id=2, pad_id=0)


@pytest.mark.parametrize("name", ["plain_post", "shaw", "supervised", "all_no_positions", "bird_eye_sf",
                                  "segmentation", "sigmoid_sf"])
@torch.no_grad()
def test_greedy_and_beam_search_with_cache_equal_without(name):
    mt, lm = _models(name)
    src = torch.randint(3, 13, (3, 5))
    src[2, 2:] = 0
    bos = torch.ones(3, 1, dtype=torch.long)
    syntax = _target_syntax(3, 8, seed=2) if name == "all_no_positions" else None
    runs = [(mt, lambda cache: mt.start_decoding(src, use_cache=cache))]
    if lm is not None:
        runs.append((lm, lambda cache: lm.start_decoding(use_cache=cache)))
    for model, start in runs:
        greedy = [greedy_search(model, start(cache), bos, 7, eos_id=2, pad_id=0, syntax=syntax)
                  for cache in (True, False)]
        assert torch.equal(greedy[0].tokens, greedy[1].tokens)
        torch.testing.assert_close(greedy[0].scores, greedy[1].scores)
        beams = [beam_search(model, start(cache), bos, 7, eos_id=2, pad_id=0, beam_size=3, syntax=syntax)
                 for cache in (True, False)]
        assert torch.equal(beams[0].tokens, beams[1].tokens)
        torch.testing.assert_close(beams[0].scores, beams[1].scores)


@torch.no_grad()
def test_greedy_search_follows_the_argmax_of_full_passes():
    mt, _ = _models("shaw")
    src = torch.randint(3, 13, (2, 4))
    out = greedy_search(mt, mt.start_decoding(src), torch.ones(2, 1, dtype=torch.long), 6, eos_id=2, pad_id=0)
    for b in range(2):
        prefix = [1]
        total = 0.0
        for _ in range(6):
            log_probs = torch.log_softmax(mt(src[b:b + 1], torch.tensor([prefix])).logits[0, -1], -1)
            token = int(log_probs.argmax())
            total += float(log_probs[token])
            prefix.append(token)
            if token == 2:
                break
        length = len(prefix) - 1
        assert out.tokens[b, :length].tolist() == prefix[1:] and int(out.lengths[b]) == length
        assert (out.tokens[b, length:] == 0).all()
        assert abs(float(out.scores[b]) - total) < 1e-4


@torch.no_grad()
def test_beam_size_one_is_greedy():
    _, lm = _models("shaw")
    prompt = torch.tensor([[1, 5], [1, 7]])
    greedy = greedy_search(lm, lm.start_decoding(), prompt, 6, eos_id=2, pad_id=0)
    beam = beam_search(lm, lm.start_decoding(), prompt, 6, eos_id=2, pad_id=0, beam_size=1, length_penalty=0.0)
    assert torch.equal(beam.tokens, greedy.tokens[:, :beam.tokens.shape[1]])
    torch.testing.assert_close(beam.scores, greedy.scores)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@torch.no_grad()
def test_wide_beam_finds_the_best_sequence_by_enumeration(length_penalty):
    """With a beam wider than the number of sequences, beam search is exact: compare with brute force."""
    torch.manual_seed(3)
    vocab, max_new = 4, 3  # tokens 0 pad, 1 bos, 2 eos, 3 word
    lm = TransformerLM(LanguageModelConfig(vocab_size=vocab, **TINY, decoder=StackConfig(layers=1))).eval()
    with torch.no_grad():
        lm.embed_target.embedding.weight.mul_(8.0)  # sharper, less uniform distributions
    prompt = torch.tensor([[1, 3]])
    best_score, best_seq = float("-inf"), None
    for length in range(1, max_new + 1):
        for seq in itertools.product(range(vocab), repeat=length):
            if 2 in seq[:-1] or (length < max_new and seq[-1] != 2):
                continue  # EOS only at the end; shorter sequences must end with EOS
            tokens = torch.tensor([[1, 3, *seq]])
            log_probs = torch.log_softmax(lm(tokens).logits[0], -1)
            total = sum(float(log_probs[1 + i, tok]) for i, tok in enumerate(seq))
            score = total / length ** length_penalty
            if score > best_score:
                best_score, best_seq = score, list(seq)
    out = beam_search(lm, lm.start_decoding(), prompt, max_new, eos_id=2, pad_id=0, beam_size=64,
                      length_penalty=length_penalty)
    assert out.tokens[0, :int(out.lengths[0])].tolist() == best_seq
    assert abs(float(out.scores[0]) - best_score) < 1e-4
