"""The ``synattn`` command (:mod:`synattn.cli.main`, one module per subcommand).

Ctrl-C ends the command with exit status 130 and one line, however early or late it comes. While
the command runs, it is a ``KeyboardInterrupt`` that the command handles (a training run keeps
its last checkpoint and says so) and :func:`synattn.cli.main.main` turns into 130. Before that
(seconds of importing PyTorch and the subcommands, when nothing has been written yet) and after
it (while the process ends), the handler installed here ends the process at once with 130,
instead of Python's default, which ends it by the signal itself (exit status -2, with a
traceback of the import it interrupted). The handler is installed only when this package is
imported by the ``synattn`` command (or ``python -m synattn.cli``), never when a program or a test
imports it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT, as shells report it)."""


def _interrupted(signum, frame) -> None:  # pragma: no cover - runs in the command's own process
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        os.write(2, b"synattn: interrupted\n")
    os._exit(INTERRUPTED)


def _started_as_command() -> bool:
    """Whether this process is the ``synattn`` command (its script, or ``python -m synattn.cli``, whose
    ``sys.argv[0]`` is still ``-m`` while the package is imported)."""
    return bool(sys.argv) and (Path(sys.argv[0]).name == "synattn" or sys.argv[0] == "-m")


if (_started_as_command() and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
    signal.signal(signal.SIGINT, _interrupted)


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """Within the block, Ctrl-C raises ``KeyboardInterrupt`` (for the command to handle: keep a
    checkpoint, remove a half-made folder, exit with 130); outside it, in the ``synattn`` command,
    it ends the process with status 130 at once. Does nothing in a process that is not the
    command."""
    if signal.getsignal(signal.SIGINT) is not _interrupted:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _interrupted)
