"""One writer per folder: an advisory lock on run directories and prepared-dataset folders.

The lock is ``fcntl.flock`` on the file ``.synattn.lock`` inside the folder, which records the
holder (process id, host, start time, command) for the error message a second writer gets. The
operating system releases a flock when its process ends, however it ends (``kill -9`` included),
so a lock file left behind by a crashed process is not a held lock: the next writer simply takes
it. The file itself is never deleted (deleting it would let two processes lock two different
files of the same name).

A process that only reads a folder for a long time (``synattn train`` reading its prepared
dataset) holds a *shared* lock on the same file: any number of readers together, and no writer
meanwhile (``prepare --force`` stops, naming a reader; a reader stops while ``prepare`` writes,
naming it). A reader that cannot write into the folder still locks it (the lock file opened for
reading); a folder without a lock file that it cannot make is read without one.

The lock file is opened without following a symbolic link and must be a regular file
(:func:`synattn.io.open_regular`): a link named ``.synattn.lock`` is refused with an
:class:`~synattn.errors.InputError` naming it, and the file it points to is left as it is. A lock
is held on the file that bears the name when the lock is taken (a lock file removed and made anew
meanwhile, by a command that removes the folder it made, is locked again), so two processes never
hold two different files of the same name.

Where ``fcntl`` does not exist (Windows) the lock does nothing.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder, FolderLock(folder, "run directory"):
    ...     pass  # only this process writes into the folder here
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from synattn.errors import RunFailure
from synattn.io import open_regular

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".synattn.lock"


def holder_of(folder: str | Path) -> dict | None:
    """What the lock file of ``folder`` says about its last holder (None when unreadable, or not a
    regular file of its own)."""
    try:
        fd = open_regular(Path(folder) / LOCK_NAME, os.O_RDONLY, what="lock file")
        with os.fdopen(fd, "rb") as f:
            holder = json.loads(f.read(1 << 16).decode("utf-8"))
    except (OSError, ValueError):  # (InputError is a ValueError)
        return None
    return holder if isinstance(holder, dict) else None


def _describe(holder: dict | None) -> str:
    if not holder:
        return "another process"
    started = holder.get("started")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} since {since} "
            f"({holder.get('command', '?')})")


class FolderLock:
    """An exclusive (one writer) or shared (readers), non-blocking lock on ``folder``; a writer
    creates the folder when missing.

    Args:
        folder: the folder to lock.
        what: what the folder is, for the error message (``"run directory"``).
        shared: a reader's lock, held together with other readers' but never with a writer's.

    Raises:
        RunFailure: (on :meth:`acquire`) another process holds the lock; the message names it.
    """

    def __init__(self, folder: str | Path, what: str = "folder", shared: bool = False):
        self.folder, self.what, self.shared = Path(folder), what, shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> FolderLock:
        if self._fd is not None or fcntl is None:
            return self
        path = self.folder / LOCK_NAME
        for _ in range(10):  # the file was removed (or replaced) between the open and the flock: again
            if self.shared:
                fd = _open_for_reading(path)
                if fd is None:
                    return self
            else:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = open_regular(path, os.O_RDWR | os.O_CREAT, what="lock file")
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunFailure(f"{self.folder}: this {self.what} is in use by "
                                 f"{_describe(holder_of(self.folder))}; wait for it to finish or stop it (a lock "
                                 f"left by a process that died is taken over automatically)") from None
            except BaseException:
                os.close(fd)
                raise
            if _names(fd, path):
                break
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        else:
            raise RunFailure(f"{path}: the lock file keeps being removed or replaced by another process; "
                             "try again")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                "command": _shortened(" ".join(["synattn", *sys.argv[1:]]))}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:  # the holder's description is a courtesy; the flock is the lock
            pass
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if not self.shared:  # another reader may still hold a shared lock: its description stays
                os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _open_for_reading(path: Path) -> int | None:
    """The lock file opened for a shared lock (made when missing and possible; read-only in a
    folder the process cannot write), or None when there is none and none can be made.

    Raises:
        InputError: the lock file is a symbolic link or not a regular file.
    """
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            return open_regular(path, flags, what="lock file")
        except OSError:
            continue
    return None


def _names(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is (still) the file named ``path``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except OSError:
        return False


def _shortened(command: str, limit: int = 200) -> str:
    """``command`` cut at a word boundary to at most ``limit`` characters, with " …" where cut."""
    if len(command) <= limit:
        return command
    return command[:limit - 2].rsplit(" ", 1)[0] + " …"
