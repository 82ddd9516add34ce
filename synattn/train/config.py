"""``TrainConfig``: every setting of a training run, strictly validated, loadable from YAML.

Unknown keys and values of the wrong type are errors naming the key (the same strict conversion
as the model configs, :mod:`synattn.config_io`). Example ``train:`` section::

    max_tokens: 4096
    max_epochs: 20
    lr: 0.0005
    warmup_updates: 4000
    label_smoothing: 0.1
    clip_norm: 1.0
    update_freq: 2
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synattn.config_bounds import MAX_EPOCHS, MAX_LR, MAX_MINUTES, MAX_SEED, MAX_STEPS, at_most, within
from synattn.config_io import StrictConfig
from synattn.errors import ConfigError

BATCH_ORDER_KEYS = ("max_tokens", "max_sentences", "seed")
SCHEDULES = ("inverse_sqrt", "cosine", "linear")
HIGHER_IS_BETTER = ("bleu", "chrf", "uas", "acc", "f1")
"""Validation metrics whose name starts with one of these are better when larger."""
"""Settings that decide the batch lists of every epoch; a resumed run must keep them."""


@dataclass
class TrainConfig(StrictConfig):
    """Settings of :class:`synattn.train.Trainer`.

    Attributes:
        max_tokens: bound on ``batch_size × longest example`` of each batch (padded tokens).
        max_sentences: optional bound on the number of examples in a batch.
        max_epochs, max_steps, max_minutes: stop at whichever comes first (at least one is set);
            ``max_minutes`` counts training wall time over all resumed parts of the run.
        lr: peak learning rate (reached at the end of the warm-up).
        betas, eps, weight_decay: AdamW settings (decay applied to every parameter).
        warmup_updates: linear warm-up length (0: none).
        schedule: what follows the warm-up: ``inverse_sqrt`` decays as ``1/sqrt(step)`` (Vaswani
            et al. 2017, §5.3, scaled so the peak is ``lr``; constant without warm-up);
            ``cosine`` or ``linear`` decay to ``min_lr_ratio × lr`` at the end of the budget:
            ``max_steps`` when set, else ``max_minutes`` (the fraction of training minutes used),
            else ``max_epochs``. A budget in minutes suits runs that must end on time on any
            machine; a budget in updates gives runs that repeat exactly.
        min_lr_ratio: the rate at the end of a ``cosine``/``linear`` schedule, as a fraction of ``lr``.
        label_smoothing: ε of the label-smoothed cross-entropy of the tasks (Szegedy et al. 2016).
        clip_norm: clip the global gradient norm to this value (0: no clipping).
        bf16: run forward and loss under ``torch.autocast(dtype=bfloat16)`` (CPU and CUDA).
        update_freq: accumulate the gradients of this many batches per update (per process).
        seed: seed of the batch order, dropout and masking.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        num_workers: processes that build the batches (padding, relation labels, supervision
            targets) ahead of the training loop (:func:`synattn.data.loader.collated`); 0: the loop
            builds each batch itself. The batches are the same either way. On CUDA the batches
            are pinned and copied to the device without blocking.
        log_interval: log training statistics every this many updates.
        validate_interval: validate every this many epochs (0: never at epoch ends).
        validate_interval_updates: also validate every this many updates (0: off).
        save_interval: save a checkpoint every this many epochs (0: only at the end of the run).
        save_interval_updates: also save every this many updates (0: off).
        keep_last_n: numbered checkpoints kept besides ``best`` (None: keep all).
        snapshot_interval_updates: also write the weights alone every this many updates to
            ``RUN/snapshots/ckpt_NNNNNN`` (never pruned, not resumable; for evaluating a run along
            its training, e.g. the trees of a Tree Transformer; 0: off).
        best_metric: the validation metric that picks the ``best`` checkpoint: ``task_loss`` (the
            task's own loss, without auxiliary losses; the default), ``loss`` (with them),
            ``nll_loss``, or a metric of the run's validation hook such as ``bleu`` or ``chrf``
            (higher is better for ``bleu``, ``chrf`` and names starting with ``uas``/``acc``/``f1``).
        progress_bar: show a progress bar with loss and tokens/s.
        tensorboard: also write TensorBoard events when the ``tensorboard`` package is installed.
    """

    max_tokens: int = 4096
    max_sentences: int | None = None
    max_epochs: int | None = 10
    max_steps: int | None = None
    max_minutes: float | None = None
    lr: float = 5e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_updates: int = 4000
    schedule: str = "inverse_sqrt"
    min_lr_ratio: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0
    bf16: bool = False
    update_freq: int = 1
    seed: int = 1
    device: str = "auto"
    num_workers: int = 0
    log_interval: int = 100
    validate_interval: int = 1
    validate_interval_updates: int = 0
    save_interval: int = 1
    save_interval_updates: int = 0
    keep_last_n: int | None = 5
    snapshot_interval_updates: int = 0
    best_metric: str = "task_loss"
    progress_bar: bool = True
    tensorboard: bool = True

    def check(self) -> None:
        """Checks ranges; raises :class:`ConfigError` (a ``ValueError``) naming the key."""
        positive = ["max_tokens", "update_freq", "log_interval"]
        positive += [k for k in ("max_sentences", "max_epochs", "max_steps", "keep_last_n")
                     if getattr(self, k) is not None]
        for key in positive:
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}={getattr(self, key)} must be at least 1")
        for key in ("num_workers", "warmup_updates", "validate_interval", "validate_interval_updates",
                    "save_interval", "save_interval_updates", "snapshot_interval_updates"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} must be 0 (off) or positive")
        if self.max_epochs is None and self.max_steps is None and self.max_minutes is None:
            raise ConfigError("set at least one of max_epochs, max_steps, max_minutes")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"max_minutes={self.max_minutes} must be positive")
        if self.lr <= 0:
            raise ConfigError(f"lr={self.lr} must be positive")
        at_most("lr", self.lr, MAX_LR, "a larger rate only diverges")
        at_most("eps", self.eps, 1.0)
        at_most("weight_decay", self.weight_decay, 10.0)
        at_most("max_epochs", self.max_epochs, MAX_EPOCHS)
        for key in ("max_steps", "warmup_updates"):
            at_most(key, getattr(self, key), MAX_STEPS)
        at_most("max_minutes", self.max_minutes, MAX_MINUTES, "ten years")
        within("seed", self.seed, 0, MAX_SEED, "seeds are unsigned 32-bit integers")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"betas={self.betas} must be two numbers in [0, 1)")
        for key in ("eps", "weight_decay", "clip_norm"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} must not be negative")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing={self.label_smoothing} must be in [0, 1)")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule={self.schedule!r}: use one of {', '.join(SCHEDULES)}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        if not self.best_metric:
            raise ConfigError("best_metric must name a validation metric (e.g. task_loss)")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device={self.device!r}: use 'auto', 'cpu' or 'cuda'")

