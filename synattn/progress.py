"""Progress reporting for long work: a tqdm bar on a terminal, plain log lines otherwise.

Like fairseq's progress output, the bar falls back to a few plain lines when stderr is not a
terminal (CI logs, ``nohup``), so that logs stay readable.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T], *, desc: str, total: int | None = None, unit: str = "it",
             enabled: bool = True) -> Iterator[T]:
    """Wrap ``iterable`` in a progress display.

    Args:
        iterable: what to iterate over.
        desc: a short label, e.g. ``"parse"``.
        total: number of items when ``iterable`` has no ``len``.
        unit: the unit shown in the rate, e.g. ``"sent"``.
        enabled: ``False`` iterates silently.
    """
    if not enabled:
        yield from iterable
        return
    tty = sys.stderr.isatty()
    # On a terminal: a live bar. Otherwise: a line about every 30 s (tqdm prints a new line per update).
    yield from tqdm(iterable, desc=desc, total=total, unit=unit, dynamic_ncols=True,
                    mininterval=0.1 if tty else 30.0, file=sys.stderr, leave=tty)
