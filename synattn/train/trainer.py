"""The training loop: token-budget batches, accumulation, DDP, validation, exact resume.

One update (fairseq's recipe): each process takes its share of the next ``world_size ×
update_freq`` batches of the epoch's list, sums the task loss of each batch and back-propagates
it (gradients are synchronised once, on the last batch), then the gradients are divided by the
total ``sample_size`` of the update over all processes, clipped, and AdamW steps with the
inverse-sqrt schedule.

One writer: rank 0 holds a lock on the run directory while it trains
(:class:`synattn.locks.FolderLock`); a second ``train`` of the same directory stops with an error
naming the holder.

Determinism: the initial weights come from ``train.seed`` (``synattn train`` seeds torch before
building the model), the epoch's batch list depends only on ``(seed, epoch)``
(:func:`synattn.data.batching.token_batches`), and torch's global generator is re-seeded from
``(seed, update, rank, batch)`` before every batch (dropout, masking). A checkpoint stores the
update count, the epoch, the number of the epoch's batches consumed, optimizer and scheduler
states and the generators' states, so a resumed run repeats the uninterrupted one update for
update, including resumes in the middle of an epoch and runs with several processes (whose
per-process generators need not be saved, since they are re-seeded).

The pieces around the loop live beside it: the per-batch seeds, the resume checks and the
checkpoint errors in :mod:`synattn.train.resume`, the validation loss in
:mod:`synattn.train.validation`, the interval records and the progress bar in
:mod:`synattn.train.progress`, Ctrl-C and SIGTERM (a checkpoint of the update under way, then
the stop) in :mod:`synattn.train.signals`, the schedule's measure of the budget and the step that
ends an update (gradients scaled, clipped, checked, applied) in :mod:`synattn.train.optim`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
import yaml
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from synattn.data.batching import Batch, collate, token_batches
from synattn.data.loader import collated
from synattn.errors import InputError, RunFailure
from synattn.io import atomic_write
from synattn.locks import FolderLock
from synattn.train.checkpoint import (
    CHECKPOINTS,
    SNAPSHOTS,
    drop_snapshots_after,
    resolve_checkpoint,
    rng_state,
    save_snapshot,
    set_rng_state,
)
from synattn.train.config import TrainConfig
from synattn.train.distributed import init_distributed
from synattn.train.optim import budget_progress, build_optimizer, optimizer_step
from synattn.train.progress import TrainInterval, progress_bar
from synattn.train.resume import (
    STATE_FORMAT,
    TRAIN_STREAM,
    batch_seed,
    check_batch_order,
    read_checkpoint,
    write_checkpoint,
)
from synattn.train.run_log import RunLog, console_line, summarize
from synattn.train.signals import StopSignals
from synattn.train.tasks import Task
from synattn.train.validation import improves, validation_sums

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.yaml"


@dataclass
class TrainResult:
    """How a call to :meth:`Trainer.train` ended.

    Attributes:
        step: updates done in total; epoch: the epoch the run would continue with.
        best_valid_loss: lowest validation loss seen (None without validation).
        checkpoint: the last checkpoint directory (None when nothing was saved, and on ranks
            other than 0).
        stopped_by: ``max_epochs``, ``max_steps`` or ``max_minutes``.
    """

    step: int
    epoch: int
    best_valid_loss: float | None
    checkpoint: Path | None
    stopped_by: str


class Trainer:
    """Trains ``model`` on ``task`` over a prepared dataset (see the module docstring).

    Args:
        model: the model (moved to the process's device; wrapped in DDP under torchrun).
        task: gives the syntax request and the loss (:mod:`synattn.train.tasks`).
        config: the training settings.
        train_data: has ``lengths() -> [N]`` and what ``collate_fn`` reads (a
            :class:`synattn.data.batching.PreparedDataset`).
        run_dir: where ``config.yaml``, ``log.jsonl``, ``tensorboard/`` and ``checkpoints/`` go.
        valid_data: validation split (loss every ``validate_interval`` epochs).
        valid_metrics: called after the validation loss on rank 0 with the unwrapped model in
            eval mode; returns more metrics to log (e.g. ``{"bleu": 27.3}``).
        collate_fn: ``(dataset, indices, SyntaxRequest) -> Batch``.
        run_config: more sections for ``config.yaml`` (e.g. ``{"model": ..., "data": ...}``).

    Example:
        >>> trainer = Trainer(model, task_for(model), TrainConfig(max_epochs=2),  # doctest: +SKIP
        ...                   PreparedDataset("data/x", "train"), "runs/x",
        ...                   valid_data=PreparedDataset("data/x", "dev"))
        >>> trainer.train(resume=True)  # doctest: +SKIP
    """

    def __init__(self, model: nn.Module, task: Task, config: TrainConfig, train_data, run_dir: str | Path,
                 valid_data=None, *, valid_metrics: Callable[[nn.Module], dict[str, float]] | None = None,
                 collate_fn: Callable[..., Batch] = collate, run_config: dict | None = None):
        config.validate()
        self.config, self.task = config, task
        self.dist = init_distributed(config.device)
        self.model = model.to(self.dist.device)
        self.wrapped: nn.Module = self.model
        wrap = getattr(task, "wrap_dataset", None)  # a task that reads the data its own way (a pretrained tokenizer)
        if wrap is not None:
            # (a task that wraps the data has its collate)
            train_data, valid_data = wrap(train_data), wrap(valid_data)
            collate_fn = task.collate  # type: ignore[attr-defined]
        self.train_data, self.valid_data = train_data, valid_data
        self.valid_metrics, self.collate_fn = valid_metrics, collate_fn
        self.run_dir = Path(run_dir)
        self.run_config = run_config or {}
        self.request = task.syntax_request()
        self.lengths = np.asarray(train_data.lengths())
        if len(self.lengths) == 0:
            raise InputError("the training data is empty", str(getattr(train_data, "folder", "<train data>")))
        self.elapsed = 0.0  # training seconds over every resumed part of the run
        self._started: float | None = None
        progress = budget_progress(config, self.lengths, self.dist.world_size, self._training_seconds)
        self.optimizer, self.scheduler = build_optimizer(self.model, config, progress)
        self.step, self.epoch, self.batches_done = 0, 1, 0
        self.best_valid_loss: float | None = None
        self._best_step = self._saved_step = -1
        self._log: RunLog | None = None

    def _training_seconds(self) -> float:
        """Training wall time so far, over every resumed part of the run (up to this moment)."""
        return self.elapsed if self._started is None else time.monotonic() - self._started

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """The training state (tensors and plain values only: ``torch.load(weights_only=True)``)."""
        return {"format": STATE_FORMAT, "step": self.step, "epoch": self.epoch,
                "batches_done": self.batches_done, "best_valid_loss": self.best_valid_loss,
                "batches_per_update": self.dist.world_size * self.config.update_freq,
                "elapsed": self.elapsed, "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "rng": rng_state(),
                "config": self.config.to_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restores a state of :meth:`state_dict` (the weights are loaded separately)."""
        check_batch_order(state["config"], self.config, state.get("path", "<checkpoint>"))
        self.step, self.epoch, self.batches_done = state["step"], state["epoch"], state["batches_done"]
        self.best_valid_loss, self.elapsed = state["best_valid_loss"], state["elapsed"]
        before, now = state.get("batches_per_update"), self.dist.world_size * self.config.update_freq
        if before is not None and before != now:  # same batches, in other groups: not an exact resume
            logger.warning("the run made its updates of %d batches (processes × update_freq); it continues with "
                           "%d (%d processes × update_freq %d), so each update sums %s tokens from here; "
                           "for the same updates, give processes × update_freq = %d", before, now,
                           self.dist.world_size, self.config.update_freq, "fewer" if now < before else "more",
                           before)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])

    def save(self) -> Path | None:
        """Writes a checkpoint of the current update (rank 0; others return None)."""
        self._saved_step = self.step
        if not self.dist.is_main:
            return None
        return write_checkpoint(self.run_dir, self.step, self.model, self.state_dict(),
                                is_best=self._best_step == self.step, keep_last_n=self.config.keep_last_n)

    def _resume(self, resume: bool) -> bool:
        loaded = read_checkpoint(self.run_dir, self.model, resume)
        if loaded is None:
            return False
        found, state = loaded
        self.load_state_dict(state)
        logger.info("resumed from %s (update %d, epoch %d, batch %d)", found, self.step, self.epoch,
                    self.batches_done)
        return True

    # ------------------------------------------------------------------ one update

    def _autocast(self):
        return torch.autocast(self.dist.device.type, dtype=torch.bfloat16, enabled=self.config.bf16)

    def train_step(self, batches: list[Batch], dummy: bool = False) -> dict[str, float]:
        """One update over this process's ``batches`` (gradients accumulated, then one step).

        Args:
            batches: this process's batches of the update (at least one).
            dummy: the batches only keep the processes in step (their loss is multiplied by 0
                and their logs dropped): a process with no batch left at the end of an epoch
                runs one like this.

        Returns:
            This process's logs summed over its batches, with the update's ``grad_norm`` and
            ``lr`` (the same on every process). The normalised, clipped gradients stay in
            ``.grad`` until the next update.
        """
        self.wrapped.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, Tensor] = {}
        for i, batch in enumerate(batches):
            torch.manual_seed(batch_seed(self.config.seed, TRAIN_STREAM, self.step, self.dist.rank, i))
            last = i == len(batches) - 1
            no_sync = (cast(DistributedDataParallel, self.wrapped).no_sync()  # (wrapped in several processes)
                       if self.dist.world_size > 1 and not last else contextlib.nullcontext())
            with no_sync:
                with self._autocast():
                    loss, logs = self.task.loss(self.wrapped, batch.to(self.dist.device, non_blocking=True))
                (loss * 0.0 if dummy else loss).backward()
            for key, value in ({} if dummy else logs).items():
                value = torch.as_tensor(value, dtype=torch.float64, device=self.dist.device).detach()
                sums[key] = sums[key] + value if key in sums else value
        names = sorted(sums)
        local = dict(zip(names, torch.stack([sums[k] for k in names]).tolist() if names else []))  # one sync
        sample_size = self.dist.sum([local.get("sample_size", 0.0)])[0]
        # DDP averaged the processes' sums: undo, then divide by the update's sample size
        grad_norm, lr = optimizer_step(self.model, self.optimizer, self.scheduler,
                                       self.dist.world_size / max(sample_size, 1.0), self.config.clip_norm,
                                       self.step + 1)
        self.step += 1
        return {**local, "grad_norm": grad_norm, "lr": lr}

    # ------------------------------------------------------------------ validation

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Loss (and ``valid_metrics``) on the validation data; logs it and tracks the best loss."""
        if self.valid_data is None:
            return {}
        self.model.eval()  # unwrapped: processes may run different numbers of batches
        metrics = summarize(validation_sums(self.model, self.task, self.valid_data, self.config, self.dist,
                                            self.request, self.collate_fn, self._autocast))
        if self.valid_metrics is not None and self.dist.is_main:
            metrics.update(self.valid_metrics(self.model))
        self.model.train()
        name = self.config.best_metric
        if name not in metrics:
            raise InputError(f"best_metric={name!r} is not among the validation metrics "
                             f"({', '.join(sorted(metrics))})", "train.best_metric")
        value = float(metrics[name])
        if improves(name, value, self.best_valid_loss):
            self.best_valid_loss, self._best_step = value, self.step
        assert self.best_valid_loss is not None  # (the first value improves on none)
        metrics["best_" + name] = self.best_valid_loss
        if self._log is not None:
            self._log.write("valid", self.step, self.epochs_started, metrics)
            if self.dist.is_main and self.config.progress_bar:
                tqdm.write(f"valid | update {self.step} | " + console_line(metrics), file=sys.stderr)
        return metrics

    # ------------------------------------------------------------------ the loop

    @property
    def epochs_started(self) -> int:
        """The epoch of the last update (the one before ``epoch`` right after an epoch's end)."""
        return self.epoch - 1 if self.batches_done == 0 and self.step > 0 else self.epoch

    def _stop_reason(self) -> str | None:
        c = self.config
        if c.max_steps is not None and self.step >= c.max_steps:
            return "max_steps"
        if c.max_epochs is not None and self.epoch > c.max_epochs:
            return "max_epochs"
        if c.max_minutes is not None and self.dist.main_says(self.elapsed >= 60.0 * c.max_minutes):
            return "max_minutes"
        return None

    def _write_config(self) -> None:
        if self.dist.is_main:
            with atomic_write(self.run_dir / CONFIG_NAME) as f:
                yaml.safe_dump({"train": self.config.to_dict(), **self.run_config}, f, sort_keys=False)

    def train(self, resume: bool = False, lock: FolderLock | None = None) -> TrainResult:
        """Trains until ``max_epochs``, ``max_steps`` or ``max_minutes``.

        Args:
            resume: continue from the run directory's last checkpoint (a fresh start when there
                is none). Without it, a run directory that has checkpoints is an error.
            lock: the run directory's lock when the caller already holds it (``synattn train``
                takes it before writing the run's tokenizers); else rank 0 takes it here.

        Returns:
            How the run ended.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        given = lock is not None and lock.held
        if lock is None or not given:
            lock = FolderLock(self.run_dir, "run directory")
        failure = None
        if self.dist.is_main and not given:  # rank 0 writes the run directory; the other ranks write nothing there
            try:
                lock.acquire()
            except RunFailure as err:
                failure = err
        if self.dist.main_says(failure is not None):  # every process stops when rank 0 has no lock
            raise failure or RunFailure(f"{self.run_dir}: rank 0 could not lock the run directory")
        try:
            return self._train(resume)
        finally:
            if not given:
                lock.release()

    def _train(self, resume: bool) -> TrainResult:
        c, world = self.config, self.dist.world_size
        resumed = self._resume(resume)
        if self.dist.is_main:
            dropped = drop_snapshots_after(self.run_dir / SNAPSHOTS, self.step)
            if dropped:
                logger.info("removed %d snapshot(s) of updates after %d (%s … %s), left by an earlier attempt",
                            len(dropped), self.step, dropped[0].name, dropped[-1].name)
        self._write_config()
        self._log = RunLog(self.run_dir, self.dist.is_main, c.tensorboard, self.step if resumed else None)
        if world > 1 and self.wrapped is self.model:
            ids = [self.dist.local_rank] if self.dist.device.type == "cuda" else None
            self.wrapped = DistributedDataParallel(self.model, device_ids=ids)
        started = time.monotonic() - self.elapsed
        interval = TrainInterval(self.dist, self._log, c.progress_bar, c)
        self._started = started
        stopped = self._stop_reason()
        signals = StopSignals()  # Ctrl-C, SIGTERM: stop after the update under way, with its checkpoint
        try:
            signals.__enter__()
            while stopped is None:
                batches = token_batches(self.lengths, c.max_tokens, seed=c.seed, epoch=self.epoch,
                                        max_sentences=c.max_sentences)
                interval.per_epoch = math.ceil(len(batches) / (world * c.update_freq))
                bar = progress_bar(len(batches), world * c.update_freq, self.batches_done, self.epoch,
                                   c.progress_bar and self.dist.is_main)
                epoch_end = False
                stream = self._collated([ix for mine, _, _ in self._updates(batches, self.batches_done) for ix in mine])
                while not epoch_end and stopped is None:
                    logs = self._next_update(batches, stream)
                    self.elapsed = time.monotonic() - started
                    epoch_end = self.batches_done == len(batches)
                    if epoch_end:
                        self.epoch, self.batches_done = self.epoch + 1, 0
                    interval.add(logs)
                    stopped = self._stop_reason()
                    if self.step % c.log_interval == 0 or stopped:
                        interval.write(self.step, self.epochs_started, self.elapsed, bar)
                    bar.update(1)
                    self._validate_and_save(epoch_end, stopped is not None)
                    if stopped is None and self.dist.main_says(signals.received is not None):
                        stopped = "signal"
                stream.close()  # (stops the workers of an epoch left early)
                bar.close()
            if stopped == "signal":
                if interval.sums:
                    interval.write(self.step, self.epochs_started, self.elapsed, bar)
                if self._saved_step != self.step:
                    self.save()
                signals.stop()  # raises as the signal would have (KeyboardInterrupt for Ctrl-C)
        finally:
            signals.restore()
            self._started = None
            self._log.close()
        last = resolve_checkpoint(self.run_dir / CHECKPOINTS) if self.dist.is_main else None
        return TrainResult(self.step, self.epoch, self.best_valid_loss, last, stopped)

    def _updates(self, batches: list[np.ndarray], done: int):
        """This process's share of each update of the epoch from batch ``done`` on: ``(index arrays,
        dummy, batches done after it)``; a process with no batch left runs a dummy batch (see
        :meth:`train_step`)."""
        rank, world = self.dist.rank, self.dist.world_size
        while done < len(batches):
            chunk = range(done, min(done + world * self.config.update_freq, len(batches)))
            mine = [batches[j] for j in chunk[rank::world]]
            yield mine or [batches[chunk[0]]], not mine, chunk.stop
            done = chunk.stop

    def _collated(self, batches: list[np.ndarray]):
        """The batches collated in order (``train.num_workers`` worker processes; pinned for CUDA)."""
        return collated(self.train_data, batches, self.request, self.collate_fn, self.config.num_workers,
                        pin_memory=self.dist.device.type == "cuda")

    def _next_update(self, batches: list[np.ndarray], stream) -> dict[str, float]:
        """Runs the update over the next ``world_size × update_freq`` batches of the epoch's list,
        taking this process's collated batches from ``stream`` (:meth:`_collated` of :meth:`_updates`)."""
        mine, dummy, stop = next(self._updates(batches, self.batches_done))
        logs = self.train_step([next(stream) for _ in mine], dummy=dummy)
        self.batches_done = stop
        return logs

    def _validate_and_save(self, epoch_end: bool, stopping: bool) -> None:
        """Validates and saves when an interval (of epochs at an epoch's end, else of updates) says so;
        writes a snapshot of the weights at every ``snapshot_interval_updates``-th update."""
        c = self.config
        if epoch_end:
            done = self.epoch - 1
            validate = c.validate_interval and done % c.validate_interval == 0
            save = c.save_interval and done % c.save_interval == 0
        else:
            validate = c.validate_interval_updates and self.step % c.validate_interval_updates == 0
            save = c.save_interval_updates and self.step % c.save_interval_updates == 0
        if c.snapshot_interval_updates and self.step % c.snapshot_interval_updates == 0 and self.dist.is_main:
            save_snapshot(self.run_dir / SNAPSHOTS, self.step, self.model)
        if stopping or validate:
            self.validate()
        if stopping or save:
            self.save()

    def close(self) -> None:
        """Leaves the process group if this trainer joined it."""
        self.dist.close()
