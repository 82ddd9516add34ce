"""Every config value is typed and bounded when the config is read (synattn.config_bounds): YAML
nested too deeply, layer counts, seeds, learning rates, epochs and any number far past a run's
are one line naming the key (or the file), exit 2 from ``synattn train``: never a RecursionError,
an allocator's traceback, numpy's ValueError or a NaN loss."""

from __future__ import annotations

import copy

import pytest
import yaml

from synattn.config_bounds import MAX_DEPTH, MAX_SEED
from synattn.config_io import ConfigFileError
from synattn.errors import ConfigError
from synattn.train.experiment import ExperimentConfig
from tests.helpers.cli import run_cli

BASE = {"task": "mt", "data": "data/nowhere",
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder": {"layers": 2}, "decoder": {"layers": 1}},
        "train": {"max_epochs": 3, "lr": 5e-4, "seed": 1}, "eval": {"beam": 2}}


def _config(tmp_path, text=None, **sections):
    data = copy.deepcopy(BASE)
    for section, values in sections.items():
        data[section].update(values)
    path = tmp_path / "config.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(data))
    return path


def _nested(depth, flow=True):
    return ("[" * depth + "]" * depth) if flow else ("{a: " * depth + "1" + "}" * depth)


@pytest.mark.parametrize("depth, flow", [(5000, True), (3000, False), (MAX_DEPTH + 2, True), (MAX_DEPTH + 2, False)])
def test_yaml_nested_too_deeply_is_refused_naming_the_file(depth, flow, tmp_path):
    path = _config(tmp_path, f"task: mt\ndata: x\nmodel:\n  encoder: {_nested(depth, flow)}\n")
    with pytest.raises(ConfigFileError, match=rf"^{path}: invalid YAML: nested more than {MAX_DEPTH} levels deep"):
        ExperimentConfig.from_yaml(path)


def test_an_override_nested_too_deeply_is_refused_naming_it(tmp_path):
    path = _config(tmp_path)
    with pytest.raises(ConfigError, match=r"override 'model\.encoder=\[\[.*nested more than 32 levels deep"):
        ExperimentConfig.from_yaml(path, [f"model.encoder={_nested(4000)}"])


@pytest.mark.parametrize("section, values, needle", [
    ("model", {"encoder": {"layers": 10 ** 7}}, "model.encoder.layers=10000000 must be at most 1000"),
    ("model", {"decoder": {"layers": 1001}}, "model.decoder.layers=1001 must be at most 1000"),
    ("train", {"seed": -1}, "train.seed=-1 must be in [0, 4294967295]"),
    ("train", {"seed": MAX_SEED + 1}, "train.seed=4294967296 must be in [0, 4294967295]"),
    ("train", {"lr": 1e308}, "train.lr: 1e+308 is out of range"),
    ("train", {"lr": 100.0}, "train.lr=100.0 must be at most 10"),
    ("train", {"max_epochs": 10 ** 12}, "train.max_epochs=1000000000000 must be at most 1000000"),
    ("train", {"max_steps": 10 ** 14}, "train.max_steps=100000000000000 must be at most"),
    ("train", {"max_minutes": 1e12}, "train.max_minutes=1000000000000.0 must be at most 5256000 (ten years)"),
    ("train", {"weight_decay": 1e6}, "train.weight_decay=1000000.0 must be at most 10"),
    ("train", {"max_tokens": 10 ** 18}, "train.max_tokens: 1000000000000000000 is out of range"),
    ("eval", {"max_len_b": -(10 ** 18)}, "eval.max_len_b: -1000000000000000000 is out of range"),
    ("eval", {"length_penalty": 1e300}, "eval.length_penalty: 1e+300 is out of range"),
])
def test_a_value_out_of_bounds_is_refused_naming_the_key(section, values, needle, tmp_path):
    path = _config(tmp_path, **{section: values})
    with pytest.raises(ConfigFileError) as caught:
        ExperimentConfig.from_yaml(path)
    assert str(caught.value).startswith(f"{path}: ") and needle in str(caught.value), str(caught.value)


@pytest.mark.parametrize("section, values", [
    ("model", {"encoder": {"layers": 1000}}), ("train", {"seed": 0}), ("train", {"seed": MAX_SEED}),
    ("train", {"lr": 10.0}), ("train", {"max_epochs": 1_000_000}), ("train", {"max_minutes": 60 * 24 * 365.0}),
])
def test_values_at_the_bounds_are_accepted(section, values, tmp_path):
    """(The refusals above can fail: the same checks accept the largest values they allow.)"""
    exp = ExperimentConfig.from_yaml(_config(tmp_path, **{section: values}))
    key, value = next(iter(values.items()))
    got = getattr(exp.train, key) if section == "train" else exp.model["encoder"]["layers"]
    assert got == (value if section == "train" else values["encoder"]["layers"])


@pytest.mark.parametrize("section, values, needle", [
    ("model", {"encoder": {"layers": 10 ** 7}}, "model.encoder.layers=10000000 must be at most 1000"),
    ("train", {"seed": -1}, "train.seed=-1 must be in"),
    ("train", {"lr": 1e308}, "train.lr: 1e+308 is out of range"),
    ("train", {"max_epochs": 10 ** 12}, "train.max_epochs=1000000000000 must be at most"),
])
def test_synattn_train_refuses_them_in_one_line(section, values, needle, tmp_path):
    path = _config(tmp_path, **{section: values})
    code, err = run_cli(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")])
    assert code == 2 and needle in err.strip().splitlines()[-1] and str(path) in err, err
    assert not (tmp_path / "run").exists()


def test_synattn_train_refuses_deep_yaml_in_one_line(tmp_path):
    path = _config(tmp_path, f"task: mt\ndata: x\nmodel: {_nested(20000)}\n")
    code, err = run_cli(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "nested more than 32 levels deep" in err and str(path) in err, err
