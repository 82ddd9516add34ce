"""generate() with synattn features: features off = the plain model's generation; with the
key/value cache on and off the same tokens, and the step logits equal those of one cache-free
forward over the generated sequence."""

import pytest
import torch

import synattn.hf as sh
from synattn.trees.relations import batch_relation_labels
from tests.helpers.hf_models import bart, gpt2

GREEDY = {"do_sample": False, "num_beams": 1, "max_new_tokens": 5, "min_new_tokens": 5,
          "pad_token_id": 0}
HEADS = torch.tensor([[2, 0, 2, 3, 4, 5, 4, 7, 8, 9], [3, 3, 0, 3, 4, 4, 6, 7, 7, 9]])


def relation_kwargs(prefix="syntax_"):
    dist, trav = batch_relation_labels(HEADS)  # [2, 10, 10]: prompt and generated tokens
    return {prefix + "tree_dist": dist, prefix + "traversal": trav}


def perturb(model):
    torch.manual_seed(5)
    with torch.no_grad():
        for p in model.synattn.parameters():
            p.add_(torch.randn_like(p) * 0.5)


def prompt(length=4):
    torch.manual_seed(2)
    return torch.randint(5, 50, (2, length))


@pytest.mark.parametrize("make", [gpt2, bart])
def test_features_off_generate_like_the_plain_model(make):
    torch.manual_seed(0)
    plain = make().eval()
    torch.manual_seed(0)
    other = make().eval()
    sh.attach(other, [])
    a = plain.generate(prompt(), **GREEDY, num_return_sequences=1)
    b = sh.generate(other, prompt(), **GREEDY)
    assert torch.equal(a, b)
    beams = {"num_beams": 2, "max_new_tokens": 4, "pad_token_id": 0, "do_sample": False}
    assert torch.equal(plain.generate(prompt(), **beams), other.generate(prompt(), **beams))


def step_logits(model, *args, **kwargs):
    out = sh.generate(model, *args, **GREEDY, output_logits=True, return_dict_in_generate=True,
                      **kwargs)
    return out.sequences, torch.stack(out.logits, dim=1)  # [B, steps, V]


def test_gpt2_cache_on_off_and_recomputation_agree():
    torch.manual_seed(0)
    model = gpt2().eval()
    sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"], "side": "decoder", "layers": [0]},
                      {"feature": "supervised_head", "side": "decoder", "layers": [1], "head": 1}])
    perturb(model)
    ids = prompt()
    cached, cached_logits = step_logits(model, ids, use_cache=True, **relation_kwargs())
    fresh, fresh_logits = step_logits(model, ids, use_cache=False, **relation_kwargs())
    assert torch.equal(cached, fresh)
    torch.testing.assert_close(cached_logits, fresh_logits, atol=1e-5, rtol=1e-5)
    full = model(cached[:, :-1], **relation_kwargs()).logits[:, ids.shape[1] - 1:]
    torch.testing.assert_close(cached_logits, full, atol=1e-5, rtol=1e-5)
    # the labels take part: other labels, other logits
    assert not torch.allclose(full, model(cached[:, :-1], **{
        k: torch.zeros_like(v) for k, v in relation_kwargs().items()}).logits[:, 3:])


def test_gpt2_decoder_relations_need_labels_for_the_whole_sequence():
    torch.manual_seed(0)
    model = gpt2().eval()
    sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"], "side": "decoder"}])
    short = {k: v[:, :6, :6] for k, v in relation_kwargs().items()}
    with pytest.raises(ValueError, match="attention covers"):
        sh.generate(model, prompt(), **GREEDY, **short)


def test_bart_encoder_and_decoder_features_cache_on_off_and_recomputation_agree():
    torch.manual_seed(0)
    model = bart().eval()
    sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"], "side": "encoder"},
                      {"feature": "constituent", "side": "encoder"},
                      {"feature": "supervised_head", "side": "encoder", "layers": [1]},
                      {"feature": "supervised_head", "side": "decoder", "layers": [0], "head": 3},
                      {"feature": "relations", "relations": ["sequential"], "side": "decoder", "layers": [1]},
                      {"feature": "cross_attention", "cross_attention": "segmentation", "side": "cross",
                       "layers": [1]}])
    perturb(model)
    src = prompt(10)
    kw = relation_kwargs()
    cached, cached_logits = step_logits(model, src, use_cache=True, **kw)
    fresh, fresh_logits = step_logits(model, src, use_cache=False, **kw)
    assert torch.equal(cached, fresh)
    torch.testing.assert_close(cached_logits, fresh_logits, atol=1e-5, rtol=1e-5)
    full = model(input_ids=src, decoder_input_ids=cached[:, :-1], **kw).logits
    torch.testing.assert_close(cached_logits, full, atol=1e-5, rtol=1e-5)
    # the source's syntax reaches the encoder during generate: other labels, other logits
    other = {k: torch.zeros_like(v) for k, v in kw.items()}
    _, other_logits = step_logits(model, src, **other)
    assert not torch.allclose(other_logits, cached_logits)
    beams = sh.generate(model, src, num_beams=2, max_new_tokens=4, do_sample=False, **kw)
    no_cache = sh.generate(model, src, num_beams=2, max_new_tokens=4, do_sample=False,
                           use_cache=False, **kw)
    assert torch.equal(beams, no_cache)


def test_features_without_cache_support_turn_the_cache_off():
    torch.manual_seed(0)
    model = gpt2().eval()
    sh.attach(model, [{"feature": "bird_eye", "variant": "sf", "side": "decoder", "layers": [1]}])
    perturb(model)
    ids = prompt()
    with pytest.warns(UserWarning, match="decoder_1: BirdEyeReweighting cannot decode with a "
                                         "key/value cache"):
        tokens, logits = step_logits(model, ids)
    full = model(tokens[:, :-1]).logits[:, ids.shape[1] - 1:]
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="use_cache=True, but decoder_1: BirdEyeReweighting"):
        sh.generate(model, ids, use_cache=True, **GREEDY)
    with pytest.raises(ValueError, match="does not support a key/value cache.*use_cache=False"):
        model.generate(ids, **GREEDY)


def test_use_syntax_restores_and_needs_features():
    model = gpt2().eval()
    with pytest.raises(ValueError, match="has no synattn features"):
        with sh.use_syntax(model):
            pass
    sh.attach(model, [])
    with sh.use_syntax(model, **relation_kwargs()):
        assert set(model.synattn.standing_syntax) == {"decoder"}
    assert model.synattn.standing_syntax is None
