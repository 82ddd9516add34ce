"""The method registry (synattn.methods): what the stack configs, the syntax request, the layers and
synattn.hf read from it, and the older spellings of the Bird-Eye settings."""

from __future__ import annotations

import dataclasses
import typing
import warnings

import pytest

from synattn.hf import FEATURES
from synattn.hf.methods import HFAdapter, adapter
from synattn.methods import Claim, Method, check_claims, method, methods, register, unregister
from synattn.methods.relations import RelationsConfig
from synattn.models import EncoderDecoderConfig, LanguageModelConfig, StackConfig
from synattn.models.config import BirdEyeConfig, undeclared
from synattn.train.experiment import ExperimentConfig
from tests.helpers.claims import Claims
from tests.helpers.paths import ROOT

TINY = dict(d_model=16, heads=2, ffn_dim=32, dropout=0.0)
CONFIGS = ROOT / "configs"


def test_the_built_in_methods_and_their_settings():
    names = [m.name for m in methods()]
    assert names[:7] == ["relations", "specialized_heads", "supervised_head", "constituent", "bird_eye",
                         "cross_attention", "syntactic_attention"]
    fields = [f.name for f in dataclasses.fields(StackConfig)]
    assert fields[:17] == ["layers", "relations", "relation_layers", "max_relative_position", "max_distance",
                           "max_traversal", "relative_values", "specialized_heads", "supervised_head",
                           "constituent", "constituent_diagonal", "bird_eye", "cross_attention",
                           "cross_attention_normalize", "cross_attention_max_segment", "cross_attention_layers",
                           "syntactic_attention"]
    assert set(fields[17:]) == {o.name for m in methods()[7:] for o in m.options()}


def test_the_static_stack_config_declares_exactly_the_registry_s_settings():
    """StackConfig is written out (for type checkers); its fields must stay the methods' own options:
    the same names in the same order, types and defaults."""
    hints = typing.get_type_hints(StackConfig)
    declared = [(f.name, hints[f.name], f.default_factory() if f.default_factory is not dataclasses.MISSING
                 else f.default) for f in dataclasses.fields(StackConfig)]
    registry = [(o.name, o.type, o.default_value()) for m in methods() for o in m.options()]
    assert declared == [("layers", int, 6)] + registry
    assert undeclared() == []


def test_a_flat_method_s_options_are_its_settings_dataclass_fields():
    assert [o.name for o in method("relations").options()] == [f.name for f in dataclasses.fields(RelationsConfig)]
    assert method("relations").options()[0].default_value() == [] and method("constituent").options()[1].default == 1.0


def test_a_method_missing_from_the_static_stack_config_is_named():
    class Extra(Method):
        name = "extra_bias"
        config = BirdEyeConfig

    register(Extra)
    try:
        assert undeclared() == ["extra_bias: synattn.methods.bird_eye.BirdEyeConfig | None = None  # Extra"]
    finally:
        unregister("extra_bias")


def test_hugging_face_features_come_from_the_registry():
    """One entry per method, under its name, whose options are its settings (less the layer choice)
    and a few Hugging Face extras, with the settings' defaults."""
    assert list(FEATURES)[:8] == [m.name for m in methods()][:8]
    assert set(FEATURES) == {m.name for m in methods() if m.config is not None}
    assert FEATURES["bird_eye"].sides == ("decoder",) and FEATURES["cross_attention"].sides == ("cross",)
    assert FEATURES["supervised_head"].defaults == {"head": 0, "weight": 1.0, "name": "parse"}
    assert FEATURES["relations"].defaults == {"relations": [], "max_relative_position": 16, "max_distance": 8,
                                              "max_traversal": 4, "relative_values": True}
    assert FEATURES["constituent"].defaults == {"constituent_diagonal": 1.0}
    for m in methods():
        settings = {f.name for f in dataclasses.fields(m.config)} if m.config else set()
        hf = adapter(m)
        extras = {o.name for o in hf.extras}
        assert set(FEATURES.get(m.name, FEATURES["relations"]).defaults if m.config else ()) == \
            (settings - set(hf.layer_keys) - set(hf.fixed)) | extras


def test_the_spec_holds_what_a_native_model_needs_and_hf_the_rest():
    """No member of a method's spec is for Hugging Face models only: those are its adapter's
    (synattn/hf/methods.py); a method without an adapter of its own gets the default one, built by
    the spec's ``feature``."""
    for m in methods():
        assert not [name for name in dir(type(m)) if name.startswith("hf") or name == "reads_hidden"], m.name
    assert type(adapter(method("tree_distance_bias"))) is HFAdapter
    assert type(adapter(method("supervised_head"))) is not HFAdapter
    assert FEATURES["specialized_heads"].sides == ("encoder", "decoder") != method("specialized_heads").sides


def test_a_name_is_registered_once():
    class Twice(Method):
        name = "supervised_head"

    with pytest.raises(ValueError, match="method 'supervised_head' is registered twice"):
        register(Twice)
    with pytest.raises(KeyError, match="no method 'nope'"):
        method("nope")


def test_the_default_placement_check_names_the_sides():
    class CrossOnly(Method):
        name = "cross_only"
        sides = ("cross",)

    mt = EncoderDecoderConfig(src_vocab_size=9, tgt_vocab_size=9, **TINY)
    spec = CrossOnly()
    assert spec.allowed(mt, "decoder") and not spec.allowed(mt, "encoder")
    assert spec.misplaced(mt, "encoder", None) == ("encoder.cross_only is set, but cross_only goes into "
                                                   "translation decoders' cross-attention only")


def test_claims_on_different_layers_or_heads_compose():
    stack = StackConfig(layers=3)
    spec = Method()
    a = Claim("a", (0,), frozenset({1}))

    check_claims(None, "encoder", stack, [Claims([a, Claim("b", (0,), frozenset({2})), Claim("c", (1,))])])
    with pytest.raises(ValueError, match="^c and a cannot share a layer: both claim head 0$"):
        check_claims(None, "encoder", stack, [Claims([a]), Claims([Claim("c", (0, 1))])])
    del spec


def _decoder(**decoder):
    return EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=9, tgt_vocab_size=9, decoder=decoder)).decoder


def test_bird_eye_is_a_section_and_its_string_is_a_shorthand():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _decoder(bird_eye="sf").bird_eye == BirdEyeConfig("sf")
        assert _decoder(bird_eye={"pointer_head": 1}).bird_eye == BirdEyeConfig("sg", 1.0, 1)
        assert StackConfig(bird_eye="sg").bird_eye == BirdEyeConfig()
        # the full dump of an older config without Bird-Eye attention loads silently
        old = dict(StackConfig().__dict__, bird_eye=None, pointer_weight=1.0, pointer_head=None)
        del old["layers"]
        assert _decoder(**old).bird_eye is None


def test_the_older_flat_pointer_keys_still_load_with_a_warning():
    with pytest.warns(FutureWarning, match=r"decoder\.pointer_weight, pointer_head: write them inside "
                                           r"decoder\.bird_eye"):
        stack = _decoder(layers=2, bird_eye="sg", pointer_weight=0.25, pointer_head=1)
    assert stack.bird_eye == BirdEyeConfig("sg", 0.25, 1)
    with pytest.raises(ValueError, match=r"decoder\.pointer_head=0 is set, but decoder\.bird_eye=None"):
        _decoder(pointer_head=0)
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match=r"decoder\.bird_eye\.pointer_head=1 is "
                                                                     r"set, but decoder\.bird_eye='sf'"):
        _decoder(bird_eye="sf", pointer_head=1)
    lm = LanguageModelConfig.from_dict(dict(TINY, vocab_size=9, decoder={"bird_eye": "sg", "pointer_weight": 1.0}))
    assert lm.decoder.bird_eye == BirdEyeConfig()


def test_the_bet_configs_load_as_sections():
    sg = ExperimentConfig.from_yaml(CONFIGS / "bet_sg.yaml")
    sf = ExperimentConfig.from_yaml(CONFIGS / "bet_sf.yaml")
    assert sg.model["decoder"]["bird_eye"] == {"variant": "sg", "pointer_weight": 1.0}
    assert sf.model["decoder"]["bird_eye"] == "sf"


def test_every_method_checks_heads_and_layers_with_the_shared_range_check(monkeypatch):
    """The head/layer indices of every method go through check_head / check_layer (one message)."""
    from synattn.methods import base

    checked = []
    real = base._check_range
    monkeypatch.setattr(base, "_check_range", lambda value, where, *rest: (checked.append(where),
                                                                           real(value, where, *rest)))
    EncoderDecoderConfig.from_dict(dict(src_vocab_size=9, tgt_vocab_size=9, num_pos_tags=3, **TINY, encoder=dict(
        layers=2, relations=["sequential"], relation_layers=[1], specialized_heads={"heads": [1]},
        syntactic_attention={"layer": 1, "children_head": 1}, tree_distance_bias={"layers": [0]}),
        decoder=dict(layers=2, supervised_head={"layer": 1}, bird_eye={"pointer_head": 1})))
    assert sorted(checked) == sorted([
        "encoder.relation_layers", "encoder.specialized_heads.heads", "encoder.syntactic_attention.layer",
        "encoder.syntactic_attention.head", "encoder.syntactic_attention.children_head",
        "encoder.tree_distance_bias.layers", "decoder.supervised_head.layer", "decoder.supervised_head.head",
        "decoder.bird_eye.pointer_head"])
    with pytest.raises(ValueError, match=r"^encoder\.specialized_heads\.heads has head 5, out of range for heads=2$"):
        base.check_head([0, 5], "encoder.specialized_heads.heads", 2)
