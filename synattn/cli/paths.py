"""File and folder paths checked where they enter a command, before any work is done.

An input that is missing, of the wrong kind or unreadable is a usage error (exit status 2):
``synattn parse: error: input: notes.txt: no such file``. An output that cannot be written (a
folder where a file is expected, a file where a folder is expected, a folder without write
permission or on a read-only file system) is a run failure (exit status 1), reported before the
command spends time on its work. A disk that fills up while writing is reported by
:func:`synattn.io.atomic_write` (also exit status 1), naming the file.

An output never replaces or writes into what the command reads (:func:`check_apart`): an output
file that is an input file (or a link to it) or lies in an input folder (a run, a dataset), an
output folder that holds an input, two outputs that are one file, are usage errors (exit status
2) before any work. Folders a command fills are checked by :mod:`synattn.folders`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # a link, a hard link, another spelling
    except OSError:
        return a == b


def check_apart(outputs: Mapping[str, str | Path | None],
                inputs: Mapping[str, str | Path | None] | Sequence[tuple[str, str | Path | None]]) -> None:
    """Raises :class:`UsageError` when an output would replace or write into an input.

    Args:
        outputs: output files or folders by option (``{"-o": "out.txt"}``; None: not given).
        inputs: input files and folders by option or description (``{"-i": ..., "--run": ...,
            "the run's dataset": ...}``, or ``(option, path)`` pairs when an option names several
            files; None: not given).

    An output file may not be an input file or lie inside an input folder; an output folder may
    not hold an input or lie inside an input folder; two outputs may not be one file.
    """
    pairs = inputs.items() if isinstance(inputs, Mapping) else inputs
    given_in = [(k, Path(v)) for k, v in pairs if v not in (None, "")]
    given_out = {k: Path(v) for k, v in outputs.items() if v not in (None, "")}
    seen: dict[Path, str] = {}
    for option, path in given_out.items():
        out = path.resolve()
        for name, given in given_in:
            source, shown = given.resolve(), f"{name} {given}"
            if source.is_dir() or _inside(source, out) and source != out:
                if _inside(out, source):
                    raise UsageError(f"{option} {path}: lies inside {shown}, which this command reads; write "
                                     "the output outside that folder")
                if _inside(source, out):
                    raise UsageError(f"{option} {path}: holds {shown}, which this command reads; write into "
                                     "another folder")
            elif _same_file(out, source):
                raise UsageError(f"{option} {path}: is also {shown}: writing it would replace the input; "
                                 "name another file")
        if out in seen:
            raise UsageError(f"{option} {path}: is also {seen[out]}: give each output its own file")
        seen[out] = option
