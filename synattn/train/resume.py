"""What makes a resumed run repeat the uninterrupted one update for update.

- :func:`batch_seed`: torch's global generator is re-seeded from ``(seed, stream, update, rank,
  batch)`` before every batch (dropout, masking), so no per-process generator needs saving;
- :func:`check_batch_order`: the settings that decide the epochs' batch lists
  (``BATCH_ORDER_KEYS``) must be those of the checkpoint;
- :func:`write_checkpoint` / :func:`read_checkpoint`: the run directory's checkpoints
  (:mod:`synattn.train.checkpoint`) with the errors a user can act on (a full disk, a damaged
  file, a run directory that already has checkpoints).

The training state itself (update, epoch, batches of the epoch consumed, optimizer, scheduler,
generators) is :meth:`synattn.train.trainer.Trainer.state_dict`.
"""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
from torch import nn

from synattn.errors import InputError, RunFailure, SynattnError
from synattn.train.checkpoint import CHECKPOINTS, load_checkpoint, resolve_checkpoint, save_checkpoint
from synattn.train.config import BATCH_ORDER_KEYS, TrainConfig

STATE_FORMAT = 1
"""Version of the training state a checkpoint stores (``state.pt``)."""

TRAIN_STREAM, VALID_STREAM = 1, 2
"""Tags of the seed streams of the training and the validation batches."""


def batch_seed(seed: int, stream: int, step: int, rank: int, index: int) -> int:
    """The seed of torch's generator before batch ``index`` of update ``step`` on ``rank``."""
    return int(np.random.SeedSequence([seed, stream, step, rank, index]).generate_state(1)[0])


def check_batch_order(saved: dict, config: TrainConfig, where: str) -> None:
    """Raises ``InputError`` when ``config`` orders the batches otherwise than the checkpoint's
    saved training config ``saved`` (``where``: the checkpoint, for the message)."""
    changed = [k for k in BATCH_ORDER_KEYS if saved.get(k) != getattr(config, k)]
    if changed:
        raise InputError(f"cannot resume exactly: {', '.join(f'{k}={saved.get(k)}' for k in changed)} "
                         f"in the checkpoint, {', '.join(f'{k}={getattr(config, k)}' for k in changed)} "
                         f"now (they decide the batch order)", where)


def write_checkpoint(run_dir: Path, step: int, model: nn.Module, state: dict, *, is_best: bool,
                     keep_last_n: int | None) -> Path:
    """Saves the checkpoint of update ``step`` under ``RUN/checkpoints``; a failed write (a full
    disk) is a :class:`RunFailure` that says the last complete checkpoint is kept."""
    folder = run_dir / CHECKPOINTS
    try:
        return save_checkpoint(folder, step, model, state, is_best=is_best, keep_last_n=keep_last_n)
    except SynattnError:
        raise
    except OSError as err:  # a write or flush of the checkpoint's files (the folder is named)
        cause = (err.strerror or str(err)).removeprefix("cannot write: ").removesuffix(" (is the disk full?)")
        then = ("is the disk full? The last complete checkpoint is kept: free space and resume"
                if err.errno in (errno.ENOSPC, errno.EDQUOT, None) else
                "the last complete checkpoint is kept: resume once it is fixed")
        raise RunFailure(f"{folder}: cannot write the checkpoint of update {step} ({cause}); {then}") from None
    except Exception as err:  # torch.save and safetensors report a failed write (a full disk) this way
        raise RunFailure(f"{folder}: cannot write the checkpoint of update {step} "
                         f"({' '.join(str(err).split())[:200]}); is the disk full? The last complete "
                         f"checkpoint is kept: free space and resume") from None


def read_checkpoint(run_dir: Path, model: nn.Module, resume: bool) -> tuple[Path, dict] | None:
    """Loads the run directory's last checkpoint into ``model``; returns ``(its path, the
    training state)``, or None when the run has no checkpoint.

    Raises:
        InputError: the run has checkpoints but ``resume`` is off, or the checkpoint is damaged.
    """
    found = resolve_checkpoint(run_dir / CHECKPOINTS)
    if found is None:
        return None
    if not resume:
        raise InputError("this run directory already has checkpoints: resume it or choose another "
                         "directory", str(run_dir))
    try:
        return found, load_checkpoint(found, model)
    except (SynattnError, MemoryError):
        raise
    except Exception as err:  # a damaged file: safetensors, zip or unpickling errors
        if isinstance(err, OSError) and err.filename:  # the file system's error: says which file
            raise
        cause = " ".join(str(err).split())
        if "weights_only" in cause or "Weights only load failed" in cause:  # not torch's advice to unpickle
            cause = "not a tensors-only file"
        raise InputError(f"cannot read this checkpoint ({type(err).__name__}: {cause[:200]}); "
                         f"delete it to resume from the one before", str(found)) from None
