"""synattn train / synattn evaluate with a transformers model: masked LM with a supervised head
on a prepared CoNLL-U dataset, the head's word-level UAS reported by evaluate."""

import json

import pytest
import torch
import yaml

pytest.importorskip("transformers")

from synattn.cli.main import main  # noqa: E402
from synattn.errors import ConfigError  # noqa: E402
from synattn.train.experiment import ExperimentConfig  # noqa: E402
from tests.helpers.hf_models import CONLLU  # noqa: E402

BERT = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "hidden_dropout_prob": 0.0}
FEATURES = [{"feature": "relations", "relations": ["tree_distance"], "layers": [0]},
            {"feature": "supervised_head", "layers": [1], "head": 2}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from synattn.data.prepare import PrepareConfig, prepare

    tmp = tmp_path_factory.mktemp("hf_task")
    trees = {}
    for split, reps in (("train", 4), ("dev", 1), ("test", 1)):
        (tmp / f"{split}.conllu").write_text(CONLLU * reps, encoding="utf-8")
        trees[split] = str(tmp / f"{split}.conllu")
    return prepare(PrepareConfig(out=str(tmp / "data"), src_trees=trees, tgt_lang=None, vocab_size=40))


def experiment(data, model=None, **train):
    return {"task": "mlm", "data": str(data), "model": model or {"transformers": BERT, "features": FEATURES},
            "train": {"max_steps": 3, "max_tokens": 200, "warmup_updates": 1, "lr": 1e-3,
                      "progress_bar": False, "tensorboard": False, **train}}


def test_train_and_evaluate_report_the_heads_uas(data, tmp_path, capsys):
    config = tmp_path / "hf.yaml"
    config.write_text(yaml.safe_dump(experiment(data)))
    run = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 0
    saved = json.loads((run / "checkpoints" / (run / "checkpoints" / "last").read_text().strip()
                        / "config.json").read_text())
    assert saved["model_type"] == "bert" and [s["feature"] for s in saved["synattn"]] == \
        ["relations", "supervised_head"]
    capsys.readouterr()
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--run", str(run), "--split", "test", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert set(result["attachment"]) == {"encoder_1.parse"}
    assert 0.0 <= result["attachment"]["encoder_1.parse"] <= 1.0
    assert "supervised head encoder_1.parse: UAS" in printed
    assert 1.0 < result["perplexity"] < float("inf")
    assert len(result["head_agreement"]["encoder"]) == 2  # layers x heads
    assert result["sentences"] == 3


def test_uas_is_the_heads_word_level_attachment(data):
    """evaluate_hf's UAS = the word holding the piece that each word's final piece attends to most
    (itself: the root), against the gold word heads, counted over the split's words."""
    from synattn.data.batching import PreparedDataset, collate
    from synattn.evaluate.hf_model import evaluate_hf
    from synattn.hf.task import HFMaskedLMTask, from_pretrained_config

    exp = ExperimentConfig.from_dict(experiment(data))
    torch.manual_seed(0)
    model = from_pretrained_config(exp.model_config(*exp.check_data())).eval()
    dataset = PreparedDataset(str(data), "test")
    result = evaluate_hf(model, dataset, "test", show_progress=False)
    task = HFMaskedLMTask(model)
    gold_heads = [int(h) for tree in CONLLU.strip().split("\n\n")
                  for h in (line.split("\t")[6] for line in tree.splitlines())]
    predicted = []
    with torch.no_grad():
        for i in range(len(dataset)):
            batch = collate(dataset, [i], task.request)
            log_probs = task.forward(model, batch.src, batch).synattn_head_log_probs["encoder_1.parse"][0]
            words = dataset[i]["src_word"]
            for w in range(int(words.max()) + 1):
                last = int((words == w).nonzero()[0][-1])
                target = int(words[int(log_probs[last, :len(words)].argmax())])  # pieces, not </s>
                predicted.append(0 if target == w else target + 1)
    correct = sum(p == g for p, g in zip(predicted, gold_heads))
    assert len(predicted) == len(gold_heads) == 13
    assert result.attachment["encoder_1.parse"] == pytest.approx(correct / 13)


@pytest.mark.parametrize("model, message", [
    ({"transformers": {"hidden_size": 32}}, "model.transformers: expected a config dict with a model_type"),
    ({"transformers": {"model_type": "gpt2"}}, "model_type gpt2 has no masked-LM model"),
    ({"transformers": BERT, "features": [{"feature": "bird_eye", "variant": "sg", "side": "decoder"}]},
     "model.features: synattn feature #0 .bird_eye. goes into the decoder side"),
    ({"transformers": BERT, "features": [{"feature": "nope"}]}, "model.features: synattn feature #0: unknown"),
    ({"transformers": BERT, "heads": 2}, "unknown key.s. model.heads"),
    ({"transformers": dict(BERT, vocab_size=7)}, "model.transformers.vocab_size=7 differs"),
    ({"transformers": "no/such/dir"}, "no/such/dir is not a model directory"),
    ({"transformers": {**BERT, "num_hiden_layers": 4}},
     r"unknown key.s. model.transformers.num_hiden_layers \(did you mean num_hidden_layers\?\)"),
    ({"transformers": {**BERT, "hidden_act": "nonsense"}},
     "model.transformers: cannot build a bert model with these settings .KeyError"),
    ({"transformers": BERT, "features": [{"feature": "supervised_head", "layers": [7]}]},
     r"model.features: synattn feature #0 \(supervised_head\): encoder layer\(s\) \[7\] do not exist"),
    ({"transformers": BERT, "features": [{"feature": "supervised_head", "head": 9}]},
     r"model.features: synattn feature #0 \(supervised_head\): encoder.supervised_head.head=9 is out of range for "
     r"heads=4$"),
    ({"transformers": BERT, "features": [{"feature": "supervised_head", "weight": "abc"}]},
     r"weight: expected float, got str \('abc'\)"),
    # options checked by the method's own validate, as in a model config
    ({"transformers": BERT, "features": [{"feature": "tree_distance_bias", "scale": -2.0}]},
     r"synattn feature #0 \(tree_distance_bias\): encoder.tree_distance_bias.scale=-2.0 must be >= 0"),
])
def test_model_section_mistakes_are_config_errors(data, model, message):
    with pytest.raises(ConfigError, match=message):
        ExperimentConfig.from_dict(experiment(data, model)).check_data()


def test_a_config_with_an_older_feature_name_is_read_with_a_warning(data):
    old = [{"feature": "tree_relations", "layers": [0], "field": "traversal"}]
    now = r"\{'feature': 'relations', 'relations': \['traversal'\], 'layers': \[0\]\}"
    with pytest.warns(FutureWarning, match=r"synattn feature #0: feature 'tree_relations' is now written " + now):
        (exp := ExperimentConfig.from_dict(experiment(data, {"transformers": BERT, "features": old}))).check_data()
    assert exp.model["features"] == old  # the file's entries as written; the model gets the new ones


def test_a_feature_mistake_stops_train_before_the_run_folder(data, tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(experiment(data, {"transformers": BERT, "features": [
        {"feature": "supervised_head", "layers": [1], "head": 9}]})))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    assert "head=9 is out of range" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_config_directory_takes_the_datasets_vocabulary(data, tmp_path):
    import transformers

    transformers.BertConfig(**{k: v for k, v in BERT.items() if k != "model_type"}).save_pretrained(tmp_path)
    exp = ExperimentConfig.from_dict(experiment(data, {"transformers": str(tmp_path)}))
    manifest, labels = exp.check_data()
    config = exp.model_config(manifest, labels)
    assert config.vocab_size == manifest["vocab_size"]["src"] and config.synattn == []
    with pytest.raises(ConfigError, match="task lm cannot train a transformers model"):
        ExperimentConfig.from_dict({**experiment(data, {"transformers": str(tmp_path)}), "task": "lm"})


@pytest.mark.parametrize("feature", [{"feature": "tree_distance_bias", "layers": [0]},
                                     {"feature": "specialized_heads", "layers": [0], "source": "deprel"},
                                     {"feature": "relations", "relations": ["traversal"], "layers": [1]}])
def test_the_batches_carry_what_each_feature_declares(data, tmp_path, feature):
    """The syntax request comes from each feature's declared fields (tree_distance_bias, a method
    added through its own file, trains here without any code of the task naming it)."""
    from synattn.hf.features import FEATURES as KINDS
    from synattn.hf.task import syntax_request

    config = tmp_path / "hf.yaml"
    config.write_text(yaml.safe_dump(experiment(data, {"transformers": BERT, "features": [feature]})))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    exp = ExperimentConfig.from_yaml(config)
    request = syntax_request(exp.model_config(*exp.check_data()))
    spec = {**KINDS[feature["feature"]].defaults, **feature}
    assert request.src == KINDS[feature["feature"]].reads(spec) != frozenset()
