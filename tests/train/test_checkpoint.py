"""Checkpoint directories: complete or absent, pointers, pruning, loading without pickle."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from synattn.errors import InputError
from synattn.train import load_checkpoint, resolve_checkpoint, save_checkpoint
from synattn.train.checkpoint import checkpoint_step, list_checkpoints, rng_state, set_rng_state
from tests.helpers.training import TinyTranslator


def _state(step: int) -> dict:
    return {"step": step, "values": torch.arange(3) * step, "nested": {"best": None, "x": [1.5, 2]}}


def test_save_writes_a_complete_directory_and_moves_the_pointers(tmp_path):
    folder = tmp_path / "checkpoints"
    model = TinyTranslator(seed=1)
    path = save_checkpoint(folder, 7, model, _state(7), is_best=True)
    assert path.name == "ckpt_000007" and sorted(p.name for p in path.iterdir()) == ["model.safetensors", "state.pt"]
    assert (folder / "last").read_text().strip() == (folder / "best").read_text().strip() == "ckpt_000007"
    other = TinyTranslator(seed=2)
    state = load_checkpoint(tmp_path, other)
    assert state["step"] == 7 and torch.equal(state["values"], torch.arange(3) * 7)
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), name
    save_checkpoint(folder, 9, model, _state(9))  # not best: "best" stays
    assert resolve_checkpoint(tmp_path).name == "ckpt_000009"
    assert resolve_checkpoint(tmp_path, "best").name == "ckpt_000007"
    assert resolve_checkpoint(folder / "ckpt_000009") == folder / "ckpt_000009"


def test_pruning_keeps_the_newest_and_the_best(tmp_path):
    folder = tmp_path / "checkpoints"
    model = TinyTranslator()
    for step in range(1, 8):
        save_checkpoint(folder, step, model, _state(step), is_best=step == 2, keep_last_n=3)
    assert [p.name for p in list_checkpoints(folder)] == ["ckpt_000002", "ckpt_000005", "ckpt_000006", "ckpt_000007"]
    assert load_checkpoint(folder, which="best")["step"] == 2


def test_leftovers_of_a_killed_save_are_never_taken_for_checkpoints(tmp_path):
    folder = tmp_path / "checkpoints"
    model = TinyTranslator()
    save_checkpoint(folder, 3, model, _state(3))
    half = folder / "ckpt_000004.tmp"  # a save killed while writing
    half.mkdir()
    (half / "state.pt").write_bytes(b"\x00" * 10)
    pointer = folder / ".last.x1y2.tmp"  # a pointer's temporary file
    pointer.write_text("ckpt_0")
    orphan = folder / "ckpt_000004"  # renamed but killed before "last" moved: complete, not pointed to
    orphan.mkdir()
    assert load_checkpoint(folder)["step"] == 3
    (folder / "last").unlink()  # killed before the first pointer: the newest complete directory
    assert resolve_checkpoint(folder) == orphan
    save_checkpoint(folder, 4, model, _state(4))  # the step is done again: replaces the orphan
    assert not half.exists() and not pointer.exists() and load_checkpoint(folder)["step"] == 4


def test_loading_never_unpickles_objects(tmp_path):
    folder = tmp_path / "checkpoints"
    model = TinyTranslator()
    path = save_checkpoint(folder, 1, model, _state(1))

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo unpickled > " + str(tmp_path / "pwned"),))

    with open(path / "state.pt", "wb") as f:
        pickle.dump({"step": Payload()}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(folder)
    assert not (tmp_path / "pwned").exists()


def test_missing_checkpoint_and_mismatched_weights_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match="no last checkpoint found"):
        load_checkpoint(tmp_path)
    save_checkpoint(tmp_path / "checkpoints", 1, TinyTranslator(d=16), _state(1))
    with pytest.raises(InputError, match=r"model\.safetensors: weights do not fit the model"):
        load_checkpoint(tmp_path, TinyTranslator(d=8))


def test_rng_states_round_trip(tmp_path):
    import random

    import numpy as np

    saved = rng_state()
    torch.save(saved, tmp_path / "rng.pt")
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def _weights(folder):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w")
    return folder


def test_a_run_that_starts_or_resumes_drops_the_snapshots_it_will_write_again(tmp_path):
    from synattn.train.checkpoint import drop_snapshots_after, save_snapshot

    folder = tmp_path / "snapshots"
    model = TinyTranslator()
    for step in (2, 4, 6):
        save_snapshot(folder, step, model)
    (folder / "ckpt_000008.tmp").mkdir()  # a write killed midway
    assert [p.name for p in drop_snapshots_after(folder, 4)] == ["ckpt_000006"]
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt_000002", "ckpt_000004"]
    assert [p.name for p in drop_snapshots_after(folder, 0)] == ["ckpt_000002", "ckpt_000004"]
    assert drop_snapshots_after(tmp_path / "none", 0) == []


def test_a_fresh_run_on_an_attempt_killed_before_its_first_checkpoint_keeps_none_of_its_snapshots(tmp_path):
    from tests.helpers.training import config, make_trainer

    stale = _weights(tmp_path / "snapshots" / "ckpt_000050")  # of another configuration
    make_trainer(tmp_path, config(max_steps=4, max_epochs=None, snapshot_interval_updates=2)).train()
    assert not stale.exists()
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == ["ckpt_000002", "ckpt_000004"]


def test_checkpoint_names_are_the_runs_own_before_a_folder_where_the_command_runs(tmp_path, monkeypatch):
    from synattn.errors import UsageError
    from synattn.evaluate.runner import named_checkpoint

    run = tmp_path / "run"
    snap = _weights(run / "snapshots" / "ckpt_000002")
    for step in (3, 6, 9, 12, 15):
        _weights(run / "snapshots" / f"ckpt_{step:06d}")
    both = _weights(run / "checkpoints" / "ckpt_000006")
    _weights(tmp_path / "ckpt_000002")  # another run's weights, in the working directory
    monkeypatch.chdir(tmp_path)
    assert named_checkpoint(run, "ckpt_000002") == snap
    assert named_checkpoint(run, "ckpt_000006") == both  # a checkpoint before a snapshot of that name
    assert named_checkpoint(run, "./ckpt_000002").resolve() == (tmp_path / "ckpt_000002").resolve()  # a path
    with pytest.raises(UsageError, match="ckpt_000099: no such checkpoint .*checkpoints: ckpt_000006; "
                                         "snapshots: ckpt_000002 … ckpt_000015, 6 of them"):
        named_checkpoint(run, "ckpt_000099")
    with pytest.raises(UsageError, match="is a file; give the checkpoint's folder"):
        named_checkpoint(run, str(snap / "model.safetensors"))
    for folder in (str(run / "snapshots"), ""):
        with pytest.raises(UsageError, match="not a checkpoint folder, no model.safetensors in it"):
            named_checkpoint(run, folder)


def test_checkpoint_step_names_a_folder_that_is_no_checkpoint():
    assert checkpoint_step("runs/x/snapshots/ckpt_000123") == 123
    with pytest.raises(ValueError, match="runs/x/best: not a checkpoint directory"):
        checkpoint_step("runs/x/best")
