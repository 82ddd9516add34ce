"""A study refused before its work leaves its results folder as it was, byte for byte.

A study checks its options before it touches the folder (:meth:`Study.check
<synattn.reproduce.study.Study.check>`), but some refusals can only come once it has written there:
the copies of a treebank it prepares from (``toy-treebank/``, ``lm-text/``, ``text/``) decide
whether the folder's ``data/`` was prepared from the same inputs, and a folder that holds only a
copied ``data/`` is refused when that dataset was prepared otherwise. :class:`FolderGuard` records
the folder before the study starts and undoes what it wrote when it is refused (a
:class:`~synattn.errors.SynattnError` other than a :class:`~synattn.errors.RunFailure`) before its
first run: what it made is removed (the whole folder, and the parents made for it, when it was
new), what it overwrote is written back (:meth:`FolderGuard.keep` saves it first; the lock files
of the folder and of its ``data/`` are saved from the start). Once the runs start
(:meth:`FolderGuard.start`) nothing is undone: the study's work stays for the same command to
continue.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = Path(tmp) / "study"
    ...     guard = FolderGuard(out)
    ...     (out / "text").mkdir(parents=True)
    ...     guard.undo()
    ...     out.exists()
    False
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from synattn.errors import RunFailure, SynattnError
from synattn.locks import LOCK_NAME


def refusal(err: BaseException) -> bool:
    """Whether ``err`` refuses the study's input (exit status 2), not a failure of the run."""
    return isinstance(err, SynattnError) and not isinstance(err, RunFailure)


class FolderGuard:
    """What a study's results folder ``folder`` held before the study, to undo what the study wrote
    there if it is refused before its runs start (see the module docstring)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.made_from: Path | None = None  # the first folder of the path that did not exist
        for path in reversed([self.folder, *self.folder.parents]):
            if not os.path.lexists(path):
                self.made_from = path
                break
        self.names = set() if self.made_from is not None else set(os.listdir(self.folder))
        self.saved: dict[Path, bytes | None] = {}
        self.started = False
        for lock in (self.folder / LOCK_NAME, self.folder / "data" / LOCK_NAME):
            self.keep(lock)

    def keep(self, path: str | Path) -> None:
        """Saves the file ``path`` as it is now (or that it does not exist) before the study writes
        it, unless saved already or the runs have started."""
        path = Path(path)
        if self.started or path in self.saved or path.is_symlink():  # a link is the user's: never undone
            return
        try:
            self.saved[path] = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            self.saved[path] = None

    def start(self) -> None:
        """The study's runs start: from here on nothing is undone."""
        self.started = True

    def undo(self) -> None:
        """Puts the folder back as it was (see the module docstring); nothing once the runs started."""
        if self.started:
            return
        if self.made_from is not None:
            shutil.rmtree(self.made_from, ignore_errors=True)
            return
        for name in set(os.listdir(self.folder)) - self.names:
            path = self.folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self.restore_files(locks=False)

    def restore_files(self, locks: bool = True) -> None:
        """Writes back every saved file (removes those that did not exist); a lock file that was
        there only with ``locks`` (once its lock is released: it is written in place, and left
        alone while another process holds it)."""
        for path, data in self.saved.items():
            if path.name == LOCK_NAME and data is not None:
                if locks:
                    _rewrite_lock(path, data)
            elif data is None:
                if not path.is_dir() or path.is_symlink():
                    path.unlink(missing_ok=True)
            elif path.is_symlink() or not path.is_file() or path.read_bytes() != data:
                _put(path, data)


def _rewrite_lock(path: Path, data: bytes) -> None:
    """Writes ``data`` into the lock file ``path`` in place (a lock file is never replaced: a
    process holding it would hold another file than the next one), unless another process holds
    its lock now (its description of itself stays) or it is gone or a link."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when fd is closed
        except ImportError:  # pragma: no cover - Windows: no locks
            pass
        except OSError:
            return  # held by another process
        if os.pread(fd, len(data) + 1, 0) != data:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
    finally:
        os.close(fd)


def _put(path: Path, data: bytes) -> None:
    """Writes ``data`` as the file ``path`` under a temporary name renamed into place (a link at
    ``path`` is replaced, not followed); nothing when its folder is gone."""
    import tempfile

    if not path.parent.is_dir():
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # (mkstemp makes 0600: a file as any other the study writes)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
