"""``synattn train`` end to end on a tiny prepared dataset, with config overrides and resume."""

import json

import pytest
import yaml

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.errors import ConfigError
from synattn.models import EncoderDecoderTransformer
from synattn.train import read_log, resolve_checkpoint
from synattn.train.experiment import ExperimentConfig, apply_override
from tests.helpers.cli import EN, FR


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mt")
    for split, reps in (("train", 4), ("dev", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    return prepare(PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train"),
                                 "dev": str(tmp / "dev")}, parse_source=False, vocab_size=60))


def _config(tmp_path, data):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "task": "mt", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder": {"layers": 1}, "decoder": {"layers": 1}},
        "train": {"max_tokens": 200, "max_steps": 4, "warmup_updates": 2, "progress_bar": False,
                  "tensorboard": False, "log_interval": 1},
        "eval": {"beam": 2, "bleu_sentences": 3}}))
    return path


def test_train_writes_checkpoints_and_bleu_and_resumes(tmp_path, data, capsys):
    config, run = _config(tmp_path, data), tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run), "train.max_steps=2",
                 "model.encoder.relations=[sequential]"]) == 0
    assert "stopped by max_steps at step 2" in capsys.readouterr().err
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["experiment"]["model"]["encoder"]["relations"] == ["sequential"]
    valid = read_log(run, "valid")
    assert valid and "bleu" in valid[-1] and 0 <= valid[-1]["bleu"] <= 100
    model = EncoderDecoderTransformer.from_pretrained(resolve_checkpoint(run))
    manifest = json.loads((data / "manifest.json").read_text())
    assert model.config.encoder.relations == ["sequential"]
    assert model.config.src_vocab_size == manifest["vocab_size"]["src"]
    # the run's own config.yaml: the earlier model override holds without being repeated
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--resume", "train.max_steps=4"]) == 0
    assert "at step 4" in capsys.readouterr().err
    assert [r["step"] for r in read_log(run, "train")] == [1, 2, 3, 4]


def test_bad_config_is_reported_with_the_file(tmp_path, data, capsys):
    config = _config(tmp_path, data)
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "r"), "train.lrate=1"]) == 2
    err = capsys.readouterr().err  # the mistake is the override's, not the file's
    assert "override train.lrate=1: unknown key 'train.lrate'" in err and str(config) not in err
    config.write_text(config.read_text().replace("max_tokens:", "max_tokenz:"))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "r"), "train.lr=1e-3"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error: " in line]  # (after the wrapped list of keys)
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0]
    assert f"{config}: unknown key 'train.max_tokenz' in train (did you mean 'train.max_tokens'?)" in errors[0]
    with pytest.raises(ConfigError, match="not of the form"):
        apply_override({}, "train.lr")
    with pytest.raises(ValueError, match="task='nmt'"):
        ExperimentConfig.from_dict({"task": "nmt", "data": "x"})


def test_train_experiment_is_what_synattn_train_runs(tmp_path, data, capsys):
    """The library function trains the same run as the command (same weights, same validation
    records with BLEU), and says how it ended."""
    import torch

    from synattn.evaluate.translation import translation_metrics
    from synattn.train.experiment_run import train_experiment

    config = _config(tmp_path, data)
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "cli"), "train.max_steps=2"]) == 0
    exp = ExperimentConfig.from_yaml(str(config), ["train.max_steps=2"])
    trained = train_experiment(exp, tmp_path / "lib", valid_metrics=translation_metrics)
    assert (trained.result.step, trained.result.stopped_by, trained.is_main) == (2, "max_steps", True)
    assert trained.epochs_started == 1 and trained.minutes > 0
    assert (tmp_path / "lib" / "vocab").is_dir()  # the run's own tokenizers, as the command copies them
    ours, theirs = (EncoderDecoderTransformer.from_pretrained(resolve_checkpoint(tmp_path / run)).state_dict()
                    for run in ("lib", "cli"))
    assert all(torch.equal(ours[key], theirs[key]) for key in theirs)
    bleu = {run: [r["bleu"] for r in read_log(tmp_path / run, "valid")] for run in ("lib", "cli")}
    assert bleu["lib"] == bleu["cli"]
    with pytest.raises(ConfigError, match="already has checkpoints"):
        train_experiment(exp, tmp_path / "lib")
