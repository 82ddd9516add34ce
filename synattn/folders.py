"""Folders a command makes its own: nothing is written into a folder the command did not make,
nor into the file-system root or the home folder.

A command that fills a folder of its own (``prepare``'s dataset, ``train``'s run directory,
``reproduce``'s results folder, ``demo``'s outputs, ``viz``'s images) takes ``OUT`` only when it
is new, empty (a lock file aside) or a folder of that command: it holds the command's marker file
(:func:`mark`, written before anything else), or, for a folder made before markers existed, the
command's own files (each :class:`FolderKind` recognises them). Any other folder is refused with a
:class:`~synattn.errors.UsageError` naming the option, the folder and a few of its files, unless the
command has ``--force`` (``prepare``); ``--force`` never writes into a folder of another command
(a run directory, a study's results: every :class:`FolderKind` made is known). The file-system
root, the home folder and the folders above it are refused always, ``--force`` or not
(:func:`refuse_system_folder`).

Example:
    >>> kind = FolderKind(".synattn-example", "a folder of the example")
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = check_own_folder(Path(tmp) / "new", "-o", kind)  # a new folder: taken
    ...     (Path(tmp) / "notes.txt").write_text("mine")
    ...     check_own_folder(tmp, "-o", kind)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    synattn.errors.UsageError: -o ...: the folder exists and is not a folder of the example (it holds notes.txt); ...
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from synattn.errors import UsageError
from synattn.io import atomic_write
from synattn.locks import LOCK_NAME

logger = logging.getLogger(__name__)


_KINDS: dict[str, FolderKind] = {}  # every kind of folder made, by marker


@dataclass(frozen=True)
class FolderKind:
    """What a command's folder is.

    Attributes:
        marker: the marker file's name (``.synattn-dataset``).
        what: the folder in words, for messages (``"a prepared dataset"``).
        made_before_markers: recognises a folder of the command made before it wrote markers
            (e.g. a manifest of its own), or None.
        force_advice: what ``--force`` would do, for commands that have it (None: no ``--force``).
    """

    marker: str
    what: str
    made_before_markers: Callable[[Path], bool] | None = None
    force_advice: str | None = None

    def __post_init__(self):
        _KINDS[self.marker] = self

    def made(self, folder: str | Path) -> bool:
        """Whether ``folder`` is a folder of this kind (finished, or interrupted)."""
        folder = Path(folder)
        if _regular_file(folder / self.marker):
            return True
        return self.made_before_markers is not None and self.made_before_markers(folder)


def _regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file, not a symbolic link to one (a marker that is a link makes
    no folder synattn's own)."""
    return path.is_file() and not path.is_symlink()


def refuse_system_folder(path: str | Path, option: str) -> None:
    """Raises :class:`UsageError` when ``path`` is the file-system root, the home folder or a
    folder above the home folder (``/home``): a command never fills those with its files."""
    resolved = Path(path).resolve()
    home = Path.home().resolve()
    if resolved == Path(resolved.anchor):
        cause = "is the file system's root folder"
    elif resolved == home:
        cause = "is the home folder"
    elif home.is_relative_to(resolved):
        cause = f"holds the home folder {home}"
    else:
        return
    raise UsageError(f"{option} {path}: {cause}; name a new folder for the output (e.g. {Path(path) / 'out'})")


def check_own_folder(path: str | Path, option: str, kind: FolderKind, force: bool = False) -> Path:
    """``path`` if the command may fill it: new, empty (a lock file aside), or of ``kind``; with
    ``force`` any folder. Never the root or the home folder. Nothing is written.

    Raises:
        UsageError: a system folder, a file, or a folder with other content (and not ``force``).
    """
    path = Path(path)
    refuse_system_folder(path, option)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: exists and is not a folder")
    if not path.is_dir() or kind.made(path):
        return path
    content = sorted(p.name for p in path.iterdir() if p.name != LOCK_NAME)
    if not content:
        return path
    around = [path, *path.resolve().parents] if force else [path]  # --force: not inside one either
    for folder in around:
        other = next((k for k in _KINDS.values() if k is not kind and k.made(folder)), None)
        if other is not None:
            where = "the folder is" if folder is path else f"the folder lies in {folder}, which is"
            raise UsageError(f"{option} {path}: {where} {other.what}, not {kind.what}; choose a new or empty "
                             "folder" + (" (--force does not write into another command's folder)" if force else ""))
    if not force:
        shown = ", ".join(content[:3]) + (", ..." if len(content) > 3 else "")
        way_out = "choose a new or empty folder" + (f", or add --force {kind.force_advice}" if kind.force_advice
                                                    else "")
        raise UsageError(f"{option} {path}: the folder exists and is not {kind.what} (it holds {shown}); {way_out}")
    logger.warning("%s is not %s; writing into it anyway (--force)", path, kind.what)
    return path


def mark(folder: str | Path, kind: FolderKind) -> None:
    """Writes ``kind``'s marker into ``folder`` (made when missing) unless it is there: call it
    before anything else is written, so that an interrupted command's folder is still its own."""
    folder = Path(folder)
    if not _regular_file(folder / kind.marker):  # (a link there is replaced by the marker, never written through)
        with atomic_write(folder / kind.marker) as f:
            f.write(f"{kind.what} of synattn\n")


def remove_if_untouched(folder: str | Path, kind: FolderKind | None = None) -> None:
    """Removes ``folder`` when it holds nothing but a lock file and ``kind``'s marker: what a
    command that made it and then stopped before its work leaves (it must leave nothing)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    ours = {LOCK_NAME} | ({kind.marker} if kind else set())
    names = [p.name for p in folder.iterdir()]
    if set(names) <= ours:
        for name in names:
            (folder / name).unlink(missing_ok=True)
        folder.rmdir()


@contextmanager
def taken(folder: str | Path, kind: FolderKind) -> Iterator[Path]:
    """Marks ``folder`` as ``kind``'s (:func:`mark`) for the work in the ``with`` block; when the work
    fails before it wrote anything there, the folder is left as it was: removed if it was new, its
    marker removed if the folder had none (e.g. a folder that held only a prepared dataset)."""
    folder = Path(folder)
    new = not folder.exists()
    had_marker = _regular_file(folder / kind.marker)
    before = set() if new else {p.name for p in folder.iterdir()} - {LOCK_NAME}
    try:
        mark(folder, kind)  # (a full disk here too leaves the folder as it was)
        yield folder
    except BaseException:
        if new:
            remove_if_untouched(folder, kind)
        elif not had_marker and folder.is_dir():
            if {p.name for p in folder.iterdir()} - {LOCK_NAME} <= before | {kind.marker}:
                (folder / kind.marker).unlink(missing_ok=True)
        raise
