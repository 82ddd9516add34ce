"""Small file-system helpers shared by every step that writes results."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


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
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, a file name is expected", str(path))
    if path.exists() and not path.is_file():  # a device or a pipe: stream into it, never replace it
        try:
            f = open(path, mode, encoding=None if "b" in mode else encoding)
        except OSError as err:
            raise _naming(err, path) from None
        with f:
            yield f
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise _naming(err, path) from None
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
    writing = True
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
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
            raise _naming(err, path) from None  # a write of the block (no file name) or the final flush
        raise


_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")  # numpy's tofile on a full disk, without errno


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` (a full disk, a permission denied ...) as an ``OSError`` of the same kind naming ``path``."""
    cause = err.strerror or str(err)
    short = _SHORT_WRITE.search(cause) if err.errno is None else None
    if short:
        cause = f"only {short[2]} of {short[1]} bytes could be written"
    if err.errno == errno.ENOSPC or short:
        cause += " (is the disk full?)"
    return OSError(err.errno or (errno.ENOSPC if short else None), f"cannot write: {cause}", str(path))


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's contents, read in blocks (the files compared for identity: datasets'
    inputs, tokenizers)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
