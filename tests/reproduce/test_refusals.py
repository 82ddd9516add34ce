"""A study refused once it has written into its folder (a dataset prepared from other inputs or
settings, a treebank with no sentence left) leaves the folder as it was, byte for byte: what it
made removed, what it overwrote written back (synattn.reproduce.guard)."""

from __future__ import annotations

import argparse
import shutil

import numpy as np
import pytest

from synattn.cli.main import main
from synattn.errors import UsageError
from synattn.locks import LOCK_NAME
from synattn.reproduce import STUDIES, Context
from synattn.reproduce.guard import FolderGuard
from tests.reproduce.folders import tree_state


def test_the_guard_removes_what_was_made_and_writes_back_what_was_overwritten(tmp_path):
    out = tmp_path / "out"
    (out / "text").mkdir(parents=True)
    (out / "text" / "train.en").write_text("old words\n")
    (out / LOCK_NAME).write_text('{"pid": 1}')
    before = tree_state(out)
    guard = FolderGuard(out)
    ctx = Context(out=out, args=argparse.Namespace(), guard=guard)
    ctx.write(out / "text" / "train.en", "new words\n")  # overwritten
    ctx.write(out / "text" / "dev.en", "made\n")  # made in a folder that was there
    ctx.write(out / "toy-treebank" / "train.conllu", "made\n")  # a folder made
    (out / LOCK_NAME).write_text("")  # a lock taken and released
    (out / "data").mkdir()
    (out / "data" / LOCK_NAME).write_text("")
    assert tree_state(out) != before
    guard.undo()  # (while the study holds the folder's lock: its lock file is written back once released)
    assert tree_state(out) == {**before, LOCK_NAME: tree_state(out)[LOCK_NAME]}
    lock = (out / LOCK_NAME).stat().st_ino
    guard.restore_files()
    assert tree_state(out) == before and (out / LOCK_NAME).stat().st_ino == lock  # in place, never replaced
    # a lock file another process holds keeps what that process wrote
    from synattn.locks import FolderLock

    with FolderLock(out, "test"):
        held = (out / LOCK_NAME).read_bytes()
        guard.restore_files()
        assert (out / LOCK_NAME).read_bytes() == held != b'{"pid": 1}'
    # once the runs start nothing is undone
    guard = FolderGuard(out)
    guard.start()
    (out / "runs").mkdir()
    guard.undo()
    assert (out / "runs").is_dir()
    # a new folder, and the parents made for it, are removed
    deep = tmp_path / "a" / "b" / "out"
    guard = FolderGuard(deep)
    Context(out=deep, args=argparse.Namespace(), guard=guard).write(deep / "text" / "x", "y")
    guard.undo()
    assert not (tmp_path / "a").exists()


@pytest.fixture(scope="module")
def tree_transformer_data(tmp_path_factory, treebank):
    """A folder holding only the dataset a toy tree-transformer study prepares (words as tokens,
    language-model text): a dataset the other treebank studies are refused."""
    out = tmp_path_factory.mktemp("tt-data")
    args = argparse.Namespace(src_trees=treebank[1:], text="lm", subword_model="word", corpus=None, gold=None,
                              toy=True)
    STUDIES["tree-transformer"].prepare(Context(out=out, args=args, toy=True))
    for made in ("toy-treebank", "lm-text"):
        shutil.rmtree(out / made)
    assert sorted(p.name for p in out.iterdir()) == ["data"]
    return out / "data"


@pytest.mark.parametrize("study, treebank_given", [("supervised-head", True), ("supervised-head", False),
                                                    ("pretrained-syntax", True)])
@pytest.mark.parametrize("lock", [True, False])
def test_a_folder_of_another_studys_dataset_is_refused_and_left_as_it_was(study, lock, treebank_given,
                                                                          tree_transformer_data, treebank, tmp_path,
                                                                          capsys):
    """The study writes its copies of the treebank (``toy-treebank/``; ``builtin-treebank/`` without
    ``--src-trees``) before it finds the dataset prepared otherwise: they, its marker and the lock
    files it made go, a lock file that was there keeps its bytes."""
    if study == "pretrained-syntax":
        pytest.importorskip("transformers")
        from tests.helpers.hf_models import pretrained_folder

        extra = ["--model", str(pretrained_folder(tmp_path / "bert")), "--layer", "1", "--head", "1"]
    else:
        extra = []
    out = tmp_path / "copied"
    shutil.copytree(tree_transformer_data, out / "data",
                    ignore=None if lock else shutil.ignore_patterns(LOCK_NAME))
    assert (out / "data" / LOCK_NAME).exists() == lock
    before = tree_state(out)
    capsys.readouterr()
    code = main(["reproduce", study, "--toy", "--seeds", "1", "-o", str(out), *extra,
                 *(treebank if treebank_given else [])])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and f"{out}/data is already prepared with other settings or inputs" in err[-1], err
    assert tree_state(out) == before


def test_a_treebank_with_no_sentence_left_leaves_no_folder(tmp_path, capsys):
    from synattn.trees.conllu_io import write_conllu
    from synattn.trees.dependency import DependencyTree

    paths = []
    for name, count in (("train", 3), ("dev", 2)):
        paths.append(tmp_path / f"{name}.conllu")
        write_conllu([DependencyTree(["!", "?"], np.array([0, 1]), upos=["PUNCT", "PUNCT"])] * count, paths[-1])
    out = tmp_path / "new" / "tt"
    assert main(["reproduce", "tree-transformer", "--toy", "--text", "lm", "-o", str(out),
                 "--src-trees", f"train={paths[0]}", f"dev={paths[1]}"]) == 2
    assert f"{paths[0]}: no sentence of split train is left" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_nothing_is_undone_for_a_failure_of_the_run(tmp_path):
    """Only a refusal of the input undoes: a failure of the run (another process holds the folder,
    a full disk) leaves what was written, for the same command to continue."""
    from synattn.errors import RunFailure
    from synattn.reproduce.guard import refusal

    assert refusal(UsageError("x")) and not refusal(RunFailure("x")) and not refusal(OSError("x"))
    assert not refusal(KeyboardInterrupt())
