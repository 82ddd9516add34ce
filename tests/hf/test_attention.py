"""synattn features inside transformers models: features off = the plain model bit for bit,
features on = synattn's own MultiheadAttention on the model's projections."""

import warnings

import pytest
import torch

import synattn.hf as sh
from synattn.attention import MultiheadAttention, SyntaxInputs
from synattn.hf.attention import SynattnCall
from synattn.trees.relations import batch_relation_labels, head_targets
from tests.helpers.hf_models import INPUT_SIDE, MODELS, bert, gpt2

HEADS = torch.tensor([[2, 0, 2, 3, 4, 5], [2, 0, 2, 3, 0, 0]])  # second sentence: 4 words
LENGTHS = torch.tensor([6, 4])


def inputs(name):
    torch.manual_seed(1)
    ids = torch.randint(5, 50, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    kw = {"input_ids": ids, "attention_mask": mask}
    if name in ("bart", "t5"):
        kw["decoder_input_ids"] = ids
    return kw


def syntax_kwargs(prefix="syntax_"):
    dist, trav = batch_relation_labels(HEADS, LENGTHS)
    targets = head_targets(HEADS).masked_fill(torch.arange(6) >= LENGTHS[:, None], -100)
    return {prefix + "tree_dist": dist, prefix + "traversal": trav, prefix + "head_targets": targets}


def pair(name):
    torch.manual_seed(0)
    plain = MODELS[name]().eval()
    torch.manual_seed(0)
    other = MODELS[name]().eval()
    return plain, other


@pytest.mark.parametrize("name", sorted(MODELS))
def test_features_off_is_the_plain_model_bit_for_bit(name):
    plain, other = pair(name)
    sh.attach(other, [])
    assert other.config._attn_implementation == "synattn"
    assert [n for n, _ in other.named_parameters()] == [n for n, _ in plain.named_parameters()]
    kw = inputs(name)
    assert torch.equal(plain(**kw).logits, other(**kw).logits)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zero_relation_tables_give_the_plain_model(name):
    """The explicit path with a feature adding zero computes the plain model's attention (T5's
    position bias and unscaled logits, GPT-2's causal mask, BART's decoder included)."""
    plain, other = pair(name)
    sides = ["encoder", "decoder"] if name in ("bart", "t5") else [INPUT_SIDE[name]]
    sh.attach(other, [{"feature": "relations", "relations": ["tree_distance"], "side": s} for s in sides])
    with torch.no_grad():
        for p in other.synattn.parameters():
            p.zero_()
    kw = inputs(name)
    extra = syntax_kwargs()
    if "decoder" in sides and name != "gpt2":
        extra.update(syntax_kwargs("decoder_syntax_"))
    torch.testing.assert_close(other(**kw, **extra).logits, plain(**kw).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_bert_layer_equals_synattn_multihead_attention(need_weights):
    """BERT's self-attention with tree relations and a supervised head through the attention
    interface = synattn's MultiheadAttention with BERT's projections and the same features."""
    torch.manual_seed(0)
    model = bert("base").double().eval()
    sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"], "layers": [0]},
                      {"feature": "supervised_head", "layers": [0], "head": 2, "weight": 0.5}])
    site = model.synattn.encoder_0
    with torch.no_grad():
        for p in site.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    module = model.encoder.layer[0].attention.self
    mha = MultiheadAttention(32, 4, features=list(site.features)).double().eval()
    for ours, theirs in ((mha.q_proj, module.query), (mha.k_proj, module.key), (mha.v_proj, module.value)):
        ours.load_state_dict(theirs.state_dict())
    with torch.no_grad():
        mha.out_proj.weight.copy_(torch.eye(32))
        mha.out_proj.bias.zero_()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    padding = torch.arange(6)[None] >= LENGTHS[:, None]
    kw = syntax_kwargs()
    syntax = SyntaxInputs(tree_dist=kw["syntax_tree_dist"], head_targets=kw["syntax_head_targets"])
    call = SynattnCall(syntax={"encoder": syntax})
    out, probs = module(x, attention_mask=~padding[:, None, None, :], synattn_call=call,
                        output_attentions=need_weights)
    expected, extras = mha(x, key_padding_mask=padding, syntax=syntax, need_weights=need_weights)
    keep = ~padding
    torch.testing.assert_close(out[keep], expected[keep])
    torch.testing.assert_close(call.losses["encoder_0.parse"], extras.losses["parse"])
    if need_weights:
        torch.testing.assert_close(probs, extras.probs)


def test_supervised_head_loss_is_the_mean_nll_of_the_gold_heads():
    torch.manual_seed(0)
    model = bert().eval()
    sh.attach(model, [{"feature": "supervised_head", "layers": [1], "weight": 2.0}])
    kw = syntax_kwargs()
    out = model(**inputs("bert"), syntax_head_targets=kw["syntax_head_targets"])
    log_probs = out.synattn_head_log_probs["encoder_1.parse"]  # [B, n, m]
    targets = kw["syntax_head_targets"]
    valid = targets >= 0
    nll = -log_probs.gather(-1, targets.clamp(min=0)[..., None])[..., 0][valid].mean()
    torch.testing.assert_close(out.synattn_losses["encoder_1.parse"], 2.0 * nll)
    assert out.loss is not None  # no labels: the loss is the auxiliary loss
    assert out["loss"] is out.loss and out.to_tuple()[0] is out.loss  # where Trainer reads it
    labels = torch.zeros(2, 6, dtype=torch.long)
    with_labels = model(**inputs("bert"), labels=labels, syntax_head_targets=targets)
    plain_loss = model(**inputs("bert"), labels=labels).loss
    torch.testing.assert_close(with_labels.loss, plain_loss + 2.0 * nll)


def test_decoder_features_stay_causal():
    torch.manual_seed(0)
    model = gpt2().eval()
    sh.attach(model, [{"feature": "supervised_head", "side": "decoder", "layers": [1]},
                      {"feature": "relations", "relations": ["traversal"], "side": "decoder"}])
    kw = inputs("gpt2")
    changed = {k: v.clone() for k, v in kw.items()}
    changed["input_ids"][:, -1] = 7
    a = model(**kw, **syntax_kwargs()).logits
    b = model(**changed, **syntax_kwargs()).logits
    torch.testing.assert_close(a[0, :-1], b[0, :-1])
    assert not torch.allclose(a[0, -1], b[0, -1])


def test_causal_supervised_head_leaves_out_targets_to_the_right():
    torch.manual_seed(0)
    model = gpt2().eval()
    sh.attach(model, [{"feature": "supervised_head", "side": "decoder", "layers": [0]}])
    right = torch.arange(1, 7).clamp(max=5).expand(2, 6)  # t -> t + 1 (the last: itself)
    out = model(**inputs("gpt2"), syntax_head_targets=right)
    log_probs = out.synattn_head_log_probs["decoder_0.parse"]
    right_of_diagonal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (log_probs[:, right_of_diagonal] < -1e30).all()  # never attended
    expected = -log_probs[0, 5, 5]  # only the last position of the full row has an attendable target
    torch.testing.assert_close(out.synattn_losses["decoder_0.parse"], expected)


def test_gradients_reach_the_model_and_the_added_weights():
    torch.manual_seed(0)
    model = bert().train()
    sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"]},
                      {"feature": "supervised_head", "layers": [1]}])
    model(**inputs("bert"), **syntax_kwargs()).loss.backward()
    assert model.synattn.encoder_0.features[0].value_table.grad.abs().sum() > 0
    assert model.synattn.encoder_1.features[1].bilinear.grad.abs().sum() > 0
    assert model.bert.encoder.layer[1].attention.self.query.weight.grad.abs().sum() > 0


def test_remaining_features_run_where_the_architecture_allows():
    torch.manual_seed(0)
    from tests.helpers.hf_models import bart
    model = bart().train()
    sh.attach(model, [
        {"feature": "constituent", "side": "encoder"},
        {"feature": "specialized_heads", "side": "encoder", "layers": [0], "num_labels": 5, "heads": [1]},
        {"feature": "syntactic_attention", "side": "encoder", "layers": [1], "head": 3, "arc_dim": 8},
        {"feature": "bird_eye", "variant": "sg", "side": "decoder", "layers": [1]},
        {"feature": "relations", "relations": ["sequential"], "side": "decoder", "layers": [1],
         "max_relative_position": 3},
        {"feature": "bird_eye", "variant": "sf", "side": "decoder", "layers": [0]},
        {"feature": "cross_attention", "cross_attention": "segmentation", "side": "cross", "layers": [1]},
    ])
    kw = inputs("bart")
    kw["attention_mask"] = torch.ones(2, 6, dtype=torch.long)
    hints = torch.tensor([[0, 0, 1, 3, 3, -100], [0, 1, 1, 2, 4, -100]])
    out = model(**kw, syntax_pos=torch.randint(0, 5, (2, 6)), decoder_syntax_hints=hints,
                labels=kw["input_ids"])
    assert set(out.synattn_losses) == {"decoder_1.pointer"}
    assert model.synattn.constituent_links().shape == (2, 2, 5)
    out.loss.backward()
    for name, p in model.synattn.named_parameters():
        assert p.grad is not None, name


@pytest.mark.parametrize("spec, message", [
    ({"feature": "nope"}, "unknown feature"),
    ({"feature": "bird_eye", "side": "encoder"}, "cannot go into side"),
    ({"feature": "supervised_head", "layers": [5]}, r"layer\(s\) \[5\] do not exist"),
    ({"feature": "cross_attention", "side": "cross", "cross_attention": "segmentation"}, "has no cross attention"),
    ({"feature": "supervised_head", "lambda": 1}, "unknown option"),
    # the method's own validate, as in a model config
    ({"feature": "supervised_head", "head": 7},
     r"^synattn feature #0 \(supervised_head\): encoder\.supervised_head\.head=7 is out of range for heads=4$"),
    ({"feature": "supervised_head", "head": 1.5}, r"\(supervised_head\): head: expected int, got float \(1\.5\)"),
    ({"feature": "supervised_head", "weight": "x"}, "weight: expected float, got str"),
    ({"feature": "supervised_head", "weight": -1}, r"supervised_head\.weight=-1 must be >= 0"),
    ({"feature": "specialized_heads", "heads": [0, 9]}, "heads has head 9, out of range for heads=4"),
    ({"feature": "specialized_heads", "heads": []}, "must be distinct and non-empty"),
    ({"feature": "specialized_heads", "num_labels": 0}, "num_labels=0 must be >= 1"),
    ({"feature": "relations", "relations": ["tree_distance"], "max_distance": 0},
     r"\(relations\): encoder\.max_distance=0 must be at least 1"),
    ({"feature": "relations", "relations": ["tree_distance"], "relative_values": "yes"},
     "relative_values: expected bool, got str"),
    ({"feature": "relations"}, r"relations=\[\] leaves relations off; set relations"),
    ({"feature": "relations", "relations": ["depth"]}, "unknown relation 'depth'"),
    ({"feature": "syntactic_attention", "tree": "x"}, r"syntactic_attention\.tree='x': use one of projective"),
    ({"feature": "tree_distance_bias", "scale": -1}, r"tree_distance_bias\.scale=-1 must be >= 0"),
    # NaN and infinities were accepted as weights; huge sizes exhausted memory
    ({"feature": "supervised_head", "weight": float("nan")}, "weight: expected a finite number, got nan"),
    ({"feature": "supervised_head", "weight": float("inf")}, "weight: expected a finite number, got inf"),
    ({"feature": "relations", "relations": ["tree_distance"], "max_distance": 10 ** 9},
     r"\(relations\): encoder\.max_distance=1000000000 is too large: its tree-relation label tables"),
    ({"feature": "relations", "relations": ["traversal"], "max_traversal": 10 ** 9},
     r"max_traversal=1000000000 is too large"),
    ({"feature": "relations", "relations": ["sequential"], "max_relative_position": 10 ** 13},
     r"max_relative_position=10000000000000 is too large: its weights would need"),
    ({"feature": "supervised_head", "layers": [[1] * 1000] * 1000}, r"got \[\[1, 1, 1, 1, 1, 1, \.\.\.\], "),
])
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        sh.attach(bert(), [spec])


OLD_AND_NEW = [  # older feature names and the entries they are now
    ({"feature": "tree_relations", "layers": [0], "field": "traversal", "values": False, "max_traversal": 3},
     {"feature": "relations", "layers": [0], "relations": ["traversal"], "relative_values": False, "max_traversal": 3}),
    ({"feature": "tree_relations", "side": "decoder"}, {"feature": "relations", "side": "decoder",
                                                        "relations": ["tree_distance"]}),
    ({"feature": "relative_positions", "side": "decoder", "layers": [1], "max_relative": 3},
     {"feature": "relations", "side": "decoder", "layers": [1], "relations": ["sequential"],
      "max_relative_position": 3}),
    ({"feature": "pointer", "side": "decoder", "weight": 0.5, "head": 1},
     {"feature": "bird_eye", "side": "decoder", "variant": "sg", "pointer_weight": 0.5, "pointer_head": 1}),
    ({"feature": "bird_eye_reweighting", "side": "decoder", "layers": [0], "hidden": 8},
     {"feature": "bird_eye", "side": "decoder", "layers": [0], "variant": "sf", "hidden": 8}),
    ({"feature": "segmentation", "side": "cross", "mode": "sigmoid", "normalize": True},
     {"feature": "cross_attention", "side": "cross", "cross_attention": "sigmoid", "cross_attention_normalize": True}),
    ({"feature": "segmentation", "side": "cross"}, {"feature": "cross_attention", "side": "cross",
                                                    "cross_attention": "segmentation"}),
    ({"feature": "span_segmentation", "side": "cross", "max_segment": 2},
     {"feature": "cross_attention", "side": "cross", "cross_attention": "segments", "cross_attention_max_segment": 2}),
    ({"feature": "syntactic", "layers": [1], "head": 3, "arc_dim": 8},
     {"feature": "syntactic_attention", "layers": [1], "head": 3, "arc_dim": 8}),
]


@pytest.mark.parametrize("old, new", OLD_AND_NEW)
def test_older_feature_names_are_read_with_a_warning_naming_the_new_entry(old, new):
    from tests.helpers.hf_models import bart
    plain = bart()
    sh.attach(plain, [new])
    with pytest.warns(FutureWarning, match=rf"^synattn feature #0: feature '{old['feature']}' is now written "
                                           rf"\{{'feature': '{new['feature']}'.*; the old name will be removed$"):
        sh.attach(model := bart(), [old])
    assert model.config.synattn == plain.config.synattn
    assert {k: v.shape for k, v in model.synattn.state_dict().items()} == \
        {k: v.shape for k, v in plain.synattn.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn of nothing
        sh.attach(bart(), [new])


@pytest.mark.parametrize("model", [torch.nn.Linear(3, 3), "bert", None])
def test_attach_to_what_is_no_transformers_model(model):
    """sh.attach(nn.Linear(3, 3), ...) raised AttributeError ('Linear' has no attribute 'config')."""
    with pytest.raises(ValueError, match="synattn features go into a transformers model"):
        sh.attach(model, [{"feature": "supervised_head"}])


def test_unknown_syntax_input_is_an_error():
    model = bert().eval()
    sh.attach(model, [{"feature": "supervised_head"}])
    with pytest.raises(ValueError, match="unknown syntax input"):
        model(**inputs("bert"), syntax_heads=HEADS)


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5"])
def test_output_attentions_equal_the_eager_models(name):
    plain, other = pair(name)
    plain.set_attn_implementation("eager")
    sh.attach(other, [])
    kw = inputs(name)
    a = plain(**kw, output_attentions=True)
    b = other(**kw, output_attentions=True)
    key = "encoder_attentions" if name == "t5" else "attentions"
    assert len(a[key]) == len(b[key]) == 2
    for x, y in zip(a[key], b[key]):
        torch.testing.assert_close(x, y)
    torch.testing.assert_close(a.logits, b.logits)
