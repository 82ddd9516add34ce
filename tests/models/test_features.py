"""Tree Transformer, Bird-Eye and structured attention inside the models (docs/methods.md §3–§5): configs,
feature placement, decoder-side hints from the data, training with the auxiliary losses, and
cached decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from synattn.attention import (
    IGNORE_INDEX,
    BirdEyeReweighting,
    ConstituentAttention,
    MultiheadAttention,
    RelativePositions,
    SegmentationAttention,
    SupervisedHead,
    SyntacticAttention,
    SyntaxGuidedPointer,
)
from synattn.data.batching import collate_examples
from synattn.data.subwords import BOS, EOS, PAD
from synattn.generate import beam_search, greedy_search
from synattn.models import (
    EncoderDecoderConfig,
    LanguageModelConfig,
    MaskedLM,
    MaskedLMConfig,
    PretrainedModel,
    TransformerLM,
)
from synattn.train.tasks import LanguageModelTask, TranslationTask, syntax_request_for
from tests.helpers.attention import random_heads
from tests.helpers.models import TINY, VOCAB, copy_pairs, tiny_mt

# ------------------------------------------------------------------------------------------------
# configs


@pytest.mark.parametrize("config, message", [
    (dict(decoder=dict(constituent=True)),
     r"decoder\.constituent=true, but constituent attention .* the decoder is causal"),
    (dict(decoder=dict(syntactic_attention=dict())),
     r"decoder\.syntactic_attention is set, but syntactic attention needs bidirectional .* decoder is causal"),
    (dict(encoder=dict(bird_eye="sg")),
     r"encoder\.bird_eye='sg', but Bird-Eye attention needs causal self-attention .* encoder is bidirectional"),
    (dict(decoder=dict(bird_eye="both")), r"decoder\.bird_eye='both': use one of sg, sf"),
    (dict(decoder=dict(bird_eye=dict(variant="sf", pointer_head=1))),
     r"decoder\.bird_eye\.pointer_head=1 is set, but decoder\.bird_eye='sf'"),
    (dict(decoder=dict(bird_eye=dict(variant="sg", pointer_head=2))),
     r"decoder\.bird_eye\.pointer_head=2 is out of range for heads=2"),
    (dict(decoder=dict(bird_eye=dict(pointer_weight=-1))), r"decoder\.bird_eye\.pointer_weight=-1 must be >= 0"),
    (dict(decoder=dict(layers=2, bird_eye=dict(pointer_head=1), supervised_head=dict(layer=1, head=1))),
     r"decoder\.bird_eye\.pointer_head=1 and decoder\.supervised_head \(layer 1, head 1\) cannot share a layer: "
     r"both claim head 1"),
    (dict(encoder=dict(cross_attention="segmentation")),
     r"encoder\.cross_attention='segmentation', but the encoder of this encoder_decoder model has no "
     r"cross-attention"),
    (dict(decoder=dict(cross_attention="softmax")), r"decoder\.cross_attention='softmax': use one of "
                                                     r"segmentation, sigmoid"),
    (dict(decoder=dict(cross_attention_normalize=True)),
     r"decoder\.cross_attention_normalize=true, but decoder\.cross_attention is not set"),
    (dict(encoder=dict(layers=2, syntactic_attention=dict(layer=2))),
     r"encoder\.syntactic_attention\.layer=2 is out of range for encoder\.layers=2"),
    (dict(encoder=dict(syntactic_attention=dict(head=3))),
     r"encoder\.syntactic_attention\.head=3 is out of range for heads=2"),
    (dict(encoder=dict(syntactic_attention=dict(head=1, children_head=1))),
     r"encoder\.syntactic_attention\.head=1 and encoder\.syntactic_attention\.children_head=1 are the same"),
    (dict(encoder=dict(syntactic_attention=dict(tree="dag"))),
     r"encoder\.syntactic_attention\.tree='dag': use one of projective, nonprojective"),
    (dict(encoder=dict(layers=2, supervised_head=dict(layer=1, head=0),
                       syntactic_attention=dict(layer=1, head=1, children_head=0))),
     r"encoder\.syntactic_attention \(layer 1, heads \[1, 0\]\) and encoder\.supervised_head \(layer 1, "
     r"head 0\) cannot share a layer: both claim head 0"),
    (dict(num_pos_tags=3, encoder=dict(specialized_heads=dict(heads=[1]), syntactic_attention=dict(head=1))),
     r"encoder\.syntactic_attention \(layer 0, heads \[1\]\) and encoder\.specialized_heads"),
    (dict(decoder=dict(syntactic_attention=dict(multiroot="yes"))),
     r"decoder\.syntactic_attention\.multiroot: expected bool"),
])
def test_bad_feature_combinations_are_rejected_naming_both(config, message):
    with pytest.raises(ValueError, match=message):
        EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **config))


def test_language_and_masked_models_reject_what_they_lack():
    with pytest.raises(ValueError, match=r"decoder\.cross_attention='sigmoid', but the decoder of this "
                                         r"language_model model has no cross-attention"):
        LanguageModelConfig.from_dict(dict(TINY, vocab_size=VOCAB, decoder=dict(cross_attention="sigmoid")))
    with pytest.raises(ValueError, match=r"encoder\.bird_eye='sf'"):
        MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB, encoder=dict(bird_eye="sf")))
    lm = LanguageModelConfig.from_dict(dict(TINY, vocab_size=VOCAB, decoder=dict(bird_eye="sg")))
    assert syntax_request_for(lm).tgt == {"hints"}  # the one decoder-side field an LM may ask for


@pytest.mark.parametrize("features, message", [
    (lambda: [BirdEyeReweighting(16, 2), SyntaxGuidedPointer()],
     "BirdEyeReweighting and SyntaxGuidedPointer cannot share a layer: a layer has one Bird-Eye attention"),
    (lambda: [RelativePositions(4, 8), SegmentationAttention(2)],
     "RelativePositions and SegmentationAttention cannot share a layer"),
    (lambda: [ConstituentAttention(16), SyntaxGuidedPointer()],
     "ConstituentAttention and SyntaxGuidedPointer cannot share a layer: ConstituentAttention is bidirectional, "
     "SyntaxGuidedPointer needs causal attention"),
    (lambda: [SupervisedHead(8, head=1), SyntacticAttention(16, head=0, children_head=1)],
     "SupervisedHead and SyntacticAttention cannot share a layer: both claim head 1"),
    (lambda: [SyntaxGuidedPointer(head=0), SupervisedHead(8, head=0)],
     "SyntaxGuidedPointer and SupervisedHead cannot share a layer: both claim head 0"),
])
def test_attention_rejects_incompatible_features_when_built(features, message):
    with pytest.raises(ValueError, match=message):
        MultiheadAttention(16, 2, features=features())


def test_bird_eye_needs_a_causal_call():
    attn = MultiheadAttention(16, 2, features=[BirdEyeReweighting(16, 2)])
    with pytest.raises(ValueError, match="BirdEyeReweighting needs causal self-attention"):
        attn(torch.randn(1, 3, 16))


def test_features_land_in_the_configured_layers():
    model = tiny_mt(encoder=dict(layers=3, constituent=True, relations=["sequential"],
                             syntactic_attention=dict(layer=1, head=1, tree="nonprojective", multiroot=True)),
                decoder=dict(layers=2, bird_eye=dict(variant="sg", pointer_weight=0.25, pointer_head=1),
                             cross_attention="sigmoid", cross_attention_normalize=True))
    kinds = [[type(f) for f in layer.self_attn.features] for layer in model.encoder.layers]
    assert kinds == [[RelativePositions, ConstituentAttention],
                     [RelativePositions, ConstituentAttention, SyntacticAttention],
                     [RelativePositions, ConstituentAttention]]
    constituent = [layer.self_attn.features[1] for layer in model.encoder.layers]
    assert [f.layer for f in constituent] == [0, 1, 2]
    assert not any(hasattr(f, "state") for f in constituent)  # a^l travel with each forward
    syntactic = model.encoder.layers[1].self_attn.features[2]
    assert (syntactic.head, syntactic.tree, syntactic.multiroot) == (1, "nonprojective", True)
    for layer in model.decoder.layers:
        (pointer,) = layer.self_attn.features
        assert isinstance(pointer, SyntaxGuidedPointer) and (pointer.weight, pointer.head) == (0.25, 1)
        (cross,) = layer.cross_attn.features
        assert isinstance(cross, SegmentationAttention) and (cross.mode, cross.normalize) == ("sigmoid", True)
    sf = tiny_mt(decoder=dict(layers=2, bird_eye="sf", cross_attention="segmentation"))
    assert all([type(f) for f in layer.self_attn.features] == [BirdEyeReweighting] for layer in sf.decoder.layers)
    assert all(layer.cross_attn.features[0].mode == "structured" for layer in sf.decoder.layers)
    assert all(not layer.self_attn.features for layer in sf.encoder.layers)


def test_save_load_round_trip_keeps_the_new_parameters(tmp_path):
    torch.manual_seed(0)
    model = tiny_mt(encoder=dict(layers=2, constituent=True, syntactic_attention=dict(layer=1)),
                decoder=dict(layers=1, bird_eye="sf", cross_attention="segmentation")).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path)
    loaded = PretrainedModel.from_pretrained(tmp_path).eval()
    src, tgt = torch.randint(4, VOCAB, (2, 6)), torch.randint(4, VOCAB, (2, 5))
    torch.testing.assert_close(loaded(src, tgt).logits, model(src, tgt).logits, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------
# Tree Transformer in the masked LM


def test_masked_lm_exposes_hierarchical_links_that_ignore_padding():
    torch.manual_seed(1)
    config = MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB, encoder=dict(layers=3, constituent=True)))
    mlm = MaskedLM(config).eval()
    tokens = torch.randint(5, VOCAB, (2, 7))
    tokens[1, 4:] = PAD
    links = mlm(tokens).constituent_links["encoder"]  # [B, L, n − 1]
    assert links.shape == (2, 3, 6)
    assert ((links >= 0) & (links <= 1)).all()
    assert (links[:, 1:] >= links[:, :-1] - 1e-6).all()  # a^l ≥ a^{l−1}: the hierarchy
    assert (links[1, :, 3:] == 0).all()  # edges touching padding are no links
    alone = mlm(tokens[1:, :4]).constituent_links["encoder"]
    torch.testing.assert_close(alone[0], links[1, :, :3])
    assert not hasattr(mlm.encoder, "constituent_state")  # nothing kept between forwards


def test_masked_lm_with_constituent_attention_learns():
    torch.manual_seed(2)
    mlm = MaskedLM(MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB, encoder=dict(layers=2, constituent=True))))
    tokens = torch.arange(5, 13).repeat(4, 1)  # a fixed sentence: learnable from the context
    masked = tokens.clone()
    masked[:, 3] = 4
    optimizer = torch.optim.Adam(mlm.parameters(), lr=0.02)
    losses = []
    for _ in range(25):
        loss = F.cross_entropy(mlm(masked).logits[:, 3], tokens[:, 3])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# ------------------------------------------------------------------------------------------------
# BET(SG): hints from the data, pointer loss in training


def reference_hints(piece_heads: np.ndarray, length: int) -> list[int]:
    """Hints over ``<s> y_0 .. y_{P-1}`` (+ padding), by walking up the tree from each y_t."""
    pieces = len(piece_heads)
    out = []
    for t in range(length):
        if t > pieces:
            out.append(IGNORE_INDEX)
            continue
        hint, head = t, (piece_heads[t] if t < pieces else 0)  # position P predicts </s>
        while head != 0:
            if head <= t:  # piece head − 1 sits at position head
                hint = head
                break
            head = piece_heads[head - 1]
        out.append(hint)
    return out


def _monolingual(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(2, 9))
        out.append({"src_ids": rng.integers(4, VOCAB, n).astype(np.int32), "src_heads": random_heads(rng, n)})
    return out


def test_collate_gives_shifted_hints_for_lm_and_translation_targets():
    examples = _monolingual(6, seed=3)
    batch = collate_examples(examples, syntax_request_for(
        LanguageModelConfig.from_dict(dict(TINY, vocab_size=VOCAB, decoder=dict(bird_eye="sg")))))
    n = batch.src.shape[1]
    hints = batch.tgt_syntax.hints
    assert hints.shape == (6, n) and batch.src_syntax is None
    for b, ex in enumerate(examples):
        assert hints[b].tolist() == reference_hints(ex["src_heads"], n)
    parallel = [{"src_ids": e["src_ids"], "tgt_ids": e["src_ids"], "tgt_heads": e["src_heads"]} for e in examples]
    batch = collate_examples(parallel, syntax_request_for(tiny_mt(decoder=dict(bird_eye="sg")).config))
    m = batch.tgt_in.shape[1]
    for b, ex in enumerate(examples):
        assert batch.tgt_syntax.hints[b].tolist() == reference_hints(ex["src_heads"], m)
    with pytest.raises(ValueError, match="needs hints on the tgt side, but the dataset has no tgt trees"):
        collate_examples([{"src_ids": e["src_ids"], "tgt_ids": e["src_ids"]} for e in examples],
                         syntax_request_for(tiny_mt(decoder=dict(bird_eye="sg")).config))


def test_lm_with_bet_sg_trains_with_the_pointer_loss_of_every_block():
    torch.manual_seed(4)
    lm = TransformerLM(LanguageModelConfig.from_dict(
        dict(TINY, vocab_size=VOCAB, decoder=dict(layers=2, bird_eye=dict(variant="sg", pointer_weight=0.5)))))
    examples = _monolingual(8, seed=5)
    request = syntax_request_for(lm.config)
    task = LanguageModelTask(request=request)
    batch = collate_examples(examples, task.syntax_request())
    loss, logs = task.loss(lm, batch)
    assert {k for k in logs if k.startswith("aux/")} == {"aux/decoder.0.pointer", "aux/decoder.1.pointer"}
    # the objective is the summed CE plus ntokens × Σ λ_p L_p, with L_p from the model's attention
    inputs = torch.cat([torch.full_like(batch.src[:, :1], BOS), batch.src[:, :-1]], dim=1)
    torch.manual_seed(0)
    out = lm(inputs, syntax=batch.tgt_syntax, need_weights=True)
    target = batch.src.masked_fill(batch.src_padding, IGNORE_INDEX)
    ce = F.cross_entropy(out.logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    tokens = int((~batch.src_padding).sum())
    hints, valid = batch.tgt_syntax.hints, ~batch.src_padding
    for layer, probs in enumerate(out.attentions["decoder.self"]):  # brute force, position by position
        terms = [-torch.log(probs[b].mean(0)[t, int(hints[b, t])])
                 for b in range(hints.shape[0]) for t in range(hints.shape[1]) if valid[b, t]]
        torch.testing.assert_close(out.losses[f"decoder.{layer}.pointer"], 0.5 * torch.stack(terms).mean())
    torch.testing.assert_close(loss, ce + tokens * sum(out.losses.values()), rtol=1e-5, atol=1e-4)
    # a few steps lower the pointer loss: the attention moves toward the hints
    optimizer = torch.optim.Adam(lm.parameters(), lr=0.02)
    pointer = []
    for _ in range(30):
        loss, logs = task.loss(lm, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        pointer.append(float(logs["aux/decoder.0.pointer"] + logs["aux/decoder.1.pointer"]))
    assert pointer[-1] < 0.7 * pointer[0], pointer
    lm.train()
    with pytest.raises(ValueError, match="hints"):  # training without hints is an error
        lm(inputs)


# ------------------------------------------------------------------------------------------------
# segmentation cross-attention: training and cached decoding


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
