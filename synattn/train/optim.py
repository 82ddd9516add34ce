"""AdamW with the inverse-square-root warm-up schedule of Vaswani et al. (2017, §5.3)."""

from __future__ import annotations

import math

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


def build_optimizer(model: nn.Module, config: TrainConfig) -> tuple[torch.optim.AdamW, LambdaLR]:
    """AdamW over the trainable parameters and its schedule (``scheduler.step()`` after each update).

    The schedule's counter starts at 0 before the first update, which therefore runs at
    ``inverse_sqrt_factor(1, ...)``.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, betas=tuple(config.betas), eps=config.eps,
                                  weight_decay=config.weight_decay)
    warmup = config.warmup_updates
    scheduler = LambdaLR(optimizer, lambda done: inverse_sqrt_factor(done + 1, warmup))
    return optimizer, scheduler
