"""Progress reporting for long work: a tqdm bar on a terminal, plain log lines otherwise.

Like fairseq's progress output, the bar is only drawn when stderr is a terminal. Redirected to a
file (CI logs, ``nohup``, ``> log 2>&1``), a bar's redraws would pile up (tqdm writes each one
after a carriage return, never erasing it), so :func:`bar` gives a :class:`PlainProgress`
instead: one line every :data:`INTERVAL_S` seconds when the work has moved on since the last line
(a line that would repeat the last one but for its seconds is left out, up to one every
:data:`QUIET_S` seconds, which says the work is still running), and a last one when the work ends
if it took that long; short work prints nothing.

:class:`Pace` measures a rate of work after its first steps (their warm-up left out) and the time
the rest takes at it (:func:`duration` writes it), for the estimates of the time to go of training.
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

QUIET_S = 300.0
"""Seconds after which a plain progress line is written even if it says nothing new but its time."""


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
        """Writes the line when an interval has passed since the last one (or the start) and the
        work has moved on since that one (or :data:`QUIET_S` seconds have passed)."""
        now = time.monotonic()
        if self.closed or now - self.last < self.interval:
            return
        if self.written == (self.n, self.postfix) and now - self.last < max(QUIET_S, self.interval):
            return  # the same line but for its seconds: it would read as printed twice
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


class Pace:
    """A rate of work measured from its first observation to its latest (:meth:`observe`), so that
    what came before the first one (start-up, the first updates' warm-up) is left out."""

    def __init__(self) -> None:
        self.first: tuple[float, float] | None = None
        self.latest: tuple[float, float] | None = None

    def observe(self, done: float, seconds: float) -> None:
        """``done`` units of work after ``seconds``; a count below the first one starts again (a restart)."""
        if self.first is None or done < self.first[0]:
            self.first = (done, seconds)
        self.latest = (done, seconds)

    @property
    def per_second(self) -> float | None:
        """Units per second between the first and the latest observation (None: not measured yet)."""
        if self.first is None or self.latest is None:
            return None
        done, seconds = self.latest[0] - self.first[0], self.latest[1] - self.first[1]
        return done / seconds if done > 0 and seconds > 0 else None

    def seconds_for(self, units: float) -> float | None:
        """Seconds that ``units`` more take at the measured rate (None: not measured yet)."""
        rate = self.per_second
        return None if rate is None else max(units, 0.0) / rate


def duration(seconds: float) -> str:
    """``seconds`` for a person: ``40 s``, ``12 min``, ``2 h 05 min``."""
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"
