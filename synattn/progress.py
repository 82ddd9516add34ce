"""Progress reporting for long work: a tqdm bar on a terminal, plain log lines otherwise.

Like fairseq's progress output, the bar is only drawn when stderr is a terminal. Redirected to a
file (CI logs, ``nohup``, ``> log 2>&1``), a bar's redraws would pile up (tqdm writes each one
after a carriage return, never erasing it), so :func:`bar` gives a :class:`PlainProgress`
instead: one line every :data:`INTERVAL_S` seconds, and a last one when the work ends if it took
that long; short work prints nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

INTERVAL_S = 30.0
"""Seconds between two plain progress lines (a log file)."""


def on_terminal() -> bool:
    """Whether stderr, where progress goes, is a terminal."""
    return sys.stderr.isatty()


class PlainProgress:
    """What :func:`bar` gives off a terminal: the part of tqdm's interface synattn uses (``n``,
    ``update``, ``set_postfix``, ``set_postfix_str``, ``refresh``, ``close``, ``with``), writing a
    line ``desc: n/total unit (p%), postfix, elapsed`` to stderr at most every ``interval`` seconds."""

    def __init__(self, total: float | None = None, desc: str = "", unit: str = "it", initial: float = 0,
                 interval: float | None = None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.interval = INTERVAL_S if interval is None else interval
        self.postfix = ""
        self.started = self.last = time.monotonic()
        self.lines, self.closed = 0, False
        self.written: tuple[float, str] | None = None

    def line(self) -> str:
        """The current state as one line."""
        done = f"{self.n:.0f}" + (f"/{self.total:.0f}" if self.total else "") + f" {self.unit}"
        if self.total:
            done += f" ({100 * self.n / self.total:.0f}%)"
        return (f"{self.desc}: {done}" + (f", {self.postfix}" if self.postfix else "")
                + f", {time.monotonic() - self.started:.0f} s")

    def refresh(self) -> None:
        """Writes the line when an interval has passed since the last one (or the start)."""
        now = time.monotonic()
        if not self.closed and now - self.last >= self.interval:
            self._write()
            self.last = now

    def _write(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)
        self.lines, self.written = self.lines + 1, (self.n, self.postfix)

    def update(self, n: float = 1) -> None:
        self.n += n
        self.refresh()

    def set_postfix(self, refresh: bool = True, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())
        if refresh:
            self.refresh()

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text
        if refresh:
            self.refresh()

    def close(self) -> None:
        """The last line, when the work lasted an interval or more (short work leaves no line) and
        the last line written is not already it; later calls write nothing."""
        if not self.closed and self.written != (self.n, self.postfix) and (
                self.lines or time.monotonic() - self.started >= self.interval):
            self._write()
        self.closed = True

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(total: float | None = None, *, desc: str, unit: str = "it", initial: float = 0, enabled: bool = True,
        **tqdm_options):
    """A progress display of ``total`` steps: a tqdm bar on a terminal (``tqdm_options`` go to it),
    else a :class:`PlainProgress` (``enabled=False``: a disabled tqdm, which shows nothing)."""
    if enabled and not on_terminal():
        return PlainProgress(total, desc, unit, initial)
    return tqdm(total=total, desc=desc, unit=unit, initial=initial, dynamic_ncols=True, file=sys.stderr,
                disable=not enabled, mininterval=0.1, **tqdm_options)


def progress(iterable: Iterable[T], *, desc: str, total: int | None = None, unit: str = "it",
             enabled: bool = True) -> Iterator[T]:
    """Wrap ``iterable`` in a progress display (:func:`bar`).

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
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if on_terminal():
        yield from tqdm(iterable, desc=desc, total=total, unit=unit, dynamic_ncols=True, mininterval=0.1,
                        file=sys.stderr)
        return
    with PlainProgress(total, desc, unit) as shown:
        for item in iterable:
            yield item
            shown.update()
