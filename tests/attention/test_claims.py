"""Conflicts between attention features are one rule (synattn/attention/claims.py), applied to the
claims of features stacked on one attention module and to the claims of methods in a model config."""

from __future__ import annotations

import pytest

from synattn.attention import Claim, MultiheadAttention, SpanAttention, check_compatible, find_conflict
from synattn.attention.claims import conflict
from synattn.errors import ConfigError
from synattn.methods import check_claims
from synattn.methods.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer
from synattn.methods.constituent import ConstituentAttention
from synattn.methods.cross_attention import SegmentationAttention
from synattn.methods.relations import RelativePositions
from synattn.methods.specialized import SpecializedHeads
from synattn.methods.supervised import SupervisedHead
from synattn.methods.syntactic import SyntacticAttention
from synattn.models import EncoderDecoderConfig, StackConfig
from tests.helpers.claims import Claims

TINY = dict(d_model=16, heads=4, ffn_dim=32, dropout=0.0, src_vocab_size=9, tgt_vocab_size=9)


def test_the_rule():
    a = Claim("a", (0, 1), frozenset({1}))
    assert conflict(a, Claim("b", (1,))) == "both claim head 1"
    assert conflict(a, Claim("b", (1,), frozenset({2}))) is None  # other layers
    assert conflict(a, Claim("b", (2,))) is None
    assert conflict(Claim("a", slot="prior"), Claim("b", slot="prior")) == "a layer has one prior"
    assert conflict(Claim("a", slot="prior"), Claim("b", slot="other")) is None
    assert conflict(Claim("c", direction="causal"), Claim("d", direction="bidirectional")) == (
        "d is bidirectional, c needs causal attention")
    assert conflict(Claim("c", direction="causal"), Claim("d", direction="causal")) is None
    assert conflict(Claim("x"), Claim("s", alone=True)).startswith("s replaces the distribution of every head")
    assert conflict(Claim("x", layers=frozenset({0})), Claim("s", alone=True, layers=frozenset({1}))) is None
    with pytest.raises(ValueError, match="direction 'left'"):
        Claim("x", direction="left")


def test_claims_of_one_owner_never_conflict_with_each_other():
    assert find_conflict([[Claim("a", (0,)), Claim("b", (0,))]]) is None
    assert find_conflict([[Claim("a", (0,))], [Claim("x")], [Claim("b", (0,))]]) == (
        "a and b cannot share a layer: both claim head 0")


@pytest.mark.parametrize("features, message", [
    (lambda: [SupervisedHead(4, head=2), SpecializedHeads(5, 4, [1, 2])],
     "SupervisedHead and SpecializedHeads cannot share a layer: both claim head 2"),
    (lambda: [SpecializedHeads(5, 4, [3]), SyntacticAttention(16, head=1, children_head=3)],
     "SpecializedHeads and SyntacticAttention cannot share a layer: both claim head 3"),
    (lambda: [SpanAttention(4, head=0), SyntacticAttention(16, head=0)], "both claim head 0"),
    (lambda: [SpanAttention(4, head=1), BirdEyeReweighting(16, 4)],
     "SpanAttention is bidirectional, BirdEyeReweighting needs causal attention"),
    (lambda: [SyntaxGuidedPointer(), SyntaxGuidedPointer(name="other")], "a layer has one Bird-Eye attention"),
    (lambda: [ConstituentAttention(16), ConstituentAttention(16)], "a layer has one constituent prior"),
    (lambda: [SegmentationAttention(4), SupervisedHead(4)],
     "SegmentationAttention replaces the distribution of every head"),
])
def test_features_on_one_module(features, message):
    with pytest.raises(ValueError, match=message):
        check_compatible(features())


def test_features_that_compose():
    check_compatible([RelativePositions(4, 4), SupervisedHead(4, head=1), SpecializedHeads(5, 4, [0]),
                      SyntacticAttention(16, head=2, children_head=3), ConstituentAttention(16)])
    check_compatible([SyntaxGuidedPointer(), SupervisedHead(4, head=0)])  # the pointer on the head average
    MultiheadAttention(16, 4, features=[SegmentationAttention(4)])


def test_a_config_and_the_features_it_builds_are_refused_by_the_same_rule():
    with pytest.raises(ConfigError, match=r"encoder\.syntactic_attention \(layer 0, heads \[2\]\) and "
                                          r"encoder\.supervised_head \(layer 0, head 2\) cannot share a layer: "
                                          r"both claim head 2$"):
        EncoderDecoderConfig.from_dict(dict(TINY, encoder=dict(layers=1, supervised_head=dict(layer=0, head=2),
                                                               syntactic_attention=dict(head=2))))
    with pytest.raises(ValueError, match="^SupervisedHead and SyntacticAttention cannot share a layer: "
                                         "both claim head 2$"):
        check_compatible([SupervisedHead(4, head=2), SyntacticAttention(16, head=2)])


def test_a_method_claiming_a_slot_or_a_direction_in_a_config():
    stack = StackConfig(layers=2)
    slot = Claims([Claim("encoder.x", slot="prior", layers=frozenset({1}))])
    check_claims(None, "encoder", stack, [slot, Claims([Claim("encoder.y", slot="prior", layers=frozenset({0}))])])
    with pytest.raises(ConfigError, match="^encoder.y and encoder.x cannot share a layer: a layer has one prior$"):
        check_claims(None, "encoder", stack, [slot, Claims([Claim("encoder.y", slot="prior")])])
    with pytest.raises(ConfigError, match="encoder.y is bidirectional, encoder.x needs causal attention"):
        check_claims(None, "encoder", stack, [Claims([Claim("encoder.x", direction="causal")]),
                                              Claims([Claim("encoder.y", direction="bidirectional")])])
