"""The training loop: gradient normalisation over accumulated batches, bf16, validation and its
hook, stopping rules, the run directory's files."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
import torch.nn.functional as F
import yaml

from synattn.data.batching import collate
from synattn.data.subwords import PAD
from synattn.train import TrainConfig, read_log, resolve_checkpoint
from tests.helpers.training import SyntheticPairs, config, make_trainer


def test_update_gradient_is_the_token_mean_over_accumulated_batches(tmp_path):
    trainer = make_trainer(tmp_path, config(update_freq=2, label_smoothing=0.1), dropout=0.0, aux_weight=0.5)
    data = trainer.train_data
    batches = [collate(data, [0, 1, 2]), collate(data, [3, 4])]
    reference = copy.deepcopy(trainer.model)
    logs = trainer.train_step(batches)
    total, tokens = 0.0, 0
    for batch in batches:  # Σ_batches (smoothed CE sum + n_b · aux_b) / Σ n_b, by torch's own CE
        out = reference(batch.src, batch.tgt_in)
        n = int((batch.tgt_out != PAD).sum())
        ce = F.cross_entropy(out.logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD,
                             label_smoothing=0.1, reduction="sum")
        total = total + ce + n * out.losses["encoder.0.toy"]
        tokens += n
    (total / tokens).backward()
    assert logs["sample_size"] == tokens and logs["loss"] == pytest.approx(float(total.detach()), rel=1e-5)
    assert "aux/encoder.0.toy" in logs
    for (name, p), q in zip(reference.named_parameters(), trainer.model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_clipping_bounds_the_gradient_norm(tmp_path):
    trainer = make_trainer(tmp_path, config(clip_norm=0.01), dropout=0.0)
    logs = trainer.train_step([collate(trainer.train_data, [0, 1, 2])])
    norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in trainer.model.parameters()))
    assert logs["grad_norm"] > 0.01 and float(norm) == pytest.approx(0.01, rel=1e-4)


def test_bf16_autocast_changes_the_numbers_a_little(tmp_path):
    losses = {}
    for bf16 in (False, True):
        trainer = make_trainer(tmp_path / str(bf16), config(bf16=bf16), dropout=0.0)
        losses[bf16] = [trainer.train_step([collate(trainer.train_data, [i, i + 1])])["loss"] for i in range(4)]
    assert losses[True] != losses[False]  # autocast was on
    assert losses[True] == pytest.approx(losses[False], rel=0.03)


def test_run_directory_logs_hook_and_best_pointer(tmp_path):
    calls = []

    def metrics(model):
        assert not model.training
        calls.append(1)
        return {"bleu": 10.0 * len(calls)}

    trainer = make_trainer(tmp_path, config(max_epochs=4, lr=0.02, keep_last_n=1), dropout=0.0,
                           valid_metrics=metrics, run_config={"model": {"d": 16}})
    result = trainer.train()
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["model"] == {"d": 16} and TrainConfig.from_dict(saved["train"]) == trainer.config
    valid = read_log(tmp_path, "valid")
    assert [r["epoch"] for r in valid] == [1, 2, 3, 4] and [r["bleu"] for r in valid] == [10, 20, 30, 40]
    best = min(valid, key=lambda r: r["task_loss"])
    assert result.best_valid_loss == best["task_loss"] and valid[-1]["best_task_loss"] == best["task_loss"]
    assert resolve_checkpoint(tmp_path, "best").name == f"ckpt_{best['step']:06d}"
    assert resolve_checkpoint(tmp_path).name == f"ckpt_{result.step:06d}"
    train = read_log(tmp_path, "train")
    assert [r["step"] for r in train] == list(range(1, result.step + 1))
    assert all(r["tokens_per_s"] > 0 and r["lr"] > 0 for r in train)
    first, last = train[:9], train[-9:]  # 9 updates an epoch
    assert sum(r["nll_loss"] for r in last) < 0.9 * sum(r["nll_loss"] for r in first)  # it learns


def test_snapshots_keep_the_weights_of_every_nth_update_beside_pruned_checkpoints(tmp_path):
    from safetensors.torch import load_file

    trainer = make_trainer(tmp_path, config(max_epochs=2, keep_last_n=1, snapshot_interval_updates=3))
    result = trainer.train()
    assert result.step == 18  # 9 updates an epoch: updates 9 and 18 end an epoch
    snapshots = sorted(p.name for p in (tmp_path / "snapshots").iterdir())
    assert snapshots == [f"ckpt_{s:06d}" for s in (3, 6, 9, 12, 15, 18)]
    assert all(sorted(f.name for f in (tmp_path / "snapshots" / s).iterdir()) == ["model.safetensors"]
               for s in snapshots)  # the weights alone: not a checkpoint to resume from
    assert [p.name for p in (tmp_path / "checkpoints").glob("ckpt_*")] == ["ckpt_000018"]  # pruned, unlike them
    final = load_file(tmp_path / "snapshots" / "ckpt_000018" / "model.safetensors")
    assert all(torch.equal(final[k], v) for k, v in trainer.model.state_dict().items())
    first = load_file(tmp_path / "snapshots" / "ckpt_000003" / "model.safetensors")
    assert not torch.equal(first["hidden.weight"], final["hidden.weight"])


def test_stopping_rules(tmp_path):
    result = make_trainer(tmp_path / "steps", config(max_steps=3, max_epochs=None)).train()
    assert (result.stopped_by, result.step) == ("max_steps", 3) and result.checkpoint.name == "ckpt_000003"
    result = make_trainer(tmp_path / "time", config(max_minutes=1e-9, max_epochs=None)).train()
    assert (result.stopped_by, result.step) == ("max_minutes", 1)
    assert read_log(tmp_path / "time", "valid")[0]["step"] == 1  # validated before stopping


def test_validation_is_deterministic_and_leaves_training_mode(tmp_path):
    trainer = make_trainer(tmp_path, config())
    trainer._log = None
    first, second = trainer.validate(), trainer.validate()
    assert first["loss"] == second["loss"] and trainer.model.training
    assert first["ppl"] == pytest.approx(torch.exp(torch.tensor(first["nll_loss"])).item(), rel=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard not installed")
def test_tensorboard_events_are_written(tmp_path):
    make_trainer(tmp_path, config(max_steps=2, tensorboard=True)).train()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_empty_training_data_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="the training data is empty"):
        make_trainer(tmp_path, config(), train_size=0)
    assert len(SyntheticPairs(0)) == 0
