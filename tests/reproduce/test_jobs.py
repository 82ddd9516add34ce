"""``synattn reproduce --jobs N``: N runs at once, each in a process of its own, train to the same
numbers as one after the other; a run that fails stops the study with one line naming it, and the
same command then continues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"  # a zombie has ended


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["kill", "kill -9"])
def test_the_runs_stop_when_the_study_is_killed(tmp_path, treebank, sig):
    """``kill`` of the study's process stops its runs as Ctrl-C does; ``kill -9`` (or the out-of-memory
    killer) leaves them without it, and each stops itself instead of training on unwatched."""
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        study = subprocess.Popen([sys.executable, "-m", "synattn.cli.main", "reproduce", "tree-transformer", "--toy",
                                  "--seeds", "2", "--budget", "updates", "100000", "--threads", "1", "--jobs", "2",
                                  "-o", str(tmp_path / "tt"), *treebank], stderr=stderr, stdout=subprocess.DEVNULL)
    runs: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while err.read_text().count(": started") < 2 or not all(
                (tmp_path / "tt" / "runs" / "tree-transformer" / f"seed{s}" / "log.jsonl").exists() for s in (1, 2)):
            assert study.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.5)
        runs = {pid for pid in _children(study.pid)
                if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")}
        assert len(runs) == 2
        study.send_signal(sig)
        study.wait(timeout=60)
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in runs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in runs), "a run trains on after its study was killed"
    finally:
        if study.poll() is None:
            study.kill()
        for pid in runs | _children(study.pid):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("runs", "jobs", "said"), [
    (3, 3, " (at most 3.0 h of training to go: 60 min with 3 at a time)"),
    (5, 2, " (at most 5.0 h of training to go: 3.0 h with 2 at a time)"),
    (2, 4, " (at most 2.0 h of training to go: 60 min with 2 at a time)"),
    (3, 1, " (at most 3.0 h of training to go)"),
    (1, 3, " (at most 60 min of training to go)"),
    (0, 3, ""),
])
def test_the_time_to_go_says_the_wall_time_of_runs_at_once(runs, jobs, said):
    from synattn.reproduce.runner import _time_to_go

    assert _time_to_go(runs, 60, jobs) == said
