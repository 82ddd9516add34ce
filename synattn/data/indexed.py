"""Binarised, memory-mapped storage of variable-length integer sequences.

A field of a split is two ``.npy`` files: ``NAME.data.npy`` (all sequences concatenated) and
``NAME.offsets.npy`` (``[count + 1]`` start offsets). Reading memory-maps the data, so a dataset
larger than memory costs nothing until it is indexed; ``np.load`` is called with
``allow_pickle=False``, so loading never executes code.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from synattn.io import atomic_write


def write_field(folder: str | Path, name: str, sequences: Sequence[np.ndarray], dtype=np.int32) -> None:
    """Write ``sequences`` as the field ``name`` of ``folder`` (each file atomically)."""
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # [count + 1]
    data = np.concatenate([np.asarray(s, dtype=dtype) for s in sequences]) if len(sequences) else \
        np.zeros(0, dtype=dtype)
    for suffix, array in (("data", data), ("offsets", offsets)):
        with atomic_write(Path(folder) / f"{name}.{suffix}.npy", "wb") as f:
            np.save(f, array, allow_pickle=False)


class IndexedField:
    """Read-only, memory-mapped view of one field: ``field[i]`` is the i-th sequence."""

    def __init__(self, folder: str | Path, name: str):
        folder = Path(folder)
        self.name = name
        self.data = np.load(folder / f"{name}.data.npy", mmap_mode="r", allow_pickle=False)
        self.offsets = np.load(folder / f"{name}.offsets.npy", allow_pickle=False)
        if self.offsets.ndim != 1 or len(self.offsets) == 0 or self.offsets[-1] != len(self.data):
            raise ValueError(f"{folder / name}: offsets do not match the data (corrupt dataset?)")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return np.asarray(self.data[self.offsets[i]: self.offsets[i + 1]])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)
