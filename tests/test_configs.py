"""Every experiment config in ``configs/`` loads and trains end to end on tiny prepared data.

The configs are found at collection time, so a config added later is tested too. Each run shrinks
the model (width, heads, layer counts) but keeps every feature of the config: a layer index is
moved inside the shrunk stack, never removed. The tiny data has everything the configs of today
need (source and target trees, POS tags, dependency labels); a config that needs something more
fails here, loudly, instead of being skipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from synattn.cli.main import main
from synattn.models.pretrained import PretrainedModel
from synattn.train import read_log, resolve_checkpoint
from synattn.train.experiment import TASKS, ExperimentConfig, apply_override, model_config
from synattn.train.tasks import syntax_request_for
from tests.helpers.configs import (  # noqa: F401 (a fixture)
    CONFIG_DIR,
    CONFIGS,
    HEADS,
    LAYERS,
    RUN_OVERRIDES,
    datasets,
    shrink_overrides,
    without_sizes,
)


def supervised_losses(config) -> set[str]:
    """The auxiliary loss names a config's supervised heads log (``<stack>.<layer>.parse``)."""
    return {f"{name}.{stack.supervised_head.layer}.parse" for name, stack in config.stacks().items()
            if stack.supervised_head is not None}


def test_configs_exist():
    names = {path.stem for path in CONFIGS}
    assert {"baseline", "lm_ptb", "mlm_ptb"} <= names


def test_mt_configs_share_the_model_size_and_training_settings():
    base = ExperimentConfig.from_yaml(CONFIG_DIR / "baseline.yaml")
    size_keys = ("d_model", "heads", "ffn_dim", "dropout", "norm", "absolute_positions")

    def size(exp: ExperimentConfig) -> dict:
        return {**{k: exp.model.get(k) for k in size_keys},
                **{f"{s}.layers": (exp.model.get(s) or {}).get("layers") for s in ("encoder", "decoder")}}

    for path in CONFIGS:
        exp = ExperimentConfig.from_yaml(path)
        if exp.task == "mt":
            assert size(exp) == size(base), path.name
            assert (exp.data, exp.train, exp.eval) == (base.data, base.train, base.eval), path.name


def test_shrinking_keeps_features_with_indices_beyond_the_shrunk_stack():
    model = {"heads": 8, "encoder": {"layers": 6, "relations": ["tree_distance"], "relation_layers": [4, 5],
                                     "specialized_heads": {"source": "pos", "heads": [3, 5]},
                                     "supervised_head": {"head": 7}},
             "decoder": {"layers": 6, "supervised_head": {"layer": 5, "head": 2}}}
    exp = ExperimentConfig.from_dict({"task": "mt", "data": "x", "model": model})
    shrunk = ExperimentConfig.from_dict({"task": "mt", "data": "x", "model": model})
    for item in shrink_overrides(exp):
        apply_override(shrunk.model, item.removeprefix("model."))
    manifest = {"vocab_size": {"src": 50, "tgt": 50}}
    labels = {"src_upos": ["<pad>", "<unk>", "NOUN"]}
    small, full = model_config(shrunk, manifest, labels), model_config(exp, manifest, labels)
    assert without_sizes(small.to_dict()) == without_sizes(full.to_dict())
    enc, dec = small.encoder, small.decoder
    assert (enc.layers, dec.layers, small.heads) == (LAYERS, LAYERS, HEADS)
    assert enc.relation_layers == [LAYERS - 1]
    assert enc.specialized_heads.heads == [1]
    assert (enc.supervised_head.layer, enc.supervised_head.head) == (LAYERS - 1, 1)  # the default layer 3
    assert (dec.supervised_head.layer, dec.supervised_head.head) == (LAYERS - 1, 0)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_trains_end_to_end(path, datasets, tmp_path, capsys):  # noqa: F811 (the fixture)
    exp = ExperimentConfig.from_yaml(path)
    assert exp.task in datasets, f"{path.name}: no tiny dataset for task {exp.task!r}"
    data = datasets[exp.task]
    shrink = shrink_overrides(exp)
    run = tmp_path / "run"
    code = main(["train", "--config", str(path), "--data", str(data), "--run-dir", str(run), *shrink,
                 *RUN_OVERRIDES])
    err = capsys.readouterr().err
    assert code == 0, f"{path.name} failed:\n{err[-3000:]}"
    assert "stopped by max_steps at step 2" in err

    trained = PretrainedModel.from_pretrained(resolve_checkpoint(run)).config
    assert isinstance(trained, TASKS[exp.task][0])
    assert (trained.d_model, trained.heads) == (16, HEADS)
    assert all(stack.layers == LAYERS for stack in trained.stacks().values())

    # the shrunk model keeps every feature of the config: the same config but for sizes and
    # indices, so the same syntax inputs
    manifest = json.loads((data / "manifest.json").read_text())
    labels = json.loads((data / "labels.json").read_text())
    full = model_config(exp, manifest, labels)
    assert without_sizes(trained.to_dict()) == without_sizes(full.to_dict())
    assert syntax_request_for(trained) == syntax_request_for(full)

    records = read_log(run, "train")
    assert [r["step"] for r in records] == [1, 2]
    assert all(math.isfinite(r["loss"]) for r in records)
    expected = supervised_losses(trained)
    for record in records:
        logged = {k[len("aux/"):] for k in record if k.startswith("aux/") and k.endswith(".parse")}
        assert logged == expected
        assert all(math.isfinite(record[f"aux/{k}"]) and record[f"aux/{k}"] > 0 for k in expected)
    if exp.task == "mt":
        valid = read_log(run, "valid")
        assert valid and "bleu" in valid[-1]


def test_every_config_is_described_in_the_docs():
    described = (CONFIG_DIR.parent / "docs" / "configs.md").read_text(encoding="utf-8")
    assert [c.name for c in CONFIGS if f"| `{c.name}` |" not in described] == []


def test_tree_transformer_gpu_config_is_the_studys_gpu_recipe():
    """configs/tree_transformer_ptb_gpu.yaml and ``reproduce tree-transformer --recipe gpu`` train the same."""
    from argparse import Namespace

    import yaml

    from synattn.reproduce import STUDIES, Budget, Context

    config = yaml.safe_load((CONFIG_DIR / "tree_transformer_ptb_gpu.yaml").read_text(encoding="utf-8"))
    study = STUDIES["tree-transformer"]
    ctx = Context(out=Path("."), args=Namespace(recipe="gpu"), data=Path(config["data"]))
    exp = study.experiment(ctx, study.arms[0], 1, Budget(updates=config["train"]["max_steps"]))
    assert exp["task"] == config["task"] and exp["model"] == config["model"]
    for key in ("max_tokens", "max_sentences", "max_steps", "lr", "betas", "warmup_updates", "schedule",
                "min_lr_ratio", "label_smoothing", "clip_norm", "bf16"):
        assert exp["train"][key] == config["train"][key], key
