"""Shared pieces of the training tests (no tests here): synthetic data, a tiny model, a runner.

The torchrun test runs this file as a script (:func:`main`, with a JSON description of the run), so
it imports nothing from the tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from synattn.data.subwords import PAD
from synattn.train import TrainConfig, Trainer, TranslationTask, read_log

VOCAB = 24


class SyntheticPairs:
    """A copy-reverse task: the target is the source reversed (learnable by the tiny model)."""

    folder = "<synthetic>"  # named in collate's messages

    def __init__(self, size: int, seed: int = 0, max_len: int = 9):
        rng = np.random.default_rng(seed)
        self.src = [rng.integers(4, VOCAB, size=rng.integers(2, max_len)).astype(np.int32) for _ in range(size)]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"src_ids": self.src[i], "tgt_ids": self.src[i][::-1].copy()}

    def lengths(self) -> np.ndarray:
        return np.array([len(s) + 1 for s in self.src])


class TinyTranslator(nn.Module):
    """Mean-pooled source + target embedding → MLP → logits; one auxiliary loss (weight decay-like)."""

    def __init__(self, d: int = 16, dropout: float = 0.1, aux_weight: float = 0.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.src_embed = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.positions = nn.Embedding(64, d)
        self.hidden = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, VOCAB)
        self.dropout = nn.Dropout(dropout)
        self.aux_weight = aux_weight

    def forward(self, src, tgt, src_syntax=None, tgt_syntax=None):
        keep = (src != PAD).float()[..., None]  # [B, n, 1]
        pooled = (self.src_embed(src) * keep).sum(1) / keep.sum(1)  # [B, d]
        pos = self.positions(torch.arange(tgt.shape[1], device=tgt.device))  # [m, d]
        h = self.dropout(self.tgt_embed(tgt) + pos + pooled[:, None])  # [B, m, d]
        logits = self.out(self.dropout(torch.relu(self.hidden(h))))  # [B, m, V]
        losses = {"encoder.0.toy": self.aux_weight * self.hidden.weight.pow(2).mean()} if self.aux_weight else {}
        return SimpleNamespace(logits=logits, losses=losses)


def config(**overrides) -> TrainConfig:
    base = dict(max_tokens=40, max_epochs=2, lr=0.01, warmup_updates=4, log_interval=1,
                label_smoothing=0.1, progress_bar=False, tensorboard=False, seed=3)
    base.update(overrides)
    return TrainConfig.from_dict(base)


def make_trainer(run_dir, cfg: TrainConfig, *, model_seed: int = 0, dropout: float = 0.1,
                 aux_weight: float = 0.0, train_size: int = 48, task=None, **kwargs) -> Trainer:
    model = TinyTranslator(dropout=dropout, aux_weight=aux_weight, seed=model_seed)
    return Trainer(model, task or TranslationTask(cfg.label_smoothing), cfg, SyntheticPairs(train_size),
                   run_dir, valid_data=SyntheticPairs(12, seed=1), **kwargs)


class Crash(Exception):
    pass


class CrashingTask(TranslationTask):
    """Raises on its ``at``-th training batch (validation batches are not counted)."""

    def __init__(self, label_smoothing: float, at: int):
        super().__init__(label_smoothing)
        self.at, self.calls = at, 0

    def loss(self, model, batch):
        if model.training:
            self.calls += 1
            if self.calls == self.at:
                raise Crash
        return super().loss(model, batch)


def logged_losses(run_dir, kind: str = "train") -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_log(run_dir, kind)]


def assert_same_run(a, b) -> None:
    for kind in ("train", "valid"):
        la, lb = logged_losses(a.run_dir, kind), logged_losses(b.run_dir, kind)
        assert [s for s, _ in la] == [s for s, _ in lb], kind
        np.testing.assert_allclose([x for _, x in lb], [x for _, x in la], rtol=1e-6, atol=0)
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7, msg=name)


def main(argv: list[str]) -> None:
    """``python tests/helpers/training.py RUN_DIR JSON`` (torchrun runs the file as a script)."""
    run_dir, spec = Path(argv[0]), json.loads(argv[1])
    torch.set_num_threads(1)
    trainer = make_trainer(run_dir, config(**spec["config"]), model_seed=spec.get("model_seed", 0),
                           dropout=spec.get("dropout", 0.1), train_size=spec.get("train_size", 48))
    print("training", flush=True)
    trainer.train(resume=spec.get("resume", False))
    if spec.get("params_out"):
        path = Path(spec["params_out"]) / f"rank{trainer.dist.rank}.pt"
        torch.save({k: v.detach().cpu() for k, v in trainer.model.state_dict().items()}, path)
    trainer.close()


if __name__ == "__main__":
    main(sys.argv[1:])
