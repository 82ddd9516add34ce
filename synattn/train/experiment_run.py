"""One experiment config trained into one run directory: what ``synattn train`` and the studies of
``synattn reproduce`` both run (docs/training.md).

:func:`train_experiment` takes a reader's lock on the dataset (no ``prepare`` rewrites it until the
run ends), checks the dataset's arrays, locks the run directory (one writer), gives
the run its own copy of the dataset's tokenizers and labels (or checks, when it continues, that the
dataset is still the run's own), builds the model with ``train.seed``, and trains it with
:class:`~synattn.train.trainer.Trainer`. What it prints is the caller's: it returns a
:class:`TrainedRun`, and an interrupted run raises :class:`TrainingInterrupted`.

Example:
    >>> from synattn.train.experiment import ExperimentConfig  # doctest: +SKIP
    >>> exp = ExperimentConfig.from_yaml("configs/baseline.yaml", ["train.max_epochs=1"])  # doctest: +SKIP
    >>> train_experiment(exp, "runs/base", resume=True).result.stopped_by  # doctest: +SKIP
    'max_epochs'
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from synattn.data.batching import PreparedDataset
from synattn.data.validate import check_dataset, check_split
from synattn.errors import ConfigError
from synattn.locks import FolderLock
from synattn.runs import check_dataset as check_run_dataset, check_run_links, run_vocab, save_run_vocab
from synattn.train.checkpoint import resolve_checkpoint
from synattn.train.experiment import ExperimentConfig, build_model
from synattn.train.kinds import task_for
from synattn.train.run_log import read_log
from synattn.train.trainer import Trainer, TrainResult

ValidMetrics = Callable[[nn.Module, ExperimentConfig, PreparedDataset],
                        "Callable[[nn.Module], dict[str, float]] | None"]
"""``(model, exp, dev)`` → the trainer's ``valid_metrics`` callable for the run (None: none), e.g.
:func:`synattn.evaluate.translation.translation_metrics` (BLEU and chrF of dev translations)."""


@dataclass(frozen=True)
class TrainedRun:
    """How :func:`train_experiment` ended.

    Attributes:
        result: the trainer's :class:`~synattn.train.trainer.TrainResult`.
        epochs_started: epochs begun (the epoch of the last update).
        minutes: training time of the run, resumed parts included.
        is_main: this process is rank 0 (the one that writes and reports; always true without torchrun).
    """

    result: TrainResult
    epochs_started: int
    minutes: float
    is_main: bool


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while training: ``step`` is the update reached, ``checkpoint`` the run's
    last checkpoint kept (that update's, :mod:`synattn.train.signals`; None: not rank 0, or stopped
    before its first update), ``is_main`` whether this process reports, ``signum`` the signal."""

    def __init__(self, step: int, checkpoint: Path | None, is_main: bool, signum: int = signal.SIGINT):
        super().__init__(step)
        self.step, self.checkpoint, self.is_main, self.signum = step, checkpoint, is_main, signum


def check_training_data(folder: str | Path) -> None:
    """The dataset a run trains on, checked before anything is written: manifest, labels,
    sentencepiece models, and every array of ``train`` and ``dev`` with every stored index
    (:mod:`synattn.data.validate`; about a second for 30k sentence pairs)."""
    manifest = check_dataset(folder)
    for split in ("train", "dev"):
        if split in manifest["splits"] or split == "train":
            check_split(folder, split, manifest)


def prepare_run_dir(run_dir: Path, exp: ExperimentConfig, resume: bool) -> None:
    """Copies the dataset's tokenizers and labels into the run (a new run), or checks that the
    dataset is the run's own (a run with checkpoints).

    Raises:
        ConfigError: the run has checkpoints and ``resume`` is false, or its dataset changed.
    """
    started = resolve_checkpoint(run_dir) is not None
    if started and not resume:
        raise ConfigError(f"--run-dir {run_dir} already has checkpoints: resume it (--resume) or choose "
                          "another directory")
    if started:
        read_log(run_dir)  # a log that is not one (garbage, a pipe): refused before anything is written
    if started and run_vocab(run_dir) is not None:
        check_run_dataset(run_dir, exp.data)
    elif int(os.environ.get("RANK", "0")) == 0:  # under torchrun, the first process writes
        save_run_vocab(run_dir, exp.data)


def train_experiment(exp: ExperimentConfig, run_dir: str | Path, resume: bool = False, *,
                     valid_metrics: ValidMetrics | None = None) -> TrainedRun:
    """Trains ``exp``'s model in ``run_dir`` until its budget (see the module docstring).

    Args:
        exp: the checked experiment config (``exp.data``: its prepared dataset).
        run_dir: where the run's vocab copies, ``config.yaml``, logs and checkpoints go.
        resume: continue the run from its last checkpoint (a fresh start when it has none);
            without it, a run directory with checkpoints is an error.
        valid_metrics: more metrics at each validation (:data:`ValidMetrics`).

    Raises:
        ConfigError, DataError: the dataset or the run directory does not fit (nothing written).
        RunFailure: another process writes the run directory, or prepares the dataset.
        InputError: a folder or file of the run directory is a symbolic link (nothing is written).
        TrainingInterrupted: Ctrl-C or SIGTERM (a checkpoint of the update reached is written first).
    """
    run_dir = Path(run_dir)
    reading = FolderLock(exp.data, "prepared dataset", shared=True)  # no `prepare` rewrites it while it is read
    lock = FolderLock(run_dir, "run directory")
    try:
        reading.acquire()
        check_training_data(exp.data)
        if int(os.environ.get("RANK", "0")) == 0:  # one writer, from before the run's tokenizers are copied
            lock.acquire()
        check_run_links(run_dir)
        prepare_run_dir(run_dir, exp, resume)
        torch.manual_seed(exp.train.seed)  # train.seed decides the initial weights too
        model = build_model(exp)
        train = PreparedDataset(exp.data, "train")
        dev = PreparedDataset(exp.data, "dev") if "dev" in train.manifest["splits"] else None
        metrics = valid_metrics(model, exp, dev) if valid_metrics is not None and dev is not None else None
        trainer = Trainer(model, task_for(model, exp.train.label_smoothing), exp.train, train, run_dir,
                          valid_data=dev, valid_metrics=metrics, run_config={"experiment": exp.to_dict()})
        try:
            result = trainer.train(resume=resume, lock=lock)
        except KeyboardInterrupt as stop:
            main = trainer.dist.is_main
            raise TrainingInterrupted(trainer.step, resolve_checkpoint(run_dir) if main else None, main,
                                      getattr(stop, "signum", signal.SIGINT)) from stop
        finally:
            trainer.close()
    finally:
        lock.release()
        reading.release()
    return TrainedRun(result, trainer.epochs_started, trainer.elapsed / 60.0, trainer.dist.is_main)
