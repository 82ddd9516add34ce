"""The validation step of a run: the task's loss over the validation split, and the best value.

Every process takes every ``world_size``-th batch of the split (in length order, the same list
each time) and the sums of their logs are added over the processes; torch's generator is
re-seeded before each batch, so masking draws the same masks at every validation.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import torch
from torch import nn

from synattn.data.batching import Batch, token_batches
from synattn.data.loader import collated
from synattn.syntax.request import SyntaxRequest
from synattn.train.config import HIGHER_IS_BETTER, TrainConfig
from synattn.train.distributed import DistributedContext
from synattn.train.resume import VALID_STREAM, batch_seed
from synattn.train.tasks import Task


@torch.no_grad()
def validation_sums(model: nn.Module, task: Task, data, config: TrainConfig, dist: DistributedContext,
                    request: SyntaxRequest, collate_fn: Callable[..., Batch],
                    autocast: Callable[[], AbstractContextManager]) -> dict[str, float]:
    """The task's logs summed over the validation ``data`` and over the processes.

    ``model`` is the unwrapped model in eval mode (processes may run different numbers of
    batches); ``autocast()`` gives the training's autocast context.
    """
    batches = token_batches(np.asarray(data.lengths()), config.max_tokens, shuffle=False,
                            max_sentences=config.max_sentences)
    sums: dict[str, float] = {}
    stream = collated(data, batches[dist.rank:: dist.world_size], request, collate_fn, config.num_workers,
                      pin_memory=dist.device.type == "cuda")
    for i, batch in enumerate(stream):
        torch.manual_seed(batch_seed(config.seed, VALID_STREAM, 0, dist.rank, i))  # same masks each time
        batch = batch.to(dist.device, non_blocking=True)
        with autocast():
            _, logs = task.loss(model, batch)
        for key, value in logs.items():
            sums[key] = sums.get(key, 0.0) + float(value)
    return dist.sum_dict(sums)


def improves(name: str, value: float, best: float | None) -> bool:
    """Whether ``value`` of metric ``name`` beats ``best`` (higher is better for the names that
    start with ``HIGHER_IS_BETTER``, e.g. ``bleu``; lower for losses)."""
    if best is None:
        return True
    return value > best if name.lower().startswith(HIGHER_IS_BETTER) else value < best
