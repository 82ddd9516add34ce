"""Model configs (strict validation, YAML), the three models, save/load round trip."""

from __future__ import annotations

import json

import pytest
import torch

from synattn.attention import SyntaxInputs
from synattn.errors import InputError
from synattn.methods.relations import RelativePositions, TreeRelations
from synattn.methods.specialized import SpecializedHeads
from synattn.methods.supervised import SupervisedHead
from synattn.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    LanguageModelConfig,
    MaskedLM,
    MaskedLMConfig,
    PretrainedModel,
    StackConfig,
    TransformerLM,
)

TINY = dict(d_model=16, heads=2, ffn_dim=32, dropout=0.0)


def _mt_config(**overrides) -> EncoderDecoderConfig:
    data = dict(TINY, src_vocab_size=23, tgt_vocab_size=19, num_pos_tags=5,
                encoder=dict(layers=2, relations=["tree_distance", "sequential"], max_distance=3,
                             specialized_heads=dict(source="pos", heads=[1]),
                             supervised_head=dict(layer=1, head=0)),
                decoder=dict(layers=2, relations=["sequential"], max_relative_position=3,
                             supervised_head=dict(layer=0, head=1, weight=0.5)))
    data.update(overrides)
    return EncoderDecoderConfig.from_dict(data)


def _src_syntax(batch: int, n: int, seed: int = 0) -> SyntaxInputs:
    g = torch.Generator().manual_seed(seed)
    return SyntaxInputs(tree_dist=torch.randint(0, 5, (batch, n, n), generator=g, dtype=torch.int8),
                        pos=torch.randint(0, 5, (batch, n), generator=g),
                        head_targets=torch.randint(0, n, (batch, n), generator=g))


# ------------------------------------------------------------------------------------------------
# configs


@pytest.mark.parametrize("change, message", [
    (dict(encoder=dict(layerz=2)),
     r"unknown key 'encoder\.layerz' in encoder \(did you mean 'encoder\.layers'\?\); known keys: layers"),
    (dict(colour="red"), r"unknown key 'colour'"),
    (dict(d_model="16"), r"d_model: expected int, got str"),
    (dict(tie_output=1), r"tie_output: expected bool, got int"),
    (dict(heads=True), r"heads: expected int, got bool"),
    (dict(encoder=dict(relations="sequential")), r"encoder\.relations: expected a list"),
    (dict(decoder=dict(supervised_head=dict(layer="0"))), r"decoder\.supervised_head\.layer: expected int"),
    (dict(heads=3), r"d_model=16 is not divisible by heads=3"),
    (dict(encoder=dict(layers=2, supervised_head=dict(layer=2))),
     r"encoder\.supervised_head\.layer=2 is out of range for encoder\.layers=2"),
    (dict(encoder=dict(supervised_head=dict(head=2))), r"encoder\.supervised_head\.head=2 is out of range for heads=2"),
    (dict(decoder=dict(specialized_heads=dict())), r"decoder\.specialized_heads is set, but .* encoder layer 0"),
    (dict(num_pos_tags=0, encoder=dict(specialized_heads=dict(source="pos"))),
     r"source='pos' needs num_pos_tags > 0, got num_pos_tags=0"),
    (dict(num_pos_tags=4, encoder=dict(specialized_heads=dict(heads=[0]), supervised_head=dict(layer=0, head=0))),
     r"encoder\.supervised_head \(layer 0, head 0\) and encoder\.specialized_heads \(layer 0, heads \[0\]\)"),
    (dict(encoder=dict(relations=["tree"])), r"unknown relation 'tree'"),
    (dict(encoder=dict(relation_layers=[0])), r"encoder\.relation_layers is set but encoder\.relations is empty"),
    (dict(encoder=dict(layers=2, relations=["traversal"], relation_layers=[5])),
     r"encoder\.relation_layers has layer 5, out of range for encoder\.layers=2"),
    (dict(share_embeddings=True), r"share_embeddings=true needs src_vocab_size == tgt_vocab_size.*23.*19"),
    (dict(norm="middle"), r"norm='middle'"),
    (dict(dropout=1.5), r"dropout=1.5 must be in \[0, 1\)"),
])
def test_bad_configs_are_rejected_with_both_sides_named(change, message):
    data = dict(TINY, src_vocab_size=23, tgt_vocab_size=19)
    data.update(change)
    with pytest.raises(ValueError, match=message):
        EncoderDecoderConfig.from_dict(data)


def test_direct_construction_is_validated_too():
    with pytest.raises(ValueError, match="vocab_size: expected int"):
        LanguageModelConfig(vocab_size=3.5)
    config = LanguageModelConfig(vocab_size=10, **TINY)
    config.decoder.layers = "2"  # changed after construction: the model re-validates
    with pytest.raises(ValueError, match=r"decoder\.layers: expected int"):
        TransformerLM(config)


def test_float_fields_accept_ints():
    assert EncoderDecoderConfig.from_dict(dict(src_vocab_size=5, tgt_vocab_size=5, dropout=0)).dropout == 0


def test_yaml_round_trip_and_file_errors(tmp_path):
    config = _mt_config()
    path = tmp_path / "model.yaml"
    config.to_yaml(path)
    assert EncoderDecoderConfig.from_yaml(path) == config
    bad = tmp_path / "bad.yaml"
    bad.write_text("src_vocab_size: 5\ntgt_vocab_size: 5\nencoder:\n  layers: two\n")
    with pytest.raises(InputError, match=rf"{bad}: encoder\.layers: expected int"):
        EncoderDecoderConfig.from_yaml(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("src_vocab_size: [5\n")
    with pytest.raises(InputError, match=rf"{broken}:\d+: invalid YAML"):
        EncoderDecoderConfig.from_yaml(broken)


def test_a_key_given_twice_is_an_error_naming_file_line_and_key(tmp_path):
    """The last of two equal keys won silently."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("src_vocab_size: 5\ntgt_vocab_size: 5\nencoder:\n  layers: 2\n  layers: 3\n")
    with pytest.raises(InputError, match=rf"{twice}:5: invalid YAML: duplicate key 'layers'"):
        EncoderDecoderConfig.from_yaml(twice)
    merged = tmp_path / "merged.yaml"  # a merge key may still override what it brings
    merged.write_text("src_vocab_size: 5\ntgt_vocab_size: 5\nencoder: &e {layers: 2}\n"
                      "decoder:\n  <<: *e\n  layers: 3\n")
    assert EncoderDecoderConfig.from_yaml(merged).decoder.layers == 3


def alias_bomb(levels: int = 10, width: int = 9) -> str:
    """A YAML value of ``width ** levels`` integers written in a few hundred characters."""
    text = "&l0 [" + ", ".join(["1"] * width) + "]"
    for i in range(1, levels):
        text = f"&l{i} [{text}" + f", *l{i - 1}" * (width - 1) + "]"
    return text


@pytest.mark.parametrize("where", ["d_model: {}", "encoder: {}", "encoder:\n  relations: {}",
                                   "dropout: {}", "{}: 1"])
def test_alias_bomb_is_a_short_error(tmp_path, where):
    """9^10 elements behind one alias: the error message formatted them all (39 s, out of memory)."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("src_vocab_size: 5\ntgt_vocab_size: 5\n" + where.format(alias_bomb()) + "\n")
    with pytest.raises(InputError) as caught:
        EncoderDecoderConfig.from_yaml(bomb)
    assert str(bomb) in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.parametrize("sizes, option", [
    (dict(d_model=1_000_000_000, heads=1), "d_model=1000000000"),
    (dict(d_model=100_000, heads=1), "d_model=100000"),
    (dict(ffn_dim=10 ** 12), "ffn_dim=1000000000000"),
    (dict(src_vocab_size=10 ** 13), "src_vocab_size=10000000000000"),
    (dict(encoder=dict(layers=2, relations=["sequential"], max_relative_position=10 ** 12)),
     "encoder.max_relative_position=1000000000000"),
    (dict(encoder=dict(layers=2, relations=["tree_distance"], max_distance=10 ** 9)),
     "encoder.max_distance=1000000000"),
])
def test_sizes_beyond_memory_are_a_config_error(sizes, option, monkeypatch):
    """model.d_model=1000000000 (or 100000) ended in a 23-line traceback from the allocator."""
    import synattn.limits as limits

    monkeypatch.setattr(limits, "memory_bytes", lambda: 64 * 10 ** 9)  # a 64 GB machine
    data = {**TINY, "src_vocab_size": 23, "tgt_vocab_size": 19, **sizes}
    with pytest.raises(ValueError, match=rf"^{option} is too large: .* would need about .* more than "
                                         r"this machine's 64 GB$"):
        EncoderDecoderConfig.from_dict(data)


# ------------------------------------------------------------------------------------------------
# models


def test_features_land_in_the_configured_layers():
    model = EncoderDecoderTransformer(_mt_config())
    kinds = [[type(f) for f in layer.self_attn.features] for layer in model.encoder.layers]
    assert kinds == [[SpecializedHeads, TreeRelations, RelativePositions],
                     [TreeRelations, RelativePositions, SupervisedHead]]
    kinds = [[type(f) for f in layer.self_attn.features] for layer in model.decoder.layers]
    assert kinds == [[RelativePositions, SupervisedHead], [RelativePositions]]
    assert all(len(layer.cross_attn.features) == 0 for layer in model.decoder.layers)
    assert model.encoder.layers[0].self_attn.features[1].num_labels == 3 + 2  # 0..3 and <far>


def test_translation_model_losses_and_padding():
    torch.manual_seed(0)
    model = EncoderDecoderTransformer(_mt_config()).eval()
    src = torch.randint(3, 23, (2, 6))
    src[1, 4:] = 0
    tgt = torch.randint(3, 19, (2, 5))
    tgt_syntax = SyntaxInputs(head_targets=torch.randint(0, 5, (2, 5)))
    out = model(src, tgt, _src_syntax(2, 6), tgt_syntax)
    assert out.logits.shape == (2, 5, 19)
    assert set(out.losses) == {"encoder.1.parse", "decoder.0.parse"}
    torch.testing.assert_close(out.aux_loss, out.losses["encoder.1.parse"] + out.losses["decoder.0.parse"])
    # the padded sentence alone (unpadded) gives the same output: padding is never attended
    syntax = _src_syntax(2, 6)
    alone = SyntaxInputs(tree_dist=syntax.tree_dist[1:, :4, :4], pos=syntax.pos[1:, :4])
    full = model(src, tgt, syntax).logits[1]
    torch.testing.assert_close(model(src[1:, :4], tgt[1:], alone).logits[0], full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_decoders_are_causal(norm):
    torch.manual_seed(1)
    lm = TransformerLM(LanguageModelConfig(vocab_size=17, norm=norm, **TINY,
                                           decoder=StackConfig(layers=2, relations=["sequential"]))).eval()
    tokens = torch.randint(3, 17, (2, 6))
    changed = tokens.clone()
    changed[:, 4:] = torch.randint(3, 17, (2, 2))
    torch.testing.assert_close(lm(changed).logits[:, :4], lm(tokens).logits[:, :4])
    mt = EncoderDecoderTransformer(_mt_config(norm=norm)).eval()
    src = torch.randint(3, 23, (2, 5))
    syntax = _src_syntax(2, 5)
    a = mt(src, tokens, syntax).logits[:, :4]
    b = mt(src, changed, syntax).logits[:, :4]
    torch.testing.assert_close(a, b)


def test_tied_and_shared_embeddings():
    model = EncoderDecoderTransformer(_mt_config(src_vocab_size=19, share_embeddings=True))
    assert model.embed_source is model.embed_target and model.output is None
    h = torch.randn(2, 3, 16)
    torch.testing.assert_close(model.project(h), h @ model.embed_target.weight.t())
    untied = EncoderDecoderTransformer(_mt_config(tie_output=False))
    assert untied.output.weight.shape == (19, 16)
    assert untied.embed_source is not untied.embed_target


def test_masked_lm_is_bidirectional():
    torch.manual_seed(2)
    mlm = MaskedLM(MaskedLMConfig(vocab_size=17, **TINY, encoder=StackConfig(layers=1))).eval()
    tokens = torch.randint(4, 17, (1, 5))
    changed = tokens.clone()
    changed[0, 4] = 3 if int(tokens[0, 4]) != 3 else 4
    assert not torch.allclose(mlm(changed).logits[0, 0], mlm(tokens).logits[0, 0])


# ------------------------------------------------------------------------------------------------
# save / load


def _models():
    yield (EncoderDecoderTransformer(_mt_config(src_vocab_size=19, share_embeddings=True, norm="pre")),
           lambda m: m(torch.arange(3, 9)[None], torch.arange(3, 8)[None], _src_syntax(1, 6)).logits)
    yield (TransformerLM(LanguageModelConfig(vocab_size=17, tie_output=False, **TINY,
                                             decoder=StackConfig(layers=1, relations=["sequential"]))),
           lambda m: m(torch.arange(3, 9)[None]).logits)
    yield (MaskedLM(MaskedLMConfig(vocab_size=17, **TINY, encoder=StackConfig(layers=1))),
           lambda m: m(torch.arange(3, 9)[None]).logits)


def test_save_load_round_trip(tmp_path):
    for i, (model, run) in enumerate(_models()):
        model.eval()
        with torch.no_grad():  # move every parameter away from its initial value
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        directory = tmp_path / str(i)
        model.save_pretrained(directory)
        assert sorted(p.name for p in directory.iterdir()) == ["config.json", "model.safetensors"]
        assert json.loads((directory / "config.json").read_text())["model_type"] == model.config.model_type
        for cls in (type(model), PretrainedModel):
            loaded = cls.from_pretrained(directory).eval()
            assert type(loaded) is type(model) and loaded.config == model.config
            torch.testing.assert_close(run(loaded), run(model), rtol=0, atol=0)


def test_loading_rejects_mismatches(tmp_path):
    model = TransformerLM(LanguageModelConfig(vocab_size=17, **TINY, decoder=StackConfig(layers=1)))
    model.save_pretrained(tmp_path)
    with pytest.raises(InputError, match="model_type is 'language_model', expected masked_lm"):
        MaskedLM.from_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["decoder"]["layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="model.safetensors: weights do not fit the config"):
        TransformerLM.from_pretrained(tmp_path)
    with pytest.raises(InputError, match="file not found"):
        TransformerLM.from_pretrained(tmp_path / "missing")


def test_yaml_reads_exponent_floats(tmp_path):
    from synattn.config_io import parse_yaml

    assert parse_yaml("lr: 5e-4\nsteps: 1e4\nname: e5\nx: 1.5\n") == {"lr": 5e-4, "steps": 1e4, "name": "e5", "x": 1.5}
