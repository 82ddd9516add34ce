"""Learning-rate schedules, what the logs report about them, and the metric that picks ``best``."""

from __future__ import annotations

import math

import pytest

import synattn.train.trainer as trainer_module
from synattn.train import read_log, resolve_checkpoint
from synattn.train.optim import decay_factor, inverse_sqrt_factor
from tests.helpers.training import config, make_trainer


def test_logged_lr_and_grad_norm_are_interval_means_of_the_schedule(tmp_path):
    trainer = make_trainer(tmp_path, config(max_steps=12, max_epochs=None, log_interval=4, warmup_updates=6,
                                            lr=0.01))
    norms = []
    step = trainer.train_step

    def recording(batches, dummy=False):
        logs = step(batches, dummy)
        norms.append(logs["grad_norm"])
        return logs

    trainer.train_step = recording
    trainer.train()
    train = read_log(tmp_path, "train")
    assert [r["step"] for r in train] == [4, 8, 12] and [r["updates"] for r in train] == [4, 4, 4]
    for record, first in zip(train, (1, 5, 9)):
        expected = sum(0.01 * inverse_sqrt_factor(s, 6) for s in range(first, first + 4)) / 4
        assert record["lr"] == pytest.approx(expected, rel=1e-12)
        assert record["grad_norm"] == pytest.approx(sum(norms[first - 1:first + 3]) / 4, rel=1e-9)
    assert max(r["lr"] for r in train) <= 0.01


def test_cosine_schedule_by_steps_warms_up_then_decays_to_the_floor(tmp_path):
    trainer = make_trainer(tmp_path, config(max_steps=10, max_epochs=None, schedule="cosine", warmup_updates=2,
                                            min_lr_ratio=0.1, lr=0.02))
    trainer.train()
    lrs = [r["lr"] for r in read_log(tmp_path, "train")]
    expected = [0.02 * decay_factor(s, 2, (s - 1) / 10, "cosine", 0.1) for s in range(1, 11)]
    assert lrs == pytest.approx(expected, rel=1e-12)
    assert lrs[0] == pytest.approx(0.01)
    assert lrs[1] == pytest.approx(0.02 * (0.1 + 0.9 * 0.5 * (1 + math.cos(0.1 * math.pi))))
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))  # monotone after the warm-up


def test_linear_schedule_by_minutes_follows_the_elapsed_fraction(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, config(max_minutes=5, max_epochs=None, max_steps=None, schedule="linear",
                                            warmup_updates=0, lr=0.01))
    seconds = iter(range(0, 10 ** 6, 10))  # every reading of the clock advances it by 10 s
    monkeypatch.setattr(trainer_module.time, "monotonic", lambda: float(next(seconds)))
    result = trainer.train()
    lrs = [r["lr"] for r in read_log(tmp_path, "train")]
    assert result.stopped_by == "max_minutes" and len(lrs) >= 5
    assert lrs[0] == pytest.approx(0.01) and lrs[-1] < 0.003  # linear in the minutes used
    assert all(a > b for a, b in zip(lrs, lrs[1:]))


def test_decay_factor_by_hand():
    assert decay_factor(1, 4, 0.0, "cosine") == 0.25  # warm-up
    assert decay_factor(5, 4, 0.5, "cosine") == pytest.approx(0.5)
    assert decay_factor(5, 4, 1.0, "linear", 0.2) == pytest.approx(0.2)
    assert decay_factor(5, 0, 2.0, "cosine") == pytest.approx(0.0)  # past the budget: the floor
    with pytest.raises(ValueError, match="unknown decay"):
        decay_factor(5, 0, 0.5, "step")


def test_best_checkpoint_follows_the_task_loss_not_the_auxiliary_losses(tmp_path):
    trainer = make_trainer(tmp_path, config(max_epochs=3, lr=0.02), dropout=0.0, aux_weight=50.0)
    trainer.train()
    valid = read_log(tmp_path, "valid")
    assert all(r["loss"] > r["task_loss"] for r in valid)  # the auxiliary loss is in loss only
    best = min(valid, key=lambda r: r["task_loss"])
    assert resolve_checkpoint(tmp_path, "best").name == f"ckpt_{best['step']:06d}"


def test_best_checkpoint_by_a_named_metric_higher_is_better(tmp_path):
    scores = iter([5.0, 9.0, 7.0])
    trainer = make_trainer(tmp_path, config(max_epochs=3, best_metric="bleu"),
                           valid_metrics=lambda model: {"bleu": next(scores)})
    result = trainer.train()
    valid = read_log(tmp_path, "valid")
    assert result.best_valid_loss == 9.0 and valid[-1]["best_bleu"] == 9.0
    assert resolve_checkpoint(tmp_path, "best").name == f"ckpt_{valid[1]['step']:06d}"


def test_an_unknown_best_metric_is_named(tmp_path):
    trainer = make_trainer(tmp_path, config(max_steps=1, max_epochs=None, best_metric="bleu"))
    with pytest.raises(ValueError, match="best_metric='bleu' is not among the validation metrics"):
        trainer.train()


def test_train_and_validation_lines_reach_the_console(tmp_path, capsys):
    make_trainer(tmp_path, config(max_steps=2, max_epochs=None, log_interval=1, progress_bar=True)).train()
    err = capsys.readouterr().err
    assert "train | update 1 | epoch 1 | loss" in err and "lr " in err
    assert "valid | update 2 | loss" in err and "task_loss" in err
