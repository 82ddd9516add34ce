"""AdamW with a warm-up schedule: inverse square root (Vaswani et al. 2017, §5.3), or a cosine or
linear decay to the end of the run's budget (Loshchilov & Hutter 2017), in updates or in minutes;
and the step of one update (the accumulated gradients scaled, clipped, checked, applied)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from synattn.data.batching import token_batches
from synattn.errors import RunFailure
from synattn.train.config import TrainConfig


class NonFiniteGradient(RunFailure, FloatingPointError):
    """The gradients of an update are not finite (the run diverged, or its weights are damaged)."""


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


def budget_progress(config: TrainConfig, lengths: np.ndarray, processes: int,
                    seconds: Callable[[], float]) -> Callable[[int], float] | None:
    """The fraction of the budget used after ``done`` updates, for the decaying schedules: in
    updates (``max_steps``: None, :func:`build_optimizer`'s default), else in training minutes
    (``seconds()``: the training time so far), else in epochs of the data whose sentences have
    ``lengths`` (``processes``: how many share each update)."""
    c = config
    if c.schedule == "inverse_sqrt" or c.max_steps is not None:
        return None
    if c.max_minutes is not None:
        minutes = c.max_minutes
        return lambda done: seconds() / (60.0 * minutes)
    per_epoch = math.ceil(len(token_batches(lengths, c.max_tokens, seed=c.seed, epoch=1,
                                            max_sentences=c.max_sentences))
                          / (processes * c.update_freq))
    epochs = c.max_epochs
    assert epochs is not None  # (TrainConfig.check: at least one budget is set)
    return lambda done: done / (per_epoch * epochs)


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: LambdaLR, scale: float,
                   clip_norm: float, update: int) -> tuple[float, float]:
    """Multiplies the accumulated gradients by ``scale``, clips their norm at ``clip_norm`` (0: no
    clipping), then steps the optimizer and its schedule.

    Returns:
        The gradient norm before clipping and the learning rate of the step.

    Raises:
        NonFiniteGradient: the norm is not finite (``update``: the update's number, for the message).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, scale)
    clip = clip_norm if clip_norm > 0 else math.inf
    grad_norm = float(torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], clip))
    if not math.isfinite(grad_norm):
        raise NonFiniteGradient(f"the gradient norm is {grad_norm} at update {update} (lower lr, or set clip_norm)")
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    return grad_norm, lr
