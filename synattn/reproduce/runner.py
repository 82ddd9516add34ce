"""Runs a study: prepare once, train every (arm, seed) under the same budget, score every run
once, write the results folder. Everything is resumable: a killed study continues where it
stopped when the same command is run again.

Results folder (``OUT``)::

    OUT/README.md          the table (markdown) with the question, the legend and the commands
    OUT/results.json       every run's metrics, the summaries over seeds and the comparisons
    OUT/plots/*.png        the study's plots
    OUT/configs/ARM.yaml   the exact experiment config of each arm (seed 1; other seeds differ
                           only in train.seed)
    OUT/commands.sh        the command that made the folder, and the equivalent train commands
    OUT/runs/ARM/seedS/    each training run (checkpoints, log.jsonl) and its metrics.json
    OUT/data/              the prepared dataset

Runs go seed by seed (every arm with seed 1, then every arm with seed 2, ...), so that a study
stopped early still compares every arm on the same seeds. With ``jobs`` > 1 (``--jobs N``) that
many runs train at once, each in a process of its own (spawned, ``threads`` torch threads each),
taken in the same order; the study's own process keeps the folder, writes the results after every
run and stops the others on an error or Ctrl-C (each continues from its last checkpoint on the
next call). A run trains to the same numbers either way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import yaml

from synattn.errors import RunFailure, UsageError
from synattn.io import atomic_write, refuse_link
from synattn.reproduce.report import json_safe, write_results
from synattn.reproduce.study import TOY_STEPS, Arm, Budget, Context, Study
from synattn.train.checkpoint import checkpoint_step, resolve_checkpoint

logger = logging.getLogger(__name__)
DONE = "train_done.json"
METRICS = "metrics.json"


def run_dir_of(ctx: Context, arm: Arm, seed: int) -> Path:
    return ctx.out / "runs" / arm.name / f"seed{seed}"


def train_run(study: Study, ctx: Context, arm: Arm, seed: int, budget: Budget) -> Path:
    """Trains one run to its budget (or continues it) as ``synattn train --resume`` does
    (:func:`~synattn.train.experiment_run.train_experiment`); returns its run directory. Without
    ``ctx.progress``, no progress bar and no console lines (the run's ``log.jsonl`` has them)."""
    from synattn.evaluate.translation import translation_metrics
    from synattn.train.experiment import ExperimentConfig
    from synattn.train.experiment_run import train_experiment

    run = run_dir_of(ctx, arm, seed)
    if (run / DONE).exists():
        return run
    if not arm.trained:  # scored as it is (Arm.trained)
        with atomic_write(run / DONE) as f:
            json.dump({"step": 0, "epoch": 0, "stopped_by": "not trained", "best": None, "minutes": 0.0}, f)
        return run
    exp = ExperimentConfig.from_dict(study.experiment(ctx, arm, seed, budget))  # train.seed is the seed
    if not ctx.progress:
        exp.train.progress_bar = False
    started = time.monotonic()
    trained = train_experiment(exp, run, resume=True, valid_metrics=translation_metrics)
    result = trained.result
    with atomic_write(run / DONE) as f:
        json.dump({"step": result.step, "epoch": result.epoch, "stopped_by": result.stopped_by,
                   "best": result.best_valid_loss, "minutes": trained.minutes,
                   "wall_minutes_this_part": (time.monotonic() - started) / 60.0}, f, indent=1)
    return run


def score_run(study: Study, ctx: Context, arm: Arm, seed: int, run: Path) -> dict:
    """The run's metrics (computed once, then read back from ``metrics.json``, brought up to date
    where the study scores differently now: :meth:`Study.rescore`)."""
    path = run / METRICS
    if path.exists():
        stored = json.loads(path.read_text())
        metrics = study.rescore(ctx, run, stored)
        if metrics is None:
            return stored
    else:
        metrics = study.evaluate(ctx, arm, seed, run)
        metrics.update({f"train_{k}": v for k, v in json.loads((run / DONE).read_text()).items()
                        if k in ("step", "minutes")})
        scored = resolve_checkpoint(run, "best") or resolve_checkpoint(run, "last")  # as Study.load reads it
        metrics["best_step"] = checkpoint_step(scored) if scored else None
    with atomic_write(path) as f:
        json.dump(json_safe(metrics), f, indent=1, allow_nan=False)
    return metrics


def write_configs(study: Study, ctx: Context, arms: list[Arm], budget: Budget, argv: list[str]) -> None:
    (ctx.out / "configs").mkdir(parents=True, exist_ok=True)
    lines = ["#!/usr/bin/env bash", "# The command that made this folder (rerun it to continue or to redo it):",
             "synattn " + " ".join(shlex.quote(a) for a in argv), "",
             "# How each run was trained, one by one (seed S: add train.seed=S and use .../seedS); these are",
             "# the study's own run folders: to retrain one elsewhere, give another --run-dir:"]
    for arm in arms:
        if not arm.trained:
            lines.append(f"# {arm.name}: not trained ({arm.description})")
            continue
        path = ctx.out / "configs" / f"{arm.name}.yaml"
        with atomic_write(path) as f:
            f.write(f"# {study.name}: arm {arm.name} ({arm.description}); seed 1 of the study.\n")
            yaml.safe_dump(study.experiment(ctx, arm, 1, budget), f, sort_keys=False)
        lines.append(f"synattn train --config {shlex.quote(str(path))} "
                     f"--run-dir {shlex.quote(str(ctx.out / 'runs' / arm.name / 'seed1'))}")
    with atomic_write(ctx.out / "commands.sh") as f:
        f.write("\n".join(lines) + "\n")


STUDY_FOLDERS = ("runs", "configs", "plots", "text", "toy-treebank", "lm-text", "builtin-treebank")
"""The folders a study writes its own files into (its ``data/`` may be a link to a prepared dataset)."""


def run_study(study: Study, ctx: Context, seeds: int, budget: Budget, arms: list[Arm],
              argv: list[str], jobs: int = 1, threads: int | None = None, first: list[str] | None = None) -> dict:
    """Runs ``study`` (see the module docstring); returns what ``results.json`` holds. One process
    at a time works in a results folder (a second one stops, naming the first); with ``jobs`` > 1
    it trains that many runs at once in processes of its own, ``threads`` torch threads each.
    Each seed's runs are trained baseline first, then the arms named in ``first`` in that order
    (a command's ``--arms``), then the others; the results keep the order of ``arms``.

    Refused before its runs start, the study undoes what it wrote in the folder (``ctx.guard``,
    :class:`~synattn.reproduce.guard.FolderGuard`), still holding the folder's lock.

    Raises:
        UsageError: runs of the folder were trained with another budget.
        RunFailure: another process is working in the folder; with ``jobs`` > 1, a run failed.
        InputError: one of :data:`STUDY_FOLDERS` in the folder is a symbolic link.
    """
    from synattn.locks import LOCK_NAME, FolderLock
    from synattn.reproduce.guard import refusal

    new = not ctx.out.exists()
    try:
        with FolderLock(ctx.out, "results folder of 'synattn reproduce'"):
            try:
                for name in STUDY_FOLDERS:  # written into and removed from: never through a link
                    refuse_link(ctx.out / name, "folder")
                return _run_study(study, ctx, seeds, budget, arms, argv, jobs, threads, first)
            except Exception as err:
                if ctx.guard is not None and refusal(err):
                    ctx.guard.undo()
                raise
    except Exception:
        # a study refused before it wrote anything (a missing treebank) leaves no folder behind
        if new and ctx.out.is_dir() and [p.name for p in ctx.out.iterdir()] == [LOCK_NAME]:
            (ctx.out / LOCK_NAME).unlink()
            ctx.out.rmdir()
        raise


def check_configs(study: Study, ctx: Context, arms: list[Arm], budget: Budget) -> None:
    """Refuses arms whose experiment config does not read (a value out of range that the study's
    own checks let through), before anything is prepared: the model section as it reads without the
    dataset, and the training settings."""
    from synattn.errors import ConfigError
    from synattn.train.experiment import ExperimentConfig

    for arm in arms:
        if not arm.trained:
            continue
        try:
            ExperimentConfig.from_dict(study.experiment(ctx, arm, 1, budget)).model_without_data()
        except ConfigError as err:
            raise UsageError(f"{study.name}: the arm {arm.name}'s config: {err}") from None


def runs_there(ctx: Context, arms: list[Arm], seeds: int, name: str = "config.yaml") -> Iterator[tuple[Arm, int]]:
    """``(arm, seed)`` of the runs of ``arms`` with seeds 1 to ``seeds`` whose folder holds the file
    ``name``, in the order of ``arms`` and then of the seeds: the folders there are listed, so that
    the cost is that of the runs made, not of the seeds asked for."""
    for arm in arms:
        try:
            names = os.listdir(ctx.out / "runs" / arm.name)
        except OSError:
            continue  # no run of the arm yet
        found = sorted(int(n[4:]) for n in names if n.startswith("seed") and n[4:].isdigit() and len(n) < 14)
        for seed in found:
            if 1 <= seed <= seeds and (run_dir_of(ctx, arm, seed) / name).exists():
                yield arm, seed


def check_budget(ctx: Context, arms: list[Arm], seeds: int, budget: Budget) -> None:
    """Refuses to add runs of another budget to a results folder (their mean would mix budgets)."""
    for arm, seed in runs_there(ctx, arms, seeds):
        config = run_dir_of(ctx, arm, seed) / "config.yaml"
        try:
            trained = Budget.of_train(yaml.safe_load(config.read_text(encoding="utf-8"))["experiment"]["train"])
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
            continue  # no run yet (or not readable: training it reports that)
        if trained is not None and trained != budget:
            raise UsageError(f"{budget.option()}: the runs in {ctx.out} have a budget of {trained} "
                             f"({config.parent}); rerun with {trained.option()} to "
                             f"continue the study, or give a new results folder (-o) for another budget")


def _model_of(experiment: dict) -> Any:
    """The model an experiment dict trains, as its config reads it (defaults filled in), so that two
    spellings of one model compare equal; the section as written where it does not read."""
    from synattn.errors import SynattnError
    from synattn.train.experiment import ExperimentConfig

    try:
        config = ExperimentConfig.from_dict(experiment).model_without_data()
        return config.to_dict() if hasattr(config, "to_dict") else experiment.get("model")
    except (SynattnError, OSError, ImportError, TypeError, ValueError, KeyError):
        return experiment.get("model")


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}.{key}" if prefix else key).items()}


def check_models(study: Study, ctx: Context, arms: list[Arm], seeds: int, budget: Budget) -> None:
    """Refuses a results folder whose runs were trained with another model than their arm now has
    (a study's default arm changed since): its numbers would be reported under the arm's new
    meaning. Names the settings that differ and the arm whose model the runs have, if any."""
    wanted: dict[tuple[str, int], Any] = {}

    def model(arm: Arm, seed: int) -> Any:
        if (arm.name, seed) not in wanted:
            wanted[arm.name, seed] = _model_of(study.experiment(ctx, arm, seed, budget))
        return wanted[arm.name, seed]

    for arm, seed in runs_there(ctx, arms, seeds):
        config = run_dir_of(ctx, arm, seed) / "config.yaml"
        try:
            stored = yaml.safe_load(config.read_text(encoding="utf-8"))["experiment"]
            had = _model_of(stored)
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
            continue  # no run yet (or not readable: training it reports that)
        if had == model(arm, seed):
            continue
        then, now = _flat(had), _flat(model(arm, seed))
        changed = [f"{key}: {then.get(key, '(unset)')} there, {now.get(key, '(unset)')} now"
                   for key in sorted(set(then) | set(now), key=str) if then.get(key) != now.get(key)]
        same = [other.name for other in study.known_arms() if other.name != arm.name and model(other, seed) == had]
        raise UsageError(f"{config.parent} was trained with another model than the arm {arm.name} has now ("
                         + "; ".join(changed[:4]) + ("; …" if len(changed) > 4 else "")
                         + "): the study's arm changed since"
                         + (f"; it is the arm {same[0]}'s model: rename {config.parent.parent} to "
                            f"{config.parent.parent.parent / same[0]} to keep it as that arm's"
                            if same else "")
                         + ", or give a new results folder (-o)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _duration(minutes: float) -> str:
    """``minutes`` as "45 min" or "1.2 h"."""
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def _time_to_go(runs: int, minutes: float, jobs: int) -> str:
    """The training time left for ``runs`` runs of ``minutes``, and the wall time with ``jobs`` at
    once: " (at most 3.0 h of training to go: 60 min with 3 at a time)"."""
    if runs == 0:
        return ""
    at_once = min(jobs, runs)
    wall = "" if at_once <= 1 else f": {_duration(-(-runs // jobs) * minutes)} with {at_once} at a time"
    return f" (at most {_duration(runs * minutes)} of training to go{wall})"


def _run_study(study: Study, ctx: Context, seeds: int, budget: Budget, arms: list[Arm],
               argv: list[str], jobs: int = 1, threads: int | None = None, first: list[str] | None = None) -> dict:
    check_configs(study, ctx, arms, budget)
    check_budget(ctx, arms, seeds, budget)
    ctx.data = study.prepare(ctx)
    check_models(study, ctx, arms, seeds, budget)
    if ctx.guard is not None:  # the study's work starts: nothing is undone from here on
        ctx.guard.start()
    write_configs(study, ctx, arms, budget, argv)
    total = seeds * len(arms)
    trained = sum(1 for _ in runs_there(ctx, arms, seeds, DONE))
    each = (f"{TOY_STEPS} updates (--toy; at most {budget})" if ctx.toy and budget.updates is None
            else str(budget))
    print(f"{study.name}: {_count(len(arms), 'arm')} × {_count(seeds, 'seed')} = {_count(total, 'run')} of {each}"
          + (f", {trained} already trained" if trained else "")
          + ("" if ctx.toy or budget.minutes is None else _time_to_go(total - trained, budget.minutes, jobs))
          + f"; results in {ctx.out}", file=sys.stderr)
    metrics: dict[str, dict[int, dict]] = {arm.name: {} for arm in arms}
    runs: dict[str, dict[int, Path]] = {arm.name: {} for arm in arms}
    rank = {name: i for i, name in enumerate(dict.fromkeys([arms[0].name, *(first or ())]))}
    queue = sorted(arms, key=lambda arm: rank.get(arm.name, len(rank)))  # (stable: the others as they come)
    order = [(seed, arm) for seed in range(1, seeds + 1) for arm in queue]
    if jobs > 1:
        for name, seed, run, scored in _in_parallel(study, ctx, order, budget, jobs, threads):
            runs[name][seed], metrics[name][seed] = run, scored
            so_far = {name: by_seed for name, by_seed in _in_order(metrics, order).items() if by_seed}
            if arms[0].name in so_far:  # the table compares with the baseline: it comes first
                write_results(study, ctx, so_far, {}, final=False, budget=budget)
        metrics, runs = _in_order(metrics, order), _in_order(runs, order)
    else:
        for done, (seed, arm) in enumerate(order, 1):
            print(f"[{done}/{total}] {arm.name}, seed {seed}", file=sys.stderr)
            run = train_run(study, ctx, arm, seed, budget)
            runs[arm.name][seed] = run
            metrics[arm.name][seed] = score_run(study, ctx, arm, seed, run)
            if done == total or order[done][0] != seed:  # the last arm of this seed
                write_results(study, ctx, metrics, {}, final=False, budget=budget)
    comparisons = study.compare(ctx, runs)
    return write_results(study, ctx, metrics, comparisons, final=True, budget=budget)


def _in_order(by_arm: dict[str, dict[int, Any]], order: list[tuple[int, Arm]]) -> dict[str, dict[int, Any]]:
    """``by_arm[name][seed]`` with the seeds in the study's order (parallel runs end in any order)."""
    return {name: {seed: runs[seed] for seed, _ in order if seed in runs} for name, runs in by_arm.items()}


def _in_parallel(study: Study, ctx: Context, order: list[tuple[int, Arm]], budget: Budget, jobs: int,
                 threads: int | None) -> Iterator[tuple[str, int, Path, dict]]:
    """Trains and scores the runs of ``order``, ``jobs`` at a time, each in a spawned process of its
    own; yields ``(arm name, seed, run directory, metrics)`` as they end. Ctrl-C reaches this
    process only: it ends the others (each run continues from its last checkpoint, every 200
    updates, when the study is run again).

    Raises:
        RunFailure: a run failed (its error, naming the run) or its process died; the other runs
            are stopped as by Ctrl-C.
    """
    import multiprocessing
    import signal
    import threading
    from multiprocessing.connection import wait

    spawn = multiprocessing.get_context("spawn")
    quiet = dataclasses.replace(ctx, progress=False, guard=None)  # two progress bars in one terminal overwrite
    # each other; the guard stays with the study's process
    waiting = [(study, quiet, arm, seed, budget, threads, index, len(order))
               for index, (seed, arm) in enumerate(order, 1)]
    live: dict[Any, tuple[Any, tuple]] = {}  # the end of each process's pipe that this one reads: process, task
    print(f"{study.name}: {min(jobs, len(order))} runs at a time, each in a process of its own"
          + (f" with {threads} torch thread{'s' if threads != 1 else ''}" if threads else "")
          + "; their progress: runs/ARM/seedS/log.jsonl", file=sys.stderr)
    # `kill` (SIGTERM) of this process: stop the runs as Ctrl-C does (its default ends this process
    # alone, and the runs would train on unwatched); a `kill -9` is each run's own watch (_job)
    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _exit_on_term) if main else None
    try:
        while waiting or live:
            while waiting and len(live) < jobs:
                task = waiting.pop(0)
                receiver, sender = spawn.Pipe(duplex=False)
                process = spawn.Process(target=_job, args=(task, sender), name=f"{task[2].name}-seed{task[3]}")
                process.start()
                sender.close()  # the process's copy is the only one: its end is the pipe's
                live[receiver] = (process, task)
            for ready in wait(list(live)):
                receiver = cast(Any, ready)
                process, (_, _, arm, seed, *_) = live.pop(receiver)
                try:
                    outcome = receiver.recv()
                except EOFError:  # ended without a word: killed (out of memory?)
                    process.join()
                    code = process.exitcode or 0
                    how = (f"was killed by {signal.Signals(-code).name}" + (" (out of memory?)" if code == -9 else "")
                           if code < 0 else f"ended with exit code {code} before its result")
                    raise RunFailure(f"{arm.name}, seed {seed} ({run_dir_of(ctx, arm, seed)}): its process {how}; "
                                     "the same command continues it from its last checkpoint") from None
                finally:
                    receiver.close()
                process.join()
                if "error" in outcome:
                    raise RunFailure(f"{arm.name}, seed {seed} ({outcome['run']}): {outcome['error']}")
                yield arm.name, seed, Path(outcome["run"]), outcome["metrics"]
    finally:
        for process, _ in live.values():  # Ctrl-C, an error: the runs still training stop where they are
            process.terminate()
        for process, _ in live.values():
            process.join()
        if main:
            signal.signal(signal.SIGTERM, before)


def _job(task: tuple, sender) -> None:
    """One run of :func:`_in_parallel`, in its own process: trains it, scores it, and sends what
    the study's process needs through ``sender`` (an error as its message: an exception's own
    arguments may not survive the way back)."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the study's process's to handle
    signal.signal(signal.SIGTERM, _exit_on_term)  # stopped by it: exit as Python does (locks and semaphores freed)
    threading.Thread(target=_end_with_parent, daemon=True, name="parent-watch").start()
    study, ctx, arm, seed, budget, threads, index, total = task
    if threads:
        import torch

        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s [{arm.name} seed {seed}] %(name)s: %(message)s")
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    run = run_dir_of(ctx, arm, seed)
    outcome: dict[str, Any] = {"run": str(run)}
    _say(f"[{index}/{total}] {arm.name}, seed {seed}: started")
    started = time.monotonic()
    try:
        train_run(study, ctx, arm, seed, budget)
        outcome["metrics"] = metrics = score_run(study, ctx, arm, seed, run)
    except Exception as err:  # noqa: BLE001 (sent to the study's process, which raises it)
        outcome["error"] = f"{type(err).__name__}: {err}"
    else:
        _say(f"[{index}/{total}] {arm.name}, seed {seed}: done in {(time.monotonic() - started) / 60:.1f} min"
             + (f" ({study.primary} {metrics[study.primary]:.4g})"
                if isinstance(metrics.get(study.primary), float) else ""))
    sender.send(outcome)
    sender.close()


def _exit_on_term(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _end_with_parent() -> None:
    """A run's watch on the study's process (in a thread of the run's): if that one dies without
    stopping the run (``kill -9``, out of memory), the run stops as if it had been stopped (from
    its last checkpoint, the study's command continues it) rather than train on unwatched."""
    import multiprocessing
    import signal

    parent = multiprocessing.parent_process()
    if parent is None:
        return
    parent.join()  # returns when the parent process has ended
    os.kill(os.getpid(), signal.SIGTERM)


def _say(line: str) -> None:
    """One whole line on stderr in one write (the lines of processes side by side do not interleave)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
