"""The metrics of a run: ``log.jsonl`` always, TensorBoard events when ``tensorboard`` is installed.

Every record is one JSON line ``{"kind": "train" | "valid", "step": ..., "epoch": ..., ...}``. A
resumed run first drops the records of updates after its checkpoint (they belong to the part of
the interrupted run that is done again), so the file holds each update once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path

from synattn.errors import InputError
from synattn.io import atomic_write, cannot_write, open_regular

logger = logging.getLogger(__name__)

LOG_NAME = "log.jsonl"
TENSORBOARD_DIR = "tensorboard"


def read_log(run_dir: str | Path, kind: str | None = None) -> list[dict]:
    """The records of ``RUN/log.jsonl`` (of one ``kind`` when given); an unfinished line (cut by a
    killed process) is skipped.

    Raises:
        InputError: naming the file, when it is not a log (not a regular file, not UTF-8, or a line
            of JSON that is not a record).
    """
    path = Path(run_dir) / LOG_NAME
    if not os.path.lexists(path):
        return []
    with os.fdopen(open_regular(path, os.O_RDONLY, what="log file"), "rb") as f:
        raw = f.read()
    way_out = "it is not a log of synattn train; move it away to resume without the records"
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise InputError(f"not valid UTF-8 (byte {err.start}): {way_out}", str(path)) from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # a line cut by a killed process
            continue
        if not isinstance(record, dict):
            raise InputError(f"not a JSON record: {way_out}", str(path), number)
        if kind is None or record.get("kind") == kind:
            records.append(record)
    return records


class RunLog:
    """Writes the metrics of rank 0 (other ranks get a disabled log).

    Args:
        run_dir: the run directory.
        enabled: False on ranks other than 0.
        tensorboard: also write TensorBoard events under ``RUN/tensorboard`` when possible.
        resume_step: the update a resumed run restarts from: later records are dropped.
    """

    def __init__(self, run_dir: str | Path, enabled: bool = True, tensorboard: bool = True,
                 resume_step: int | None = None):
        self.path = Path(run_dir) / LOG_NAME
        self.enabled = enabled
        self.writer = None
        if not enabled:
            return
        if resume_step is not None:
            kept = [r for r in read_log(run_dir) if r.get("step", 0) <= resume_step]
            with atomic_write(self.path) as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
        self.file = os.fdopen(open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what="log file"),
                              "a", encoding="utf-8")  # never appended to through a link
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                logger.info("tensorboard is not installed: metrics go to %s only", self.path)
            else:
                _quiet_event_writer_threads()
                purge = None if resume_step is None else resume_step + 1
                try:
                    self.writer = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), purge_step=purge)
                except OSError as err:
                    self.file.close()
                    raise cannot_write(err, Path(run_dir) / TENSORBOARD_DIR) from None

    def write(self, kind: str, step: int, epoch: int, values: dict[str, float]) -> None:
        """Appends one record and its scalars (``kind/name``) to TensorBoard."""
        if not self.enabled:
            return
        record = {"kind": kind, "step": step, "epoch": epoch, **values}
        try:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        except OSError as err:
            raise cannot_write(err, self.path) from None
        if self.writer is not None:
            try:
                for name, value in values.items():
                    self.writer.add_scalar(f"{kind}/{name}", value, step)
            except OSError as err:
                raise cannot_write(err, self.path.parent / TENSORBOARD_DIR) from None

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        if self.writer is not None:
            try:
                self.writer.flush()  # raises what failed in its thread (a full disk): the events are not whole
            except OSError as err:
                raise cannot_write(err, self.path.parent / TENSORBOARD_DIR) from None
            finally:
                self.writer.close()


def _quiet_event_writer_threads() -> None:
    """TensorBoard writes its events in a thread of its own; what fails there (a full disk) is raised
    again by the writer's next call in the training (:meth:`RunLog.write`, :meth:`RunLog.close`), so
    the thread's own traceback is not printed too (the error stays one line)."""
    previous = threading.excepthook
    if getattr(previous, "synattn_quiet", False):
        return

    def hook(args):
        if type(args.thread).__name__ != "_AsyncWriterThread":
            previous(args)

    hook.synattn_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def console_line(metrics: dict[str, float]) -> str:
    """One console line of logged metrics (the same numbers as log.jsonl)."""
    skip = {"ntokens", "nsentences", "updates", "elapsed_s"}
    parts = []
    for key, value in metrics.items():
        if key in skip:
            continue
        if key == "lr":
            parts.append(f"lr {value:.2e}")
        elif key == "tokens_per_s":
            parts.append(f"tok/s {value:.0f}")
        else:
            parts.append(f"{key} {value:.4g}")
    return " | ".join(parts)


def summarize(sums: dict[str, float]) -> dict[str, float]:
    """Per-token averages of summed logs: losses and aux per sample, nll and perplexity per token.

    ``loss`` is the training objective (task loss + auxiliary losses); ``task_loss`` the task's
    own loss alone (e.g. label-smoothed translation cross-entropy), which picks the best checkpoint.
    """
    size, tokens = max(sums.get("sample_size", 0.0), 1.0), max(sums.get("ntokens", 0.0), 1.0)
    nll = sums.get("nll_loss", 0.0) / tokens
    out = {"loss": sums.get("loss", 0.0) / size,
           "task_loss": sums.get("task_loss", sums.get("loss", 0.0)) / size,
           "nll_loss": nll, "ppl": math.exp(min(nll, 50.0))}
    out.update({k: v / size for k, v in sums.items() if k.startswith("aux/")})
    return out
