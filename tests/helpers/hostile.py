"""What some hostile cases of ``tests/cli/test_failures.py`` make in the sandbox before their
command runs: each maker is called with an :class:`Env` (``file("a.conllu", CONLLU)`` writes
``B/a.conllu``; ``both(...)`` runs several)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from synattn.locks import FolderLock
from tests.helpers.cli import CONLLU


@dataclass
class Env:
    box: Path  # the sandbox
    tiny: Path  # the shared tiny runs
    monkeypatch: pytest.MonkeyPatch
    stack: contextlib.ExitStack  # closed after the command


def file(name: str, text: str = "x\n"):
    def make(env):
        path = env.box / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return make


def folder(name: str):
    return lambda env: (env.box / name).mkdir(parents=True)


def both(*makers):
    def make(env):
        for maker in makers:
            maker(env)
    return make


def readonly(env):
    """``B/ro``: a folder this process cannot write into (chmod 555; for root, which ignores
    permissions, ``os.access`` answers as the kernel does for another user)."""
    ro = env.box / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.access(ro, os.W_OK):  # root
        real = os.access

        def access(path, mode, **kw):
            return False if mode & os.W_OK and Path(path).absolute() == ro else real(path, mode, **kw)

        env.monkeypatch.setattr(os, "access", access)


def full_disk(env):
    """Every file write fails as on a full disk: the final flush of an atomic write, the copy of
    a run's tokenizers, torch's checkpoint writer."""
    import torch

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    env.monkeypatch.setattr("synattn.io.os.fsync", full)
    env.monkeypatch.setattr("synattn.runs.shutil.copyfile", full)
    env.monkeypatch.setattr(torch, "save", full)


def locked(env):
    env.stack.enter_context(FolderLock(env.box / "run", "run directory"))  # another writer holds B/run


def victim(env):
    (env.box / "victim").mkdir()
    (env.box / "victim" / "keep.txt").write_text("mine")
    file("a.conllu", CONLLU)(env)


def userdata(env):
    (env.box / "userdata" / "train").mkdir(parents=True)
    (env.box / "userdata" / "train" / "notes.txt").write_text("precious")
    file("a.conllu", CONLLU)(env)


def list_yaml(top):
    return file("list.yaml", yaml.safe_dump(top))


def long_line(words: int):
    return file("long.txt", "dogs bark\n" + "the cat " * (words // 2) + "\n")


def bad_dataset(files: dict[str, bytes | str]):
    """``B/data``: a copy of the tiny dataset with files replaced (by bytes, or by another file of
    the dataset, named); ``B/exp.yaml`` trains on it."""
    def make(env):
        data = env.box / "data"
        shutil.copytree(env.tiny / "data", data, ignore=shutil.ignore_patterns(".synattn.lock"))
        for name, content in files.items():
            (data / name).write_bytes(content if isinstance(content, bytes)
                                      else (env.tiny / "data" / content).read_bytes())
        config = yaml.safe_load((env.tiny / "mt.yaml").read_text())
        (env.box / "exp.yaml").write_text(yaml.safe_dump({**config, "data": str(data)}))
    return make


def home(env):
    """``B/home``: the home folder of the command (HOME), holding a file of the user's."""
    file("home/notes.txt", "mine")(env)
    env.monkeypatch.setenv("HOME", str(env.box / "home"))


def copy(name: str, to: str | None = None):
    """A copy of the tiny ``name`` (a run, a dataset) in the sandbox (``B/to``)."""
    return lambda env: shutil.copytree(env.tiny / name, env.box / (to or name),
                                       ignore=shutil.ignore_patterns(".synattn.lock"))


def users_folder(env):
    """The sandbox is a user's folder: a commented experiment config, notes and labels of theirs."""
    config = (env.tiny / "mt.yaml").read_text()
    file("config.yaml", "# my experiment, with comments\n" + config)(env)
    file("vocab/notes.txt", "precious")(env)
    file("vocab/labels.json", '{"mine": 1}')(env)


def dataset_in_use_by_prepare(env):
    """``B/data``, being rebuilt by a ``prepare --force`` that holds its lock (no manifest yet)."""
    bad_dataset({})(env)
    env.stack.enter_context(FolderLock(env.box / "data", "prepared dataset"))
    (env.box / "data" / "manifest.json").unlink()


def garbage_run_tokenizer(env):
    copy("mt", "run")(env)
    (env.box / "run" / "vocab" / "spm.src.model").write_bytes(b"not a sentencepiece model")


def linked(env):
    file("d.en", "dogs bark at night\n")(env)
    (env.box / "link.en").symlink_to(env.box / "d.en")


def treebank(name: str = "a.conllu", longest: int = 3):
    """A treebank of the tiny English sentences (chains), the last of ``longest`` + 1 words."""
    from tests.helpers.cli import EN

    lines = [*EN, " ".join(["word"] * (longest + 1))]
    blocks = ["".join(f"{k}\t{w}\t_\tX\t_\t_\t{k - 1}\t{'root' if k == 1 else 'dep'}\t_\t_\n"
                      for k, w in enumerate(line.split(), start=1)) for line in lines]
    return file(name, "\n".join(blocks) + "\n")
