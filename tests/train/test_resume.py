"""Exact resume: an interrupted-and-resumed run logs the same losses as the uninterrupted one;
SIGKILL at random moments always leaves a loadable last checkpoint."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from synattn.errors import InputError
from synattn.train import load_checkpoint, resolve_checkpoint
from tests.helpers.training import (
    Crash,
    CrashingTask,
    TinyTranslator,
    assert_same_run,
    config,
    logged_losses,
    make_trainer,
)


@pytest.mark.parametrize("overrides, crash_at", [
    (dict(), 14),  # update 14 = 5th batch of epoch 2; last checkpoint at update 12 (mid-epoch)
    (dict(update_freq=2, bf16=True, clip_norm=0.5, weight_decay=0.01), 18),  # in update 10; checkpoint at 8
])
def test_resume_mid_epoch_repeats_the_uninterrupted_run(tmp_path, overrides, crash_at):
    cfg = config(max_epochs=3, save_interval_updates=4, **overrides)
    full = make_trainer(tmp_path / "full", cfg)
    full.train()
    cut = make_trainer(tmp_path / "cut", cfg, task=CrashingTask(cfg.label_smoothing, crash_at))
    with pytest.raises(Crash):
        cut.train()
    state = load_checkpoint(tmp_path / "cut")
    assert state["epoch"] == 2 and state["batches_done"] > 0  # the resume starts mid-epoch
    assert max(s for s, _ in logged_losses(tmp_path / "cut")) > state["step"]  # logged past the checkpoint
    resumed = make_trainer(tmp_path / "cut", cfg, model_seed=1)  # other initial weights: replaced by the checkpoint
    resumed.train(resume=True)
    assert_same_run(full, resumed)


def test_resume_after_an_epoch_end_extends_the_run(tmp_path):
    full = make_trainer(tmp_path / "full", config(max_epochs=3))
    full.train()
    short = make_trainer(tmp_path / "part", config(max_epochs=2))
    assert short.train().stopped_by == "max_epochs"
    longer = make_trainer(tmp_path / "part", config(max_epochs=3), model_seed=5)
    result = longer.train(resume=True)
    assert result.stopped_by == "max_epochs" and result.step == full.step
    assert_same_run(full, longer)


def test_resume_guards(tmp_path):
    make_trainer(tmp_path, config(max_steps=2)).train()
    with pytest.raises(InputError, match="already has checkpoints"):
        make_trainer(tmp_path, config(max_steps=4)).train()
    with pytest.raises(InputError, match=r"max_tokens=40 in the checkpoint, max_tokens=50 now"):
        make_trainer(tmp_path, config(max_steps=4, max_tokens=50)).train(resume=True)
    fresh = make_trainer(tmp_path / "new", config(max_steps=1)).train(resume=True)  # nothing to resume
    assert fresh.step == 1


def _train_child(run_dir: Path, spec: dict) -> None:
    torch.set_num_threads(1)
    make_trainer(run_dir, config(**spec), train_size=60).train(resume=True)


def _saved_step(run_dir: Path) -> int:
    last = resolve_checkpoint(run_dir)
    return 0 if last is None else int(last.name.split("_")[1])


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_sigkill_at_random_moments_leaves_a_loadable_checkpoint_and_resume_stays_exact(tmp_path):
    """Processes forked from this one (no second start-up of torch) are killed a random time
    after saving a random update, so kills fall in any phase: forward, backward, saving."""
    settings = dict(max_epochs=4, save_interval_updates=1, keep_last_n=2)
    # first: the forked children then inherit the imports that building an optimizer makes
    reference = make_trainer(tmp_path / "ref", config(**settings), train_size=60)
    reference.train()
    run = tmp_path / "run"
    fork = multiprocessing.get_context("fork")
    rng = random.Random(1234)
    last_step, kills = 0, 0
    for _ in range(4):
        child = fork.Process(target=_train_child, args=(run, settings))
        child.start()
        target = last_step + rng.randint(1, 8)
        while child.is_alive() and _saved_step(run) < target:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.03))
        if not child.is_alive():  # finished before the kill
            assert child.exitcode == 0
            break
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        kills += 1
        if resolve_checkpoint(run) is None:  # killed before the first save completed
            assert not list(run.glob("checkpoints/ckpt_??????"))
            continue
        state = load_checkpoint(run, TinyTranslator(seed=9))  # weights strict, state weights_only
        assert state["step"] >= last_step
        last_step = state["step"]
    assert kills >= 3 and last_step > 0
    child = fork.Process(target=_train_child, args=(run, settings))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    resumed = TinyTranslator(seed=9)
    load_checkpoint(run, resumed)
    got, expected = logged_losses(run), logged_losses(tmp_path / "ref")
    assert [s for s, _ in got] == [s for s, _ in expected]
    np.testing.assert_allclose([x for _, x in got], [x for _, x in expected], rtol=1e-6, atol=0)
    for (name, p), q in zip(reference.model.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7, msg=name)


def test_resuming_with_other_batches_per_update_is_warned_about(tmp_path, caplog):
    """Two processes' updates continued by one process sum half the tokens: said, not silent."""
    first = make_trainer(tmp_path, config(update_freq=2, max_epochs=1, save_interval_updates=2), dropout=0.0)
    first.train()
    first.close()
    with caplog.at_level("WARNING"):
        again = make_trainer(tmp_path, config(update_freq=1, max_epochs=2, save_interval_updates=2), dropout=0.0)
        again.train(resume=True)
        again.close()
    warned = [r.getMessage() for r in caplog.records if "batches (processes × update_freq)" in r.getMessage()]
    assert warned == ["the run made its updates of 2 batches (processes × update_freq); it continues with 1 "
                      "(1 processes × update_freq 1), so each update sums fewer tokens from here; for the same "
                      "updates, give processes × update_freq = 2"]
