"""Where a run's checkpoints are: the layout of ``RUN/checkpoints`` (and ``RUN/snapshots``) and its
``last``/``best`` pointers, read. :mod:`synattn.train.checkpoint` writes them (its docstring gives the
layout and why a directory named ``ckpt_NNNNNN`` is always complete); loading a model from a run
(:meth:`synattn.models.PretrainedModel.from_pretrained`) and evaluation read them from here.

Example:
    >>> from synattn.checkpoints import checkpoint_name, checkpoint_step
    >>> checkpoint_name(120), checkpoint_step("runs/x/checkpoints/ckpt_000120")
    ('ckpt_000120', 120)
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKPOINTS = "checkpoints"
SNAPSHOTS = "snapshots"
WEIGHTS = "model.safetensors"
STATE = "state.pt"
POINTERS = ("last", "best")
NAME = re.compile(r"ckpt_(\d+)")
"""The name of a checkpoint or snapshot directory (its update in the group)."""


def checkpoint_name(step: int) -> str:
    """``ckpt_000123`` for update 123."""
    return f"ckpt_{step:06d}"


def checkpoint_step(path: str | Path) -> int:
    """The update of a checkpoint or snapshot directory: 123 for ``ckpt_000123``."""
    match = NAME.fullmatch(Path(path).name)
    if match is None:
        raise ValueError(f"{path}: not a checkpoint directory (ckpt_NNNNNN)")
    return int(match.group(1))


def list_checkpoints(folder: str | Path) -> list[Path]:
    """The complete checkpoint directories of ``folder``, oldest (fewest updates) first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if p.is_dir() and (m := NAME.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def read_pointer(folder: Path, which: str) -> Path | None:
    """The checkpoint directory ``folder/which`` (``last`` or ``best``) names; None when it is absent,
    damaged or names no directory."""
    try:
        name = (folder / which).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):  # a damaged pointer is no pointer
        return None
    target = folder / name
    return target if NAME.fullmatch(name) and target.is_dir() else None


def resolve_checkpoint(path: str | Path, which: str = "last") -> Path | None:
    """The checkpoint directory that ``path`` designates, or None when there is none.

    Args:
        path: a run directory, its ``checkpoints`` folder, or a checkpoint directory.
        which: ``"last"`` or ``"best"``. Without a readable ``last`` pointer (a run killed
            before its first pointer was written), the newest complete directory is taken.
    """
    if which not in POINTERS:
        raise ValueError(f"which={which!r}: use 'last' or 'best'")
    path = Path(path)
    if (path / STATE).is_file():
        return path
    folder = path / CHECKPOINTS if (path / CHECKPOINTS).is_dir() else path
    target = read_pointer(folder, which)
    if target is None and which == "last":
        complete = list_checkpoints(folder)
        target = complete[-1] if complete else None
    return target
