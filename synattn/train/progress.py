"""The training records of a run: the sums of the updates since the last record, written every
``log_interval`` updates (and when the run stops) to the run log and the console, and the
progress bar of an epoch. The console's records end with the time to go: the updates left at the
pace kept since the run's first record (or the minutes left of ``max_minutes``, if sooner)."""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from synattn.progress import Pace, duration, on_terminal
from synattn.train.distributed import DistributedContext
from synattn.train.run_log import RunLog, console_line, summarize

if TYPE_CHECKING:
    from synattn.train.config import TrainConfig


def progress_bar(num_batches: int, per_update: int, batches_done: int, epoch: int, show: bool):
    """The bar of the updates of one epoch of ``num_batches`` batches, ``per_update`` batches an
    update, ``batches_done`` of them already done (a resume); on a terminal only: in a log file
    the training records written every ``log_interval`` updates are the progress lines."""
    return tqdm(total=math.ceil(num_batches / per_update), initial=batches_done // per_update,
                desc=f"epoch {epoch}", unit="upd", dynamic_ncols=True, file=sys.stderr,
                disable=not (show and on_terminal()), mininterval=0.1)


class TrainInterval:
    """The logs of the updates since the last training record (each process its own).

    Args:
        dist: the processes (the logs are added over them when written).
        log: the run log (rank 0 writes, the others' is disabled).
        console: also print each record (rank 0, with the progress bar on).
        config: the run's budget (``max_steps``, ``max_epochs``, ``max_minutes``), for the time to go.
    """

    def __init__(self, dist: DistributedContext, log: RunLog, console: bool, config: TrainConfig | None = None):
        self.dist, self.log, self.console, self.config = dist, log, console, config
        self.sums: dict[str, float] = {}
        self.start = time.monotonic()
        self.pace = Pace()
        self.per_epoch: int | None = None
        """Updates of an epoch (the trainer sets it at each epoch), for a budget of epochs."""

    def add(self, logs: dict[str, float]) -> None:
        """Adds one update's logs (with its ``lr`` and ``grad_norm``)."""
        for key, value in logs.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        self.sums["updates"] = self.sums.get("updates", 0) + 1

    def write(self, step: int, epoch: int, elapsed: float, bar) -> None:
        """Writes the interval's record and starts a new interval: the processes' logs are
        added, ``lr``/``grad_norm`` averaged over the updates."""
        interval, seconds = self.sums, time.monotonic() - self.start
        updates = interval.pop("updates")
        lr, grad_norm = interval.pop("lr") / updates, interval.pop("grad_norm") / updates
        sums = self.dist.sum_dict(interval)
        metrics = summarize(sums)
        metrics.update(lr=lr, grad_norm=grad_norm, tokens_per_s=sums.get("ntokens", 0.0) / max(seconds, 1e-9),
                       ntokens=sums.get("ntokens", 0.0), nsentences=sums.get("nsentences", 0.0),
                       updates=updates, elapsed_s=elapsed)
        self.log.write("train", step, epoch, metrics)
        self.pace.observe(step, elapsed)
        to_go = self.seconds_to_go(step, elapsed)
        left = {} if to_go is None else {"to_go": duration(to_go)}
        bar.set_postfix(loss=f"{metrics['loss']:.3f}", tok_s=f"{metrics['tokens_per_s']:.0f}", **left, refresh=False)
        if self.dist.is_main and self.console:
            tqdm.write(f"train | update {step} | epoch {epoch} | " + console_line(metrics)
                       + (f" | {left['to_go']} to go" if left else ""), file=sys.stderr)
        self.sums, self.start = {}, time.monotonic()

    def seconds_to_go(self, step: int, elapsed: float) -> float | None:
        """Seconds until the first budget of the config ends: updates (``max_steps``, or
        ``max_epochs`` × updates of an epoch) at the pace measured since the first record, or
        the training minutes left; None before the pace is measured (the first record)."""
        c = self.config
        if c is None or self.pace.per_second is None:
            return None
        updates = [c.max_steps] if c.max_steps is not None else []
        if c.max_epochs is not None and self.per_epoch:
            updates.append(c.max_epochs * self.per_epoch)
        left = [s for s in (self.pace.seconds_for(u - step) for u in updates) if s is not None]
        if c.max_minutes is not None:
            left.append(max(60.0 * c.max_minutes - elapsed, 0.0))
        return min(left) if left else None
