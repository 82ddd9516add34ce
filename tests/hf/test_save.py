"""Saving and loading models with synattn features; training them with transformers' Trainer."""

import json

import numpy as np
import pytest
import torch

import synattn.hf as sh
from synattn.trees import DependencyTree
from tests.helpers.hf_models import bert, gpt2, t5, wordpiece_tokenizer

transformers = pytest.importorskip("transformers")

FEATURES = {
    "bert": [{"feature": "relations", "relations": ["traversal"], "layers": [0]},
             {"feature": "supervised_head", "layers": [1], "head": 1}],
    "gpt2": [{"feature": "supervised_head", "side": "decoder", "layers": [1]},
             {"feature": "bird_eye", "variant": "sg", "side": "decoder", "layers": [0]}],
    "t5": [{"feature": "constituent", "side": "encoder"},
           {"feature": "relations", "relations": ["tree_distance"], "side": "decoder", "layers": [1]}],
}
MAKERS = {"bert": bert, "gpt2": gpt2, "t5": t5}


def batch_for(name):
    torch.manual_seed(3)
    ids = torch.randint(5, 50, (2, 5))
    kw = {"input_ids": ids}
    heads = torch.tensor([[2, 0, 2, 5, 3], [0, 1, 1, 3, 3]])
    from synattn.trees.relations import batch_relation_labels, batch_syntax_hints, head_targets
    dist, trav = batch_relation_labels(heads)
    prefix = "decoder_syntax_" if name == "t5" else "syntax_"
    kw.update({prefix + "traversal": trav, prefix + "tree_dist": dist,
               prefix + "head_targets": head_targets(heads), prefix + "hints": batch_syntax_hints(heads)})
    if name == "t5":
        kw["decoder_input_ids"] = ids
    return kw


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_save_and_load_restores_every_weight(tmp_path, name):
    torch.manual_seed(0)
    model = MAKERS[name]().eval()
    sh.attach(model, FEATURES[name])
    with torch.no_grad():
        for p in model.synattn.parameters():
            p.add_(torch.randn_like(p))
    before = model(**batch_for(name))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["synattn"] == model.config.synattn
    loaded, info = sh.from_pretrained(type(model), tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    loaded.eval()
    assert loaded.config._attn_implementation == "synattn"
    assert type(loaded).__name__ == type(model).__name__ and isinstance(loaded, type(model))
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    after = loaded(**batch_for(name))
    assert torch.equal(before.logits, after.logits)
    assert before.synattn_losses.keys() == after.synattn_losses.keys()


def test_auto_class_and_plain_checkpoint(tmp_path):
    torch.manual_seed(0)
    plain = bert()
    plain.save_pretrained(tmp_path / "plain")
    model = sh.from_pretrained(transformers.AutoModelForTokenClassification, tmp_path / "plain")
    assert not hasattr(model, "synattn")  # no synattn in the config: the plain model
    sh.attach(model, FEATURES["bert"])
    model.save_pretrained(tmp_path / "with")
    again = sh.from_pretrained(transformers.AutoModelForTokenClassification, tmp_path / "with")
    assert sorted(again.synattn.sites()) == ["encoder_0", "encoder_1"]


@pytest.mark.parametrize("damage", ["pickle", "truncated"])
def test_a_damaged_weight_file_is_named(tmp_path, damage):
    """A pickle saved as model.safetensors said "header too large" without naming the file."""
    import pickle

    from synattn.errors import InputError

    torch.manual_seed(0)
    model = bert()
    sh.attach(model, FEATURES["bert"])
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    if damage == "pickle":
        weights.write_bytes(pickle.dumps({"w": torch.zeros(2)}))
    else:
        weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(InputError, match=r"model\.safetensors: not a safetensors file") as error:
        sh.from_pretrained(transformers.AutoModelForTokenClassification, tmp_path)
    assert str(tmp_path) in str(error.value)


def conll_trees():
    return [DependencyTree("the cat sat on the mat".split(), np.array([2, 3, 0, 6, 6, 3])),
            DependencyTree("she reads old books".split(), np.array([2, 0, 4, 2])),
            DependencyTree("a dog barked".split(), np.array([2, 3, 0]))]


def test_plain_loop_lowers_the_parse_loss():
    torch.manual_seed(0)
    tokenizer = wordpiece_tokenizer()
    model = bert(num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train()
    sh.attach(model, [{"feature": "supervised_head", "layers": [1], "weight": 1.0}])
    encoder = sh.SyntaxEncoder(["head_targets"])
    batch = sh.SyntaxCollator(tokenizer, encoder)(sh.tokenize_trees(tokenizer, conll_trees(), encoder))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        out = model(**batch)
        assert set(out.synattn_losses) == {"encoder_1.parse"}
        losses.append(float(out.loss.detach()))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]


def test_trainer_trains_the_supervised_head(tmp_path):
    pytest.importorskip("accelerate")  # transformers' Trainer needs it
    torch.manual_seed(0)
    tokenizer = wordpiece_tokenizer()
    model = bert(num_labels=2)
    sh.attach(model, [{"feature": "supervised_head", "layers": [1], "weight": 1.0}])
    encoder = sh.SyntaxEncoder(["head_targets"])
    items = sh.tokenize_trees(tokenizer, conll_trees(), encoder)
    for item in items:
        item["labels"] = [0] * len(item["input_ids"])
    start = model.synattn.encoder_1.features[0].bilinear.detach().clone()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=3, learning_rate=1e-2,
        remove_unused_columns=False, report_to=[], save_strategy="no", logging_strategy="no",
        use_cpu=True, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=items,
                                   data_collator=sh.SyntaxCollator(tokenizer, encoder))
    result = trainer.train()
    assert np.isfinite(result.training_loss)
    assert not torch.equal(start, model.synattn.encoder_1.features[0].bilinear.detach())
    trainer.save_model(str(tmp_path / "final"))
    loaded, info = sh.from_pretrained(type(model), tmp_path / "final", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
