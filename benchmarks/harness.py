"""Paired timing and child processes for the benchmarks of this folder (imported by them).

- :func:`paired_ms` times several functions in rounds: every round calls each function once, in
  a shuffled order, so that the machine's load changes fall on all of them alike; the ratio of
  two functions is taken round by round (:func:`ratio_spread`), and its spread (min / median /
  max over the rounds) says how far one run can be trusted.
- :func:`run_in_child` runs a function in a fresh process and passes its inputs and result
  through files (read after the process has ended, never through a pipe the child may close
  first). A raised exception comes back as its text (``fail: ...``); only a child that stops
  reporting progress for ``timeout`` seconds is called a ``hang``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from device import seconds


class Timed(float):
    """Median milliseconds of a function, carrying the milliseconds of every round
    (``rounds``, aligned with the other functions timed in the same :func:`paired_ms` call)."""

    rounds: list[float]

    def __new__(cls, rounds: list[float]) -> Timed:
        self = super().__new__(cls, statistics.median(rounds))
        self.rounds = list(rounds)
        return self

    def __reduce__(self):  # (pickled by value, rounds included: results cross processes)
        return Timed, (self.rounds,)


def paired_ms(fns: dict[str, Callable[[], object]], rounds: int, device: torch.device | str = "cpu",
              budget_s: float = 120.0, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> dict[str, Timed]:
    """Milliseconds of each function over ``rounds`` paired rounds (each function once per
    round, shuffled order), after one warm-up round; on CUDA every call is synchronised.

    Stops early, after at least 3 rounds, once ``budget_s`` seconds have passed (a very slow
    peer): ``len(result[name].rounds)`` is the number of rounds actually run.
    ``progress(name)`` is called before each call (a child's watchdog, :func:`run_in_child`).
    """
    order = list(fns)
    shuffle = random.Random(seed)
    for name in order:  # warm-up: caches, compiled kernels, allocator
        if progress:
            progress(f"{name} (warm-up)")
        fns[name]()
    times: dict[str, list[float]] = {name: [] for name in order}
    start = time.perf_counter()
    for r in range(rounds):
        if r >= 3 and time.perf_counter() - start > budget_s:
            break
        shuffle.shuffle(order)
        for name in order:
            if progress:
                progress(f"{name} (round {r + 1})")
            times[name].append(1e3 * seconds(fns[name], device))
    return {name: Timed(ts) for name, ts in times.items()}


def ratio_spread(ours: float, others: dict[str, object],
                 exclude: tuple[str, ...] = ("torch path",)) -> tuple[float, float, float, int] | None:
    """Speed-up of ``ours`` over the faster of ``others`` (those timed as floats, not the names in
    ``exclude``): ``(median, min, max, rounds)`` of the per-round ratio ``min_peer t / ours t``
    when all were timed in the same rounds (:class:`Timed`), else the ratio of the single
    values with ``rounds = 0``; None when no peer was timed."""
    peers = [v for name, v in others.items() if isinstance(v, float) and name not in exclude]
    if not peers or not isinstance(ours, float):
        return None
    if isinstance(ours, Timed) and all(isinstance(p, Timed) and len(p.rounds) == len(ours.rounds)
                                       for p in peers):
        ratios = [min(p.rounds[r] for p in peers) / t  # type: ignore[attr-defined]
                  for r, t in enumerate(ours.rounds)]
        return statistics.median(ratios), min(ratios), max(ratios), len(ratios)
    ratio = min(peers) / ours
    return ratio, ratio, ratio, 0


def format_spread(spread: tuple[float, float, float, int] | None) -> str:
    """``5.2x [4.1-6.3] 20`` (median [min-max] rounds), ``5.2x`` for single values, ``-``."""
    if spread is None:
        return "-"
    median, low, high, rounds = spread
    if rounds == 0:
        return f"{median:.1f}x"
    return f"{median:.1f}x [{low:.1f}-{high:.1f}] {rounds}"


# ---------------------------------------------------------------------------------------------
# Child processes: inputs and results through files.
# ---------------------------------------------------------------------------------------------

@dataclass
class ChildResult:
    """What a child process gave: ``status`` ``ok`` (``value`` set), ``fail`` (``error``: the
    exception's text, or how the process ended without a result) or ``hang`` (``error``: what
    it was running when it stopped reporting progress)."""

    status: str
    value: object = None
    error: str = ""
    seconds: float = 0.0
    running: str = ""
    """The child's last :func:`progress` report (what it was doing when it ended)."""

    def label(self, width: int = 60) -> str:
        """``fail: <error>`` or ``hang: <error>`` shortened to ``width`` characters."""
        text = f"{self.status}: {self.error}" if self.error else self.status
        return text if len(text) <= width else text[:width - 3] + "..."


_PROGRESS_PATH: str | None = None


def progress(what: str) -> None:
    """In a child of :func:`run_in_child`: say what runs now (resets its watchdog). Elsewhere a
    no-op."""
    if _PROGRESS_PATH is not None:
        with open(_PROGRESS_PATH, "w") as f:
            f.write(what)


def _child_main(fn: Callable, folder: str, threads: int) -> None:
    global _PROGRESS_PATH
    _PROGRESS_PATH = os.path.join(folder, "progress.txt")
    torch.set_num_threads(threads)
    progress("loading the inputs")
    args = torch.load(os.path.join(folder, "in.pt"), weights_only=False)
    try:
        result = ("ok", fn(*args), "")
    except Exception as error:  # noqa: BLE001  # reported to the parent, as text
        last = traceback.extract_tb(error.__traceback__)[-1]
        where = f" (at {os.path.basename(last.filename)}:{last.lineno})"
        result = ("fail", None, f"{type(error).__name__}: {error}".replace("\n", " ") + where)
    torch.save(result, os.path.join(folder, "out.tmp"))
    os.replace(os.path.join(folder, "out.tmp"), os.path.join(folder, "out.pt"))


def _read(path: str) -> tuple[float, str] | None:
    """``(modification time, text)`` of a progress file, None before it exists."""
    try:
        with open(path) as f:
            return os.stat(path).st_mtime, f.read()
    except OSError:
        return None


def run_in_child(fn: Callable, args: tuple, timeout: float, threads: int | None = None,
                 startup: float = 300.0) -> ChildResult:
    """``fn(*args)`` in a fresh (spawned) process with ``threads`` torch threads (default: this
    process's). ``fn`` must be importable (a module-level function).

    The child writes its result to a file which is read after it has ended. It is a ``hang``
    when its progress file (:func:`progress`; first written when the child has imported its
    modules and loads the inputs) has not changed for ``timeout`` seconds, or was not written
    within ``startup`` seconds; then the child is killed.
    """
    ctx = mp.get_context("spawn")
    threads = torch.get_num_threads() if threads is None else threads
    with tempfile.TemporaryDirectory(prefix="synattn-bench-") as folder:
        torch.save(tuple(args), os.path.join(folder, "in.pt"))
        progress_path, out_path = os.path.join(folder, "progress.txt"), os.path.join(folder, "out.pt")
        proc = ctx.Process(target=_child_main, args=(fn, folder, threads), daemon=True)
        start = last_change = time.perf_counter()
        last_seen: tuple[float, str] | None = None
        proc.start()
        while proc.is_alive():
            proc.join(0.2)
            seen = _read(progress_path)
            if seen != last_seen:
                last_seen, last_change = seen, time.perf_counter()
            elif time.perf_counter() - last_change > (timeout if last_seen else startup):
                proc.kill()
                proc.join()
                doing = last_seen[1] if last_seen else "starting"
                waited = timeout if last_seen else startup
                return ChildResult("hang", error=f"no progress for {waited:.0f} s while running {doing}",
                                   seconds=time.perf_counter() - start, running=doing)
        took = time.perf_counter() - start
        doing = (_read(progress_path) or (0.0, "starting"))[1]
        if os.path.exists(out_path):
            status, value, error = torch.load(out_path, weights_only=False)
            return ChildResult(status, value, error, took, doing)
        code = proc.exitcode
        how = f"exited with status {code}"
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        return ChildResult("fail", error=f"the child process {how} without a result, while running {doing}",
                           seconds=took, running=doing)
