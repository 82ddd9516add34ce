"""``synattn reproduce --budget updates N``: every run of a study ends at the same update, and its
learning-rate schedule is that long; ``--minutes`` stays the default budget."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from synattn.cli.main import main
from synattn.train.optim import decay_factor


def _lr_by_step(run):
    return {e["step"]: e["lr"] for e in map(json.loads, (run / "log.jsonl").read_text().splitlines())
            if e.get("kind") == "train"}


def test_budget_in_updates_ends_every_run_at_that_update(tmp_path, treebank, capsys):
    out = tmp_path / "tt"
    args = ["reproduce", "tree-transformer", "--toy", "--seeds", "2", "-o", str(out)]
    assert main(args + ["--budget", "updates", "8"] + treebank) == 0
    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]["tree-transformer"]
    assert [runs[s]["train_step"] for s in ("1", "2")] == [8, 8]  # not the toy's 6, not a number of minutes
    train = yaml.safe_load((out / "configs" / "tree-transformer.yaml").read_text())["train"]
    assert train["max_steps"] == 8 and train["max_minutes"] is None
    assert "8 updates" in capsys.readouterr().err
    # the cosine schedule ends with the budget: the rate logged at update 8 (the mean over the log's
    # interval, updates 7 and 8) is that of a decay over 8 updates
    lr = _lr_by_step(out / "runs" / "tree-transformer" / "seed1")
    interval = range(8 - train["log_interval"], 8)  # updates done before each of the interval's updates
    expected = np.mean([decay_factor(done + 1, train["warmup_updates"], done / 8, "cosine", train["min_lr_ratio"])
                        for done in interval])
    assert lr[8] == pytest.approx(train["lr"] * expected, rel=1e-6)
    # the folder keeps its budget: minutes, or other updates, are refused before anything is trained
    for other, said in ((["--minutes", "1"], "--minutes 1"), (["--budget", "updates", "9"], "--budget updates 9")):
        assert main(args + other + treebank) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "budget of 8 updates" in err[0]
        assert "--budget updates 8" in err[0]


def test_minutes_stay_the_default_budget_and_the_budget_is_checked(tmp_path, treebank, capsys):
    out = tmp_path / "tt"
    assert main(["reproduce", "tree-transformer", "--toy", "--seeds", "1", "-o", str(out)] + treebank) == 0
    train = yaml.safe_load((out / "configs" / "tree-transformer.yaml").read_text())["train"]
    assert train["max_minutes"] == 0.5 and train["max_steps"] == 6  # the toy's minutes, and its 6 updates
    lr = _lr_by_step(out / "runs" / "tree-transformer" / "seed1")
    assert lr[6] > 2 * train["lr"] * train["min_lr_ratio"]  # decaying over minutes, far from their end
    capsys.readouterr()
    for bad, said in ((["--budget", "steps", "5"], "--budget steps"), (["--budget", "updates", "0"], "positive"),
                      (["--budget", "updates", "5", "--minutes", "3"], "--budget and --minutes")):
        assert main(["reproduce", "tree-transformer", "--toy", "-o", str(tmp_path / "bad")] + bad + treebank) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0]
