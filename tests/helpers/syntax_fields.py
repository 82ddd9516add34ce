"""A syntax field defined by the tests alone: each piece's depth in its dependency tree."""

from __future__ import annotations

import numpy as np

from synattn.syntax.fields import (
    TreeBatch,
)


def piece_depths(trees: TreeBatch) -> list[np.ndarray]:
    """Each piece's depth in its tree (the root piece 1, its dependents 2, …); 0 outside."""
    out = []
    for heads in trees.heads:
        depth, node = np.zeros(len(heads), np.int64), np.arange(1, len(heads) + 1)  # 1-based
        while (node > 0).any():
            depth += node > 0
            node = np.where(node > 0, heads[np.maximum(node, 1) - 1], 0)
        out.append(np.concatenate([np.zeros(trees.offset, np.int64), depth]))
    return out
