"""Small file-system helpers shared by every step that writes results.

Inside the folders synattn makes its own (a prepared dataset, a run directory, a study's results)
nothing is written or removed through a symbolic link: the folders it writes into there
(:func:`real_folder`), the files it appends to or locks (:func:`open_regular`) and what it removes
(:func:`remove_path`) are checked with ``lstat`` or opened with ``O_NOFOLLOW``, and a link where a
folder or file of synattn's own belongs is refused with an :class:`~synattn.errors.InputError`
naming it. Files are written whole or not at all (:func:`atomic_write`: a temporary name in the same
folder, renamed when complete and removed on failure; the rename replaces a link, never writes
through it). So nothing outside such a folder is changed or removed by a link placed in it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from synattn.errors import InputError


def _fdopen(fd: int, mode: str, encoding: str | None) -> IO:
    """The temporary file of :func:`atomic_write` opened for writing (the one place every output
    is written through; tests put a full disk here)."""
    return os.fdopen(fd, mode, encoding=encoding)


def _system_link(path: Path) -> bool:
    """Whether ``path`` lies under ``/dev`` or ``/proc`` (``/dev/stdout`` is a link to ``/proc/self/fd/1``)."""
    return path.absolute().parts[1:2] in (("dev",), ("proc",))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write ``path`` through a temporary file in the same folder, renamed into place on success.

    A crash or an exception inside the ``with`` block leaves the previous file (if any) untouched and
    no half-written file under ``path``. An operating-system error of the writing itself (a full
    disk, a folder that cannot be written, ``path`` being a folder) is raised as an ``OSError``
    naming ``path``, not the temporary file.

    A ``path`` that exists and is not a regular file (``/dev/null``, ``/dev/stdout``, a named pipe)
    is written into directly: renaming a file onto it would replace the device (as root) or fail.
    A symbolic link is never written through (the file renamed onto it replaces the link), except
    the system's own under ``/dev`` and ``/proc`` (``/dev/stdout``).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, a file name is expected", str(path))
    if (path.is_symlink() and _system_link(path)) or (path.exists() and not path.is_file() and not path.is_symlink()):
        # a device, a pipe, or /dev/stdout (whatever it stands for): stream into it, never replace it
        try:
            f = open(path, mode, encoding=None if "b" in mode else encoding)
        except OSError as err:
            raise cannot_write(err, path) from None
        with f:
            yield f
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise cannot_write(err, path) from None
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
    writing = True
    try:
        with _fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            writing = False
            yield f
            writing = True
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and (writing or err.filename is None):
            raise cannot_write(err, path) from None  # a write of the block (no file name) or the final flush
        raise


_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")  # numpy's tofile on a full disk, without errno


def cannot_write(err: OSError, path: str | Path) -> OSError:
    """``err`` (a full disk, a permission denied ...) as an ``OSError`` of the same kind naming ``path``:
    ``cannot write: No space left on device (is the disk full?)``."""
    cause = err.strerror or str(err)
    short = _SHORT_WRITE.search(cause) if err.errno is None else None
    if short:
        cause = f"only {short[2]} of {short[1]} bytes could be written"
    if err.errno == errno.ENOSPC or short:
        cause += " (is the disk full?)"
    return OSError(err.errno or (errno.ENOSPC if short else None), f"cannot write: {cause}", str(path))


def refuse_link(path: str | Path, what: str = "file or folder") -> None:
    """Raises :class:`InputError` naming ``path`` when it is a symbolic link: where synattn writes or
    removes ``what`` of its own, a link would make it change something outside its folder."""
    if os.path.islink(path):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        raise InputError(f"is a symbolic link{target}, where synattn keeps a {what} of its own; it never writes "
                         f"or removes through a link: remove the link (or put a real {what} there)", str(path))


def real_folder(path: str | Path) -> Path:
    """``path`` as a folder that is no symbolic link, made when missing (its parents as usual): a
    folder synattn writes into or removes from inside a folder of its own (a dataset's ``cache``,
    a run's ``checkpoints``).

    Raises:
        InputError: ``path`` is a symbolic link, or something other than a folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        refuse_link(path, "folder")
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise InputError("exists and is not a folder (synattn keeps a folder of its own there)",
                             str(path)) from None
    return path


def remove_path(path: str | Path) -> None:
    """Removes the file, link or folder tree ``path`` without following any link: a link (``path``
    itself or one inside the tree) is removed as a link, what it points to is left alone. A missing
    ``path`` is nothing to do."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)  # never follows links (and refuses a folder swapped for a link meanwhile)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def open_regular(path: str | Path, flags: int, mode: int = 0o644, what: str = "file") -> int:
    """``os.open(path, flags)`` that neither follows a symbolic link (``O_NOFOLLOW``) nor opens
    anything but a regular file (a named pipe or a device is refused without blocking on it).

    Raises:
        InputError: ``path`` is a link or not a regular file.
        OSError: the open itself failed (no such file, permission denied).
    """
    nofollow, nonblock = getattr(os, "O_NOFOLLOW", 0), getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | nofollow | nonblock, mode)
    except OSError:
        refuse_link(path, what)  # O_NOFOLLOW's error for a link (ELOOP, or EMLINK on some systems)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"is not a regular file (synattn keeps a {what} of its own there)", str(path))
    if nonblock:
        os.set_blocking(fd, True)
    return fd


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's contents, read in blocks (the files compared for identity: datasets'
    inputs, tokenizers)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
