"""Dependency trees by enumeration: every (projective) tree of a tiny sentence, the brute-force CRF
quantities, score batches with junk outside the sentence."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import torch


def _is_tree(heads: tuple[int, ...]) -> bool:
    for d in range(1, len(heads) + 1):
        seen, v = set(), d
        while v != 0:
            if v in seen:
                return False
            seen.add(v)
            v = heads[v - 1]
    return True


def _is_projective(heads: tuple[int, ...]) -> bool:
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads, 1)]
    return not any(a < c < b < e for a, b in arcs for c, e in arcs)


@cache
def all_trees(n: int, projective: bool, multiroot: bool) -> np.ndarray:
    """Every tree over ``n`` words as heads ``[T, n]`` (explicit search over all head sequences)."""
    out = []
    for heads in itertools.product(range(n + 1), repeat=n):
        if any(h == d for d, h in enumerate(heads, 1)) or not _is_tree(heads):
            continue
        if projective and not _is_projective(heads):
            continue
        if not multiroot and sum(h == 0 for h in heads) != 1:
            continue
        out.append(heads)
    return np.array(out, dtype=np.int64).reshape(len(out), n)


def brute_force(scores: torch.Tensor, n: int, projective: bool, multiroot: bool):
    """log Z, arc marginals ``[n+1, n+1]`` and the best score for one sentence."""
    trees = torch.from_numpy(all_trees(n, projective, multiroot))  # [T, n]
    deps = torch.arange(1, n + 1)
    tree_scores = scores[trees, deps].sum(1)  # [T]
    log_z = torch.logsumexp(tree_scores, 0)
    prob = (tree_scores - log_z).exp()
    marginals = scores.new_zeros(scores.shape)
    marginals.index_put_((trees.flatten(), deps.repeat(len(trees))),
                         prob.repeat_interleave(n), accumulate=True)
    return log_z, marginals, tree_scores.max()


def random_batch(seed: int, lengths: list[int], scale: float, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    scores = torch.randn(len(lengths), n + 1, n + 1, generator=gen, dtype=dtype) * scale
    return scores, torch.tensor(lengths)


def dirty_scores(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``scores`` with NaN/inf past each length, NaN arcs into ROOT and huge self-loops: entries
    that no tree uses, which must change nothing."""
    dirty = scores.clone()
    for b, n in enumerate(lengths.tolist()):
        dirty[b, n + 1:] = float("nan")
        dirty[b, :, n + 1:] = float("inf")
    dirty[:, :, 0] = float("nan")  # arcs into ROOT
    dirty.diagonal(dim1=1, dim2=2).fill_(1e30)  # self-loops
    return dirty


def check_log_z_bounds(log_z: torch.Tensor, best: torch.Tensor, lengths: torch.Tensor) -> None:
    """log Z is at least the best tree's score and at most that plus log(#trees) (< n log(n+1))."""
    slack = 1e-6 * best.abs() + 1e-2
    assert (log_z >= best - slack).all()
    assert (log_z <= best + lengths * torch.log(lengths + 1.0) + slack).all()
