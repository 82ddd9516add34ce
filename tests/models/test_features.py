"""Tree Transformer, Bird-Eye and structured attention inside the models (docs/methods.md §3–§5): configs,
feature placement, decoder-side hints from the data, training with the auxiliary losses, and
cached decoding."""

from __future__ import annotations

import pytest
import torch

from synattn.attention import MultiheadAttention
from synattn.methods.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer
from synattn.methods.constituent import ConstituentAttention
from synattn.methods.cross_attention import SegmentationAttention
from synattn.methods.relations import RelativePositions
from synattn.methods.supervised import SupervisedHead
from synattn.methods.syntactic import SyntacticAttention
from synattn.models import (
    EncoderDecoderConfig,
    LanguageModelConfig,
    MaskedLMConfig,
    PretrainedModel,
)
from synattn.train.tasks import syntax_request_for
from tests.helpers.models import TINY, VOCAB, tiny_mt

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
