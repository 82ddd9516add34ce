"""The metrics of a run: ``log.jsonl`` always, TensorBoard events when ``tensorboard`` is installed.

Every record is one JSON line ``{"kind": "train" | "valid", "step": ..., "epoch": ..., ...}``. A
resumed run first drops the records of updates after its checkpoint (they belong to the part of
the interrupted run that is done again), so the file holds each update once.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from synattn.io import atomic_write

logger = logging.getLogger(__name__)

LOG_NAME = "log.jsonl"
TENSORBOARD_DIR = "tensorboard"


def read_log(run_dir: str | Path, kind: str | None = None) -> list[dict]:
    """The records of ``RUN/log.jsonl`` (of one ``kind`` when given); an unfinished last line is skipped."""
    path = Path(run_dir) / LOG_NAME
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a killed process
            continue
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
        self.file = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                logger.info("tensorboard is not installed: metrics go to %s only", self.path)
            else:
                purge = None if resume_step is None else resume_step + 1
                self.writer = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), purge_step=purge)

    def write(self, kind: str, step: int, epoch: int, values: dict[str, float]) -> None:
        """Appends one record and its scalars (``kind/name``) to TensorBoard."""
        if not self.enabled:
            return
        record = {"kind": kind, "step": step, "epoch": epoch, **values}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(f"{kind}/{name}", value, step)

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        if self.writer is not None:
            self.writer.close()


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
