"""``synattn reproduce --jobs N``: N runs at once, each in a process of its own, train to the same
numbers as one after the other; a run that fails stops the study with one line naming it, and the
same command then continues."""

from __future__ import annotations

import json

from synattn.cli.main import main


def _study(out, treebank, *extra, seeds=2):
    return main(["reproduce", "tree-transformer", "--toy", "--seeds", str(seeds), "--budget", "updates", "5",
                 "--threads", "1", "-o", str(out), *extra, *treebank])


def test_parallel_runs_train_to_the_same_numbers_as_serial_ones(tmp_path, treebank, capfd):
    assert _study(tmp_path / "serial", treebank) == 0
    serial_out = capfd.readouterr().out
    assert _study(tmp_path / "parallel", treebank, "--jobs", "2") == 0
    captured = capfd.readouterr()
    serial, parallel = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("serial", "parallel"))
    assert parallel["complete"] and list(parallel["runs"]) == list(serial["runs"])
    for arm, by_seed in serial["runs"].items():
        assert list(parallel["runs"][arm]) == ["1", "2"]  # in the seeds' order, however the runs ended
        for seed, metrics in by_seed.items():
            assert metrics["train_step"] == 5
            for key, value in metrics.items():
                if key not in ("train_minutes",):
                    assert parallel["runs"][arm][seed][key] == value, (arm, seed, key)
    assert captured.out == serial_out  # the same table
    assert "2 runs at a time" in captured.err and "seed 2: done" in captured.err


def test_a_failed_run_stops_the_study_naming_it_and_the_command_continues(tmp_path, treebank, capfd):
    out = tmp_path / "tt"
    assert _study(out, treebank, seeds=1) == 0
    blocker = out / "runs" / "tree-transformer" / "seed2"
    blocker.write_text("not a run directory\n")  # the run cannot be made: its training fails
    capfd.readouterr()
    assert _study(out, treebank, "--jobs", "2") == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert "tree-transformer, seed 2" in err[-1] and str(blocker) in err[-1]
    blocker.unlink()
    assert _study(out, treebank, "--jobs", "2") == 0
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and list(results["runs"]["tree-transformer"]) == ["1", "2"]
