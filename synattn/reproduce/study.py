"""What a study is: a question, the data, a baseline and its variants (arms), a budget, and how
each trained run is scored.

A study subclasses :class:`Study` and registers itself in :mod:`synattn.reproduce` (one module per
study under ``synattn/reproduce/``). :func:`synattn.reproduce.runner.run_study` then does the rest
the same way for every study: prepare the data once, train every arm with every seed under the
same budget (resumable), score each run once, and write the table, the plots, the configs and the
commands.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from synattn.reproduce.guard import FolderGuard


@dataclass(frozen=True)
class Arm:
    """One trained variant of a study.

    Attributes:
        name: short name (a folder name and a table row).
        model: changes to the study's base model config (merged recursively).
        description: what the arm is, for the table's legend.
        train: changes to the study's base training settings.
        trained: False for an arm scored as it is, without training (a pretrained model's own
            heads): the runner trains nothing for it and the study's ``evaluate`` builds its model.
    """

    name: str
    model: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    train: dict[str, Any] = field(default_factory=dict)
    trained: bool = True


@dataclass
class Context:
    """What a study's hooks get: the output folder, the command-line options, the size.

    Attributes:
        out: the study's results folder.
        args: the parsed command-line options (study-specific ones included).
        toy: tiny data, model and budget (the suite's end-to-end runs).
        data: the prepared dataset folder (set after :meth:`Study.prepare`).
        progress: progress bars and console lines while training and scoring (off in the
            processes of ``--jobs N``, whose bars would overwrite each other).
        guard: what the results folder held before the study
            (:class:`~synattn.reproduce.guard.FolderGuard`: a study refused before its runs
            start leaves it as it was), or None.
    """

    out: Path
    args: argparse.Namespace
    toy: bool = False
    data: Path | None = None
    progress: bool = True
    guard: FolderGuard | None = None

    def write(self, path: str | Path, text: str) -> Path:
        """Writes ``text`` to the study's own file ``path`` (atomically), unless it holds that text
        already; what the file held is saved first for :attr:`guard`. Returns ``path``."""
        from synattn.io import atomic_write

        path = Path(path)
        try:
            if path.is_file() and path.read_text(encoding="utf-8") == text:
                return path
        except (OSError, UnicodeDecodeError):
            pass  # not readable as text: written again
        if self.guard is not None:
            self.guard.keep(path)
        with atomic_write(path) as f:
            f.write(text)
        return path


NEW_FOLDER = "rerun the study into a new results folder (-o NEW_FOLDER)"
"""What a study advises when its dataset folder was prepared from other inputs or settings."""


def merge(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` merged in recursively (dicts merge, other values replace).

    Example:
        >>> merge({"encoder": {"layers": 4, "heads": 2}}, {"encoder": {"layers": 6}})
        {'encoder': {'layers': 6, 'heads': 2}}
    """
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


TOY_STEPS = 6
"""Updates of each run of a ``--toy`` study."""


@dataclass(frozen=True)
class Budget:
    """The training budget of every run of a study: ``minutes`` of training wall time (a run ends on
    time on any machine, after as many updates as the machine made), or ``updates`` (every run ends
    at the same update, however long it takes). The decaying learning-rate schedules run to its end.

    Example:
        >>> str(Budget(minutes=70)), str(Budget(updates=3000)), Budget(updates=3000).train
        ('70 training minutes', '3000 updates', {'max_minutes': None, 'max_steps': 3000})
    """

    minutes: float | None = None
    updates: int | None = None

    def __post_init__(self) -> None:
        if (self.minutes is None) == (self.updates is None):
            raise ValueError("a budget is minutes or updates, one of them")

    @property
    def train(self) -> dict:
        """The ``train`` settings that end a run at this budget (and set the schedule's length)."""
        return {"max_minutes": self.minutes, "max_steps": self.updates}

    @classmethod
    def of_train(cls, train: dict) -> Budget | None:
        """The budget a run's ``train`` settings were given (None when neither is set)."""
        if train.get("max_minutes") is not None:
            return cls(minutes=float(train["max_minutes"]))
        return cls(updates=int(train["max_steps"])) if train.get("max_steps") is not None else None

    def option(self) -> str:
        """The command-line option that gives this budget."""
        return f"--minutes {self.minutes:g}" if self.updates is None else f"--budget updates {self.updates}"

    def __str__(self) -> str:
        return f"{self.minutes:g} training minutes" if self.updates is None else f"{self.updates} updates"


def budget_train(ctx: Context, *, max_tokens: int, lr: float, warmup: int, min_lr_ratio: float = 0.02,
                 label_smoothing: float = 0.1, validate_every: int = 1, bf16: bool = False) -> dict:
    """Training settings shared by the studies: a warm-up, a cosine decay to the end of the run's
    budget (minutes or updates), clipping, a checkpoint every 200 updates (so a killed study loses little), no
    TensorBoard; tiny batches and no bf16 for ``--toy`` runs."""
    return {"max_tokens": 800 if ctx.toy else max_tokens, "lr": lr, "warmup_updates": 5 if ctx.toy else warmup,
            "schedule": "cosine", "min_lr_ratio": min_lr_ratio, "clip_norm": 1.0, "label_smoothing": label_smoothing,
            "log_interval": 2 if ctx.toy else 50, "validate_interval": 1 if ctx.toy else validate_every,
            "save_interval": 1 if ctx.toy else validate_every, "save_interval_updates": 0 if ctx.toy else 200,
            "keep_last_n": 1, "progress_bar": not ctx.toy, "tensorboard": False, "bf16": bf16 and not ctx.toy}


class Study:
    """Base class of a study (see the module docstring). Subclasses set the class attributes and
    implement :meth:`prepare`, :meth:`base_model` and :meth:`evaluate`.

    Attributes:
        name: the command-line name (``synattn reproduce NAME``).
        title: one line: what the study compares.
        question: the claim of the paper that the study checks, with the paper cited.
        task: ``mt``, ``lm`` or ``mlm``.
        arms: the baseline first, then the methods: what the study runs by default.
        sweeps: named groups of further arms (settings of one method: its loss weight, its
            layers), run only when asked (``--sweep GROUP`` runs a group, ``--arms`` takes any of
            their names); a group may hold default arms too (its method's default setting).
        seeds: default number of seeds.
        minutes: default training budget of one run, in minutes of a 2-core CPU (``--budget updates N``
            gives every run N updates instead: :class:`Budget`).
        primary: the metric that the table leads with and the plots show.
        columns: ``(metric key, column title)`` of the table, in order.
        scale: factor applied to every metric in the table (100 for fractions shown as %).
    """

    name: str = ""
    title: str = ""
    question: str = ""
    task: str = "mt"
    arms: tuple[Arm, ...] = ()
    sweeps: ClassVar[dict[str, tuple[Arm, ...]]] = {}
    seeds: int = 3
    minutes: float = 30.0
    primary: str = ""
    columns: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0

    def known_arms(self) -> tuple[Arm, ...]:
        """Every arm the study can run: the default arms, then the arms of its sweeps (each name once)."""
        names = {a.name for a in self.arms}
        extra = {a.name: a for group in self.sweeps.values() for a in group if a.name not in names}
        return self.arms + tuple(extra.values())

    def select(self, names: list[str] | None = None, sweeps: list[str] | None = None) -> list[Arm]:
        """The arms a command runs: the default ones when it names none; else the baseline, the
        arms ``names`` and those of the sweeps ``sweeps`` (``all``: every sweep), in the order of
        :meth:`known_arms` (the results' order; the runs are trained in the command's, see
        :func:`~synattn.reproduce.runner.run_study`).

        Raises:
            ValueError: an unknown arm or sweep (the command line's choices prevent it).
        """
        if not names and not sweeps:
            return list(self.arms)
        known = self.known_arms()
        unknown = set(names or ()) - {a.name for a in known}
        groups = list(self.sweeps) if sweeps and "all" in sweeps else list(sweeps or ())
        unknown |= set(groups) - set(self.sweeps)
        if unknown:
            raise ValueError(f"{self.name}: no arm or sweep {', '.join(sorted(unknown))}")
        chosen = {self.arms[0].name, *(names or ())} | {a.name for g in groups for a in self.sweeps[g]}
        return [a for a in known if a.name in chosen]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Adds the study's own command-line options."""

    def check(self, args: argparse.Namespace, arms: list[Arm]) -> None:
        """Checks the study's own options (those :meth:`add_arguments` adds) against each other and
        against the files and the model they name, before anything is prepared or trained (the
        parser has checked each value's type and range): the one place a study refuses its options.

        Raises:
            UsageError: naming the option as the command line spells it.
        """

    def prepare(self, ctx: Context) -> Path:
        """Prepares (or finds already prepared) the study's dataset; returns its folder."""
        raise NotImplementedError

    def base_model(self, ctx: Context) -> dict:
        """The model config every arm starts from."""
        raise NotImplementedError

    def base_train(self, ctx: Context) -> dict:
        """The training settings every arm starts from (budget and seed are set by the runner)."""
        return {}

    def base_eval(self, ctx: Context) -> dict:
        return {}

    def experiment(self, ctx: Context, arm: Arm, seed: int, budget: Budget) -> dict:
        """The full experiment config (what ``synattn train --config`` reads) of one run."""
        train = merge(self.base_train(ctx), arm.train)
        train.update(seed=seed, **budget.train)
        train.setdefault("max_epochs", 1000)
        if ctx.toy and budget.updates is None:
            train["max_steps"] = TOY_STEPS
        return {"task": self.task, "data": str(ctx.data), "model": merge(self.base_model(ctx), arm.model),
                "train": train, "eval": self.base_eval(ctx)}

    def evaluate(self, ctx: Context, arm: Arm, seed: int, run_dir: Path) -> dict:
        """Scores one trained run: a flat dict of metrics (JSON-serialisable)."""
        raise NotImplementedError

    def rescore(self, ctx: Context, run_dir: Path, metrics: dict) -> dict | None:
        """Metrics read back from an earlier scoring, brought up to how this version scores (e.g.
        translations scored before they were detokenized); None when they are current."""
        return None

    @staticmethod
    def load(ctx: Context, run_dir: Path):
        """``(model, experiment config)`` of the run's best checkpoint by the dev loss of its task
        (the last where that loss fell to the end; no metric of the study picks it), its dataset
        the study's own (where the results folder lies now, not where it was when the run was
        trained)."""
        from synattn.evaluate.runner import load_run

        model, exp, _ = load_run(run_dir, "best")
        exp.data = str(ctx.data)
        return model, exp

    def compare(self, ctx: Context, runs: dict[str, dict[int, Path]]) -> dict:
        """Comparisons that need several runs at once (e.g. paired bootstrap of translations);
        the result goes into ``results.json`` as ``comparisons``."""
        return {}

    def table(self, ctx: Context, metrics: dict[str, dict[int, dict]], comparisons: dict) -> str:
        """Markdown table of the results (default: every metric, mean ± std over seeds, and the
        paired difference to the baseline arm)."""
        from synattn.reproduce.report import default_table

        return default_table(self, metrics)

    def plots(self, ctx: Context, metrics: dict[str, dict[int, dict]], folder: Path) -> list[Path]:
        """Writes the study's plots into ``folder``; returns their paths."""
        from synattn.reproduce.report import bar_plot

        return [bar_plot(self, metrics, folder / f"{self.primary}.png")] if self.primary else []
