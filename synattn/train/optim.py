"""AdamW with a warm-up schedule: inverse square root (Vaswani et al. 2017, §5.3), or a cosine or
linear decay to the end of the run's budget (Loshchilov & Hutter 2017), in updates or in minutes."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from synattn.train.config import TrainConfig


def inverse_sqrt_factor(step: int, warmup_updates: int) -> float:
    """The learning-rate multiplier of update ``step`` (1-based): peak 1 at the end of warm-up.

    ``step / warmup`` during the warm-up, then ``sqrt(warmup / step)``; this is Vaswani et al.'s
    ``d^-0.5 · min(step^-0.5, step · warmup^-1.5)`` rescaled so that its peak is 1. With
    ``warmup_updates = 0`` the rate is constant.

    Example:
        >>> inverse_sqrt_factor(50, 100), inverse_sqrt_factor(400, 100)
        (0.5, 0.5)
    """
    if warmup_updates == 0:
        return 1.0
    if step < warmup_updates:
        return step / warmup_updates
    return math.sqrt(warmup_updates / step)


def decay_factor(step: int, warmup_updates: int, progress: float, schedule: str,
                 min_lr_ratio: float = 0.0) -> float:
    """The multiplier of update ``step`` (1-based) under a warm-up then a decay to the budget's end.

    Linear warm-up to 1 over ``warmup_updates``, then ``cosine`` (``r + (1 − r)·(1 + cos πp)/2``)
    or ``linear`` (``1 − (1 − r)·p``) decay in the fraction ``p`` of the budget used, down to
    ``r = min_lr_ratio`` at ``p = 1``. ``progress`` counts the whole budget (warm-up included),
    so the decay starts from where the warm-up ends.

    Example:
        >>> decay_factor(10, 10, 0.1, "cosine"), round(decay_factor(200, 10, 0.55, "cosine"), 3)
        (1.0, 0.5)
    """
    if warmup_updates and step < warmup_updates:
        return step / warmup_updates
    p = min(max(progress, 0.0), 1.0)
    if schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * p))
    elif schedule == "linear":
        shape = 1.0 - p
    else:
        raise ValueError(f"unknown decay schedule {schedule!r}")
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def build_optimizer(model: nn.Module, config: TrainConfig,
                    progress: Callable[[int], float] | None = None) -> tuple[torch.optim.AdamW, LambdaLR]:
    """AdamW over the trainable parameters and its schedule (``scheduler.step()`` after each update).

    The schedule's counter starts at 0 before the first update, which therefore runs at
    ``inverse_sqrt_factor(1, ...)`` (or ``decay_factor(1, ...)``).

    Args:
        progress: for the ``cosine``/``linear`` schedules, the fraction of the run's budget used
            after a given number of updates (the trainer measures it in updates or in minutes,
            see :class:`synattn.train.TrainConfig`); by default ``updates / max_steps``.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, betas=(config.betas[0], config.betas[1]), eps=config.eps,
                                  weight_decay=config.weight_decay)
    warmup = config.warmup_updates
    if config.schedule == "inverse_sqrt":
        return optimizer, LambdaLR(optimizer, lambda done: inverse_sqrt_factor(done + 1, warmup))
    if progress is None:
        if config.max_steps is None:
            raise ValueError(f"schedule={config.schedule} needs max_steps or a progress measure")
        max_steps = config.max_steps
        progress = lambda done: done / max_steps  # noqa: E731
    schedule, floor = config.schedule, config.min_lr_ratio
    return optimizer, LambdaLR(optimizer, lambda done: decay_factor(done + 1, warmup, progress(done), schedule,
                                                                   floor))
