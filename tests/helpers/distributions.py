"""Log-probabilities of every structure of a tiny sentence, random masked scores, and the distance
of samples from a distribution."""

from __future__ import annotations

import itertools

import torch

from synattn.structs import DependencyCRF, NonProjectiveDependencyCRF
from tests.helpers.trees import all_trees

INF = float("inf")


def tree_log_probs(scores: torch.Tensor, n: int, projective: bool, multiroot: bool,
                   masked: float = -INF):
    """All trees ``[T, n]`` of one sentence and their log-probabilities ``[T]`` (differentiable;
    give a finite ``masked`` for gradients)."""
    trees = torch.from_numpy(all_trees(n, projective, multiroot))
    s = torch.where(scores <= -1e9, masked, scores)
    tree_scores = s[trees, torch.arange(1, n + 1)].sum(1)
    return trees, tree_scores - torch.logsumexp(tree_scores, 0)


def chain_log_probs(unary: torch.Tensor, trans: torch.Tensor, n: int, masked: float = -INF):
    C = unary.shape[-1]
    ys = torch.tensor(list(itertools.product(range(C), repeat=n)))
    u = torch.where(unary <= -1e9, masked, unary)
    t = torch.where(trans <= -1e9, masked, trans)
    scores = u[torch.arange(n), ys].sum(1) + t[ys[:, :-1], ys[:, 1:]].sum(1)
    return ys, scores - torch.logsumexp(scores, 0)


TREES = [(DependencyCRF, True), (NonProjectiveDependencyCRF, False)]


def random_scores(seed, shape, p_mask, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64) * scale
    return x.masked_fill(torch.rand(*shape, generator=gen) < p_mask, -INF)


def total_variation(samples: torch.Tensor, structures: torch.Tensor, log_probs: torch.Tensor) -> float:
    """TV distance between the empirical distribution of ``samples [S, n]`` and ``exp(log_probs)``
    over ``structures [T, n]`` (a sample outside the list counts as mass on a missing one)."""
    hits = (samples.unsqueeze(1) == structures.unsqueeze(0)).all(-1)  # [S, T]
    assert bool(hits.any(1).all()), "a sample that is not a valid structure"
    freq = hits.double().mean(0)
    return 0.5 * (freq - log_probs.exp()).abs().sum().item()
