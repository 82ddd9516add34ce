"""Where a method goes: the supervised head in several layers (its parse loss averaged over them),
BET(SG)/BET(SF) in a subset of the blocks, segmentation cross-attention in a subset of the decoder
layers (docs/attention.md#models); each choice changes the layers it names and nothing else."""

from __future__ import annotations

import pytest
import torch

from synattn.attention import SyntaxInputs
from synattn.methods.bird_eye import SyntaxGuidedPointer
from synattn.methods.cross_attention import SegmentationAttention
from synattn.methods.supervised import SupervisedHead
from synattn.models import EncoderDecoderConfig, LanguageModelConfig, TransformerLM
from tests.helpers.models import TINY, VOCAB, tiny_mt


def _lm(**decoder) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(LanguageModelConfig.from_dict(dict(TINY, vocab_size=VOCAB, decoder=dict(layers=3,
                                                                                               **decoder))))


def _causal_syntax(batch: int = 3, n: int = 7) -> tuple[torch.Tensor, SyntaxInputs]:
    """Token ids ``[batch, n]`` and head targets / hints at or before each position (causal)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (batch, n), generator=g)
    earlier = torch.stack([torch.randint(0, t + 1, (batch,), generator=g) for t in range(n)], 1)  # [batch, n]
    return ids, SyntaxInputs(head_targets=earlier, hints=earlier)


def _features(model, kind):
    return [[f for f in layer.self_attn.features if isinstance(f, kind)] for layer in model.decoder.layers]


# ------------------------------------------------------------------------------------------------
# the supervised head


def test_supervised_head_in_several_layers_averages_its_parse_loss():
    many = _lm(supervised_head=dict(layers=[0, 2], head=1, weight=0.6))
    heads = _features(many, SupervisedHead)
    assert [len(h) for h in heads] == [1, 0, 1]
    assert all(h[0].head == 1 and h[0].weight == pytest.approx(0.3) for h in heads if h)  # λ / |layers|
    assert many.config.decoder.supervised_head.layer == 0  # `layer` names the first of `layers`
    # the same weights with the head of layer 0 alone, at λ: its loss is twice layer 0's share
    one = _lm(supervised_head=dict(layer=0, head=1, weight=0.6))
    assert set(one.state_dict()) < set(many.state_dict())
    one.load_state_dict({k: v for k, v in many.state_dict().items() if k in one.state_dict()})
    ids, syntax = _causal_syntax()
    many.train(), one.train()
    out_many, out_one = many(ids, syntax=syntax), one(ids, syntax=syntax)
    assert set(out_many.losses) == {"decoder.0.parse", "decoder.2.parse"}
    assert set(out_one.losses) == {"decoder.0.parse"}
    torch.testing.assert_close(out_one.losses["decoder.0.parse"], 2 * out_many.losses["decoder.0.parse"])


def test_one_listed_layer_is_the_layer_setting():
    listed, single = _lm(supervised_head=dict(layers=[1])), _lm(supervised_head=dict(layer=1))
    assert listed.state_dict().keys() == single.state_dict().keys()
    ids, syntax = _causal_syntax()
    a, b = listed(ids, syntax=syntax), single(ids, syntax=syntax)
    torch.testing.assert_close(a.logits, b.logits)
    torch.testing.assert_close(a.losses["decoder.1.parse"], b.losses["decoder.1.parse"])


def test_supervised_layers_round_trip_and_layer_configs_stay_as_they_were():
    config = EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                                                 encoder=dict(layers=3, supervised_head=dict(layers=[2, 0]))))
    again = EncoderDecoderConfig.from_dict(config.to_dict())
    assert again.encoder.supervised_head == config.encoder.supervised_head
    assert again.encoder.supervised_head.placed == [2, 0]
    old = EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                                              encoder=dict(layers=4, supervised_head=dict(layer=3, head=1))))
    assert old.encoder.supervised_head.layers is None and old.encoder.supervised_head.placed == [3]


# ------------------------------------------------------------------------------------------------
# BET


def test_bet_sg_on_listed_blocks_only_adds_their_pointer_loss():
    every = _lm(bird_eye=dict(variant="sg", pointer_weight=0.5))
    last = _lm(bird_eye=dict(layers=[2], pointer_weight=0.5))
    assert [len(f) for f in _features(last, SyntaxGuidedPointer)] == [0, 0, 1]
    assert last.state_dict().keys() == every.state_dict().keys()
    ids, syntax = _causal_syntax()
    a, b = last(ids, syntax=syntax), every(ids, syntax=syntax)
    torch.testing.assert_close(a.logits, b.logits)  # the pointer loss leaves the attention as it is
    assert set(a.losses) == {"decoder.2.pointer"} and len(b.losses) == 3
    torch.testing.assert_close(a.losses["decoder.2.pointer"], b.losses["decoder.2.pointer"])


def test_bet_sf_on_listed_blocks():
    from synattn.methods.bird_eye import BirdEyeReweighting

    model = _lm(bird_eye=dict(variant="sf", layers=[0]))
    assert [len(f) for f in _features(model, BirdEyeReweighting)] == [1, 0, 0]


# ------------------------------------------------------------------------------------------------
# segmentation cross-attention


def test_segmentation_in_listed_decoder_layers_keeps_softmax_elsewhere():
    torch.manual_seed(0)
    model = tiny_mt(encoder=dict(layers=1), decoder=dict(layers=3, cross_attention="segmentation",
                                                         cross_attention_layers=[2]))
    kinds = [[type(f) for f in layer.cross_attn.features] for layer in model.decoder.layers]
    assert kinds == [[], [], [SegmentationAttention]]
    every = tiny_mt(encoder=dict(layers=1), decoder=dict(layers=3, cross_attention="segmentation"))
    extra = set(every.state_dict()) - set(model.state_dict())
    assert extra and all(k.startswith(("decoder.layers.0.", "decoder.layers.1.")) for k in extra)
    src, tgt = torch.randint(4, VOCAB, (2, 5)), torch.randint(4, VOCAB, (2, 4))
    assert torch.isfinite(model(src, tgt).logits).all()


# ------------------------------------------------------------------------------------------------
# mistakes


@pytest.mark.parametrize("decoder, message", [
    (dict(supervised_head=dict(layers=[])), r"^decoder\.supervised_head\.layers=\[\] lists no layer"),
    (dict(supervised_head=dict(layers=[1, 1])), r"^decoder\.supervised_head\.layers=\[1, 1\] lists layer 1 twice$"),
    (dict(supervised_head=dict(layers=[0, 3])),
     r"^decoder\.supervised_head\.layers has layer 3, out of range for decoder\.layers=3$"),
    (dict(supervised_head=dict(layer=2, layers=[0, 1])),
     r"^decoder\.supervised_head\.layer=2 is not among decoder\.supervised_head\.layers=\[0, 1\]: give one of them"),
    (dict(supervised_head=dict(layers="all")), r"^decoder\.supervised_head\.layers: expected"),
    (dict(bird_eye=dict(layers=[3])), r"^decoder\.bird_eye\.layers has layer 3, out of range for decoder\.layers=3$"),
    (dict(cross_attention_layers=[0]),
     r"^decoder\.cross_attention_layers is set, but decoder\.cross_attention is not set$"),
    (dict(cross_attention="segmentation", cross_attention_layers=[-1]),
     r"^decoder\.cross_attention_layers has layer -1, out of range for decoder\.layers=3$"),
    (dict(bird_eye=dict(pointer_head=1, layers=[1, 2]), supervised_head=dict(layers=[0, 1], head=1)),
     r"decoder\.bird_eye\.pointer_head=1 and decoder\.supervised_head \(layers \[0, 1\], head 1\) cannot share "
     r"a layer: both claim head 1"),
])
def test_bad_placements_are_one_line_errors(decoder, message):
    with pytest.raises(ValueError, match=message):
        EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                                            decoder=dict(layers=3, **decoder)))


def test_heads_on_different_layers_do_not_conflict():
    config = EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, decoder=dict(
        layers=3, bird_eye=dict(pointer_head=1, layers=[2]), supervised_head=dict(layers=[0, 1], head=1))))
    assert config.decoder.bird_eye.layers == [2]


# ------------------------------------------------------------------------------------------------
# Hugging Face entries: an entry's own `layers` places them, as before


def test_hugging_face_entries_take_no_second_layer_choice():
    from synattn.hf.features import FEATURES, normalize_specs

    assert "layers" not in FEATURES["bird_eye"].defaults and "layer" not in FEATURES["supervised_head"].defaults
    assert "layers" not in FEATURES["supervised_head"].defaults
    assert "cross_attention_layers" not in FEATURES["cross_attention"].defaults
    (spec,) = normalize_specs([{"feature": "bird_eye", "side": "decoder", "layers": [1]}])
    assert spec["layers"] == [1]
    with pytest.raises(ValueError, match="unknown option"):
        normalize_specs([{"feature": "cross_attention", "side": "cross", "cross_attention": "segmentation",
                          "cross_attention_layers": [0]}])
