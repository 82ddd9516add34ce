"""Hostile cases of the "nothing lost, nothing silent" review that need more than one command, or a
look inside the output (the one-command cases are ``tests/cli/test_failures.py``): a dataset
rebuilt while a train reads it, a full disk while arrays are written, linked split folders, the
root and home folders, a study into a folder of a dataset."""

from __future__ import annotations

import os
import shutil

import pytest
import yaml

from tests.helpers.cli import digest, run_cli, sandbox


def test_prepare_force_stops_while_a_train_reads_the_dataset(tiny_runs, monkeypatch):
    """A `prepare --force` started while `train` reads the dataset stops (exit 1) naming the train,
    and the dataset stays as it was; a `prepare` with the same settings (nothing to write) is fine."""
    import synattn.train.experiment_run as experiment_run

    with sandbox(tiny_runs) as box:
        shutil.copytree(tiny_runs / "data", box / "data", ignore=shutil.ignore_patterns(".synattn.lock"))
        config = yaml.safe_load((tiny_runs / "mt.yaml").read_text())
        (box / "exp.yaml").write_text(yaml.safe_dump({**config, "data": str(box / "data")}))
        prepare = ["prepare", "--train", str(tiny_runs / "train"), "--test", str(tiny_runs / "test"),
                   "--no-parse-source", "--vocab-size", "50", "-o", str(box / "data")]
        seen = {}
        checked = experiment_run.check_training_data

        def meanwhile(folder):  # what another shell does while the train runs
            seen["force"] = run_cli([*prepare, "--force"])
            seen["same"] = run_cli(prepare)
            seen["dataset"] = digest(box / "data")
            checked(folder)

        monkeypatch.setattr(experiment_run, "check_training_data", meanwhile)
        before = digest(box / "data")
        code, err = run_cli(["train", "--config", "exp.yaml", "--run-dir", "run"])
        assert code == 0, err
        (force_code, force_err), (same_code, same_err) = seen["force"], seen["same"]
        assert force_code == 1 and "this prepared dataset is in use by process" in force_err, force_err
        assert f"in use by process {os.getpid()} on" in force_err  # the train (in this process here)
        assert same_code == 0, same_err
        assert seen["dataset"] == before == digest(box / "data")


def test_full_disk_while_prepare_writes_arrays(tiny_runs, monkeypatch):
    """numpy's short write on a full disk ("N requested and M written", no errno) is said to be a
    full disk, and the half-built splits (``.building``) are removed."""
    import numpy as np

    import synattn.data.indexed as indexed

    calls = []

    def short_write(f, array, **kwargs):
        calls.append(1)
        if len(calls) < 3:
            return np.save(f, array, **kwargs)
        f.write(b"\x93NUMPY" + bytes(100))
        raise OSError("103440 requested and 38880 written")

    with sandbox(tiny_runs) as box:
        monkeypatch.setattr(indexed.np, "save", short_write)
        code, err = run_cli(["prepare", "--train", str(tiny_runs / "train"), "--no-parse-source", "--vocab-size", "40",
                             "-o", "out"])
        monkeypatch.undo()
        assert code == 1 and "cannot write: only 38880 of 103440 bytes could be written (is the disk full?)" in err
        assert not (box / "out" / ".building").exists() and not (box / "out" / "manifest.json").exists()


def test_prepare_force_replaces_a_linked_split_folder_without_following_it(tiny_runs):
    with sandbox(tiny_runs) as box:
        shutil.copytree(tiny_runs / "data", box / "data", ignore=shutil.ignore_patterns(".synattn.lock"))
        (box / "elsewhere").mkdir()
        (box / "elsewhere" / "keep.txt").write_text("mine")
        shutil.rmtree(box / "data" / "train")
        (box / "data" / "train").symlink_to(box / "elsewhere")
        code, err = run_cli(["prepare", "--train", str(tiny_runs / "train"), "--no-parse-source", "--vocab-size", "40",
                             "-o", "data", "--force"])
        assert code == 0, err
        assert not (box / "data" / ".building").exists() and not (box / "data" / "train").is_symlink()
        assert (box / "data" / "train" / "src_ids.data.npy").is_file()
        assert [p.name for p in (box / "elsewhere").iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("force", [False, True])
def test_the_root_and_the_home_folder_are_never_an_output_folder(tmp_path, monkeypatch, force):
    """`/`, the home folder and the folders above it, for every command that fills a folder (the
    CLI cases above show each command asks; here the root itself, which no test may write into)."""
    from synattn.data.prepared import DATASET
    from synattn.errors import UsageError
    from synattn.folders import check_own_folder
    from synattn.runs import RUN

    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for kind in (DATASET, RUN):
        for path, cause in (("/", "is the file system's root folder"), (home, "is the home folder"),
                            (tmp_path / "users", "holds the home folder")):
            with pytest.raises(UsageError, match=cause):
                check_own_folder(path, "-o", kind, force=force)
        assert check_own_folder(home / "new", "-o", kind, force=force) == home / "new"
    code, err = run_cli(["corpus", "ptb", "-o", "/"])
    assert code == 2 and "-o /: is the file system's root folder" in err


def test_a_study_into_a_folder_of_a_dataset_reuses_or_refuses_it_and_leaves_it_as_it_was(tiny_runs, tmp_path):
    """A folder holding only a prepared ``data/`` is a study's to take (a dataset prepared for it is
    reused): one prepared with other settings is refused by name, and the folder is left as it was,
    byte for byte (no marker, no texts, no lock file of the study's)."""
    from tests.reproduce.folders import tree_state

    out = tmp_path / "st"
    shutil.copytree(tiny_runs / "data", out / "data", ignore=shutil.ignore_patterns(".synattn.lock"))
    before = tree_state(out)
    for _ in range(2):  # and again
        got, err = run_cli(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", str(out)])
        assert got == 2, err
        last = err.strip().splitlines()[-1]
        assert f"{out}/data is already prepared with other settings or inputs" in last, last
        assert tree_state(out) == before
