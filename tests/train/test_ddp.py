"""Two processes under torchrun (gloo, CPU) train like one process accumulating two batches."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import torch

from synattn.train import load_checkpoint, read_log
from tests.helpers.paths import ROOT
from tests.helpers.training import TinyTranslator, config, make_trainer


def test_torchrun_two_processes_match_one_process_with_update_freq_2(tmp_path):
    # 48 examples make 9 batches an epoch: the last update has one batch, and rank 1 a dummy one
    settings = dict(max_epochs=2, clip_norm=1.0)
    spec = {"config": settings, "dropout": 0.0, "params_out": str(tmp_path), "train_size": 48}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "tests" / "helpers" / "training.py"), str(tmp_path / "ddp"), json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for name, value in ranks[0].items():
        assert torch.equal(value, ranks[1][name]), name  # DDP kept the replicas identical
    loaded = TinyTranslator(seed=7)
    state = load_checkpoint(tmp_path / "ddp", loaded)
    assert state["step"] == 10 and state["epoch"] == 3
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, ranks[0][name]), name

    single = make_trainer(tmp_path / "single", config(update_freq=2, **settings), dropout=0.0)
    single.train()
    for name, value in single.model.state_dict().items():
        torch.testing.assert_close(ranks[0][name], value, rtol=1e-5, atol=1e-6, msg=name)
    for kind in ("train", "valid"):  # rank 0 alone wrote the log, with the sums of both ranks
        ddp, one = read_log(tmp_path / "ddp", kind), read_log(tmp_path / "single", kind)
        assert [r["step"] for r in ddp] == [r["step"] for r in one]
        assert [r.get("ntokens") for r in ddp] == [r.get("ntokens") for r in one]
        np.testing.assert_allclose([r["loss"] for r in ddp], [r["loss"] for r in one], rtol=1e-5)
