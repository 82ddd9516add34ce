"""A tiny translation model and copy-task pairs for the tests of the models' features."""

from __future__ import annotations

import numpy as np

from synattn.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
)

TINY = dict(d_model=16, heads=2, ffn_dim=32, dropout=0.0)


VOCAB = 20


def tiny_mt(**stacks) -> EncoderDecoderTransformer:
    return EncoderDecoderTransformer(EncoderDecoderConfig.from_dict(
        dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **stacks)))


def copy_pairs(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids = rng.integers(4, VOCAB, int(rng.integers(2, 7))).astype(np.int32)
        out.append({"src_ids": ids, "tgt_ids": ids[::-1].copy()})
    return out
