"""Train several runs at the same time, each in its own ``synattn train`` process with its share
of the CPU threads.

On a small CPU two models trained side by side, one core each, make more updates in the same
wall-clock time than the same models trained one after the other with both cores each (a step of
a small Transformer does not use two cores fully). Each process is the public ``synattn train``
command on a config written to ``CONFIGS/NAME.yaml``: its console output goes to
``LOGS/NAME.log``, and one progress bar here follows every run through its ``log.jsonl``, with
the time to go at the pace each run has kept since its first record (and, when the caller gives
the budget's time on an idle machine, one line saying when this one will take well over it). A run
that already has a checkpoint is resumed (``--resume``), so a killed demo continues where it
stopped; a run that has used its budget (``train.max_minutes`` or ``max_steps``) stops at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from synattn.errors import RunFailure
from synattn.io import atomic_write, open_regular, real_folder
from synattn.progress import Pace, duration

if TYPE_CHECKING:
    from synattn.reproduce.study import Budget


@dataclass
class Job:
    """One run to train: its name, its experiment config (a dict) and its run directory."""

    name: str
    config: dict
    run_dir: Path


def _command(job: Job, config_path: Path) -> list[str]:
    from synattn.train import resolve_checkpoint

    command = [sys.executable, "-m", "synattn.cli", "train", "--config", str(config_path),
               "--run-dir", str(job.run_dir)]
    if resolve_checkpoint(job.run_dir) is not None:
        command.append("--resume")
    return command


def _environment(threads: int) -> dict[str, str]:
    import synattn

    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = str(threads)
    package_root = str(Path(synattn.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _progress(job: Job) -> tuple[float, int, float | None]:
    """``(training seconds, update, loss)`` of the newest train record of the run's log."""
    from synattn.train import read_log

    records = read_log(job.run_dir, "train")
    if not records:
        return 0.0, 0, None
    last = records[-1]
    return float(last.get("elapsed_s", 0.0)), int(last["step"]), last.get("task_loss", last.get("loss"))


def train_side_by_side(jobs: list[Job], configs: Path, logs: Path, threads: int, budget: Budget,
                       poll_s: float = 2.0, desc: str = "training", nominal_minutes: float | None = None) -> None:
    """Trains ``jobs`` at the same time, ``threads`` CPU threads each; returns when all are done.

    ``budget``: what the progress bar counts, training seconds (the furthest run) or updates (the
    slowest run); the runs themselves stop at their own config's ``max_minutes`` / ``max_steps``.
    ``nominal_minutes``: how long the runs take on an idle machine of the kind the defaults were
    measured on; when the measured pace says they will take over :data:`OVERRUN` times that, one
    line says so (:func:`overrun_note`).

    Raises:
        RunFailure: a run's process failed (its exit status, the last line of its log and the log's path).
    """
    from tqdm.auto import tqdm

    from synattn.progress import bar as progress_bar

    real_folder(configs)  # folders of the demo's own: never through a link
    real_folder(logs)
    processes: list[tuple[Job, subprocess.Popen, Path]] = []
    try:
        for job in jobs:
            config_path = configs / f"{job.name}.yaml"
            with atomic_write(config_path) as f:
                yaml.safe_dump(job.config, f, sort_keys=False)
            log_path = logs / f"{job.name}.log"
            with os.fdopen(open_regular(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what="log file"), "a",
                           encoding="utf-8") as log:
                proc = subprocess.Popen(_command(job, config_path), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=_environment(threads))
            processes.append((job, proc, log_path))
        by_time = budget.updates is None
        total = 60.0 * budget.minutes if budget.minutes is not None else float(budget.updates or 0)
        unit = "s" if by_time else "updates"
        paces = [Pace() for _ in processes]
        started, noted = time.monotonic(), nominal_minutes is None
        with progress_bar(round(total), unit=unit, desc=desc, leave=True,
                          bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} " + unit
                          + "{postfix}") as bar:
            while any(proc.poll() is None for _, proc, _ in processes):
                time.sleep(poll_s)
                states = [_progress(job) for job, _, _ in processes]
                done = max(s for s, _, _ in states) if by_time else min(step for _, step, _ in states)
                for pace, (seconds, step, _) in zip(paces, states):
                    if step:
                        pace.observe(step, seconds)
                to_go = time_to_go(budget, states, paces)
                bar.n = min(total, done)
                bar.set_postfix_str(" | ".join(
                    f"{job.name}: " + (f"update {step}" if step else "starting")
                    + (f", loss {loss:.2f}" if loss is not None else "")
                    for (job, _, _), (_, step, loss) in zip(processes, states))
                    + (f" | about {duration(to_go)} to go" if to_go is not None and done < total else ""),
                    refresh=False)
                if not noted and to_go is not None and nominal_minutes is not None:
                    noted = True
                    note = overrun_note((time.monotonic() - started + to_go) / 60, nominal_minutes, threads)
                    if note:
                        tqdm.write(note, file=sys.stderr)
                bar.refresh()
            bar.n = total
            bar.refresh()
    finally:  # a failure here or Ctrl-C: no process outlives the demo (their checkpoints stay)
        for _, proc, _ in processes:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    for job, proc, log_path in processes:
        if proc.returncode != 0:
            lines = [line for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()
                     if line.strip()]
            last = lines[-1].strip() if lines else "no output"
            raise RunFailure(f"training {job.name} failed (exit status {proc.returncode}): {last} "
                             f"(whole log: {log_path})")


OVERRUN = 1.5
"""How many times its time on an idle machine a training may take before :func:`overrun_note` speaks."""


def time_to_go(budget: Budget, states: list[tuple[float, int, float | None]], paces: list[Pace]) -> float | None:
    """Seconds until the last run ends: each run's training seconds left (``max_minutes``), or its
    updates left at the pace it has kept since its first record (``max_steps``); None until every
    run has a pace."""
    if budget.updates is None:
        if not all(step for _, step, _ in states):
            return None
        return max(60.0 * (budget.minutes or 0.0) - seconds for seconds, _, _ in states)
    left = [pace.seconds_for(budget.updates - step) for pace, (_, step, _) in zip(paces, states)]
    return None if any(s is None for s in left) else max(s for s in left if s is not None)


def overrun_note(expected_minutes: float, nominal_minutes: float, threads: int) -> str | None:
    """One line when training will take over :data:`OVERRUN` times ``nominal_minutes`` (the time
    on an idle 2-core machine), saying why that may be; None otherwise."""
    if expected_minutes <= OVERRUN * nominal_minutes:
        return None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cores = os.cpu_count() or 1
    why = (f"load average {load:.1f} on {cores} core{'s' if cores != 1 else ''}" if load is not None
           else f"{cores} core{'s' if cores != 1 else ''}")
    return (f"note: at the pace measured so far this training takes about {expected_minutes:.0f} min, against "
            f"about {nominal_minutes:.0f} min on an idle 2-core machine ({threads} thread{'s' if threads != 1 else ''} "
            f"per run; here: {why}): other work or fewer cores slow it; the results are the same, only later")
