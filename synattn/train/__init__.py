"""Training: the loop, checkpoints with exact resume, tasks, and multi-process (torchrun) runs.

See ``docs/training.md``. The pieces: :class:`TrainConfig` (settings), :class:`Trainer` (the
loop; beside it :mod:`~synattn.train.resume`, :mod:`~synattn.train.validation` and
:mod:`~synattn.train.progress`), the tasks of :mod:`synattn.train.tasks`, and the checkpoint
helpers of :mod:`synattn.train.checkpoint`.
"""

from synattn.train.checkpoint import load_checkpoint, prune_checkpoints, resolve_checkpoint, save_checkpoint
from synattn.train.config import TrainConfig
from synattn.train.distributed import DistributedContext, init_distributed
from synattn.train.kinds import task_for
from synattn.train.optim import build_optimizer, inverse_sqrt_factor
from synattn.train.run_log import read_log
from synattn.train.tasks import (
    LanguageModelTask,
    MaskedLMTask,
    Task,
    TranslationTask,
    label_smoothed_nll,
    mask_tokens,
    syntax_request_for,
)
from synattn.train.trainer import Trainer, TrainResult

__all__ = [
    "DistributedContext", "LanguageModelTask", "MaskedLMTask", "Task", "TrainConfig", "TrainResult",
    "Trainer", "TranslationTask", "build_optimizer", "init_distributed", "inverse_sqrt_factor",
    "label_smoothed_nll", "load_checkpoint", "mask_tokens", "prune_checkpoints", "read_log",
    "resolve_checkpoint", "save_checkpoint", "syntax_request_for", "task_for",
]
