"""File and folder paths checked where they enter a command, before any work is done.

An input that is missing, of the wrong kind or unreadable is a usage error (exit status 2):
``synattn parse: error: input: notes.txt: no such file``. An output that cannot be written (a
folder where a file is expected, a file where a folder is expected, a folder without write
permission or on a read-only file system) is a run failure (exit status 1), reported before the
command spends time on its work. A disk that fills up while writing is reported by
:func:`synattn.io.atomic_write` (also exit status 1), naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

from synattn.errors import RunFailure, UsageError


def _readable(path: Path) -> bool:
    return os.access(path, os.R_OK)


def input_file(path: str | Path, option: str) -> Path:
    """``path`` if it is a readable file (a device such as ``/dev/null`` counts), else
    :class:`UsageError` ``"OPTION: PATH: cause"``."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{option}: {path}: no such file")
    if path.is_dir():
        raise UsageError(f"{option}: {path}: is a folder, a file is expected")
    if not _readable(path):
        raise UsageError(f"{option}: {path}: cannot be read (permission denied)")
    return path


def input_folder(path: str | Path, option: str) -> Path:
    """``path`` if it is a readable folder, else :class:`UsageError` ``"OPTION: PATH: cause"``."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{option}: {path}: no such folder")
    if not path.is_dir():
        raise UsageError(f"{option}: {path}: is a file, a folder is expected")
    if not (_readable(path) and os.access(path, os.X_OK)):
        raise UsageError(f"{option}: {path}: cannot be read (permission denied)")
    return path


def _creatable(path: Path, option: str) -> None:
    """The nearest existing folder above ``path`` is a folder the process may write into."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise RunFailure(f"{option}: {path}: cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RunFailure(f"{option}: {path}: cannot write into {parent} (permission denied or a read-only "
                         "file system)")


def output_file(path: str | Path | None, option: str) -> Path | None:
    """``path`` (None stays None: standard output) if a file can be written there, else
    :class:`RunFailure` ``"OPTION: PATH: cause"``."""
    if path is None or str(path) == "":
        return None
    path = Path(path)
    if path.is_dir():
        raise RunFailure(f"{option}: {path}: is a folder, a file name is expected")
    if path.exists():
        if not os.access(path.absolute().parent, os.W_OK | os.X_OK):  # replaced by a renamed temporary file
            raise RunFailure(f"{option}: {path}: cannot be replaced: its folder is not writable (permission "
                             "denied or a read-only file system)")
        return path
    _creatable(path, option)
    return path


def output_folder(path: str | Path, option: str) -> Path:
    """``path`` if it is a writable folder or one can be made there, else :class:`RunFailure`."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise RunFailure(f"{option}: {path}: is a file, a folder is expected")
        if not os.access(path, os.W_OK | os.X_OK):
            raise RunFailure(f"{option}: {path}: cannot write into it (permission denied or a read-only file "
                             "system)")
        return path
    _creatable(path, option)
    return path
