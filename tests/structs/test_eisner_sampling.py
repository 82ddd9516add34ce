"""Exact samples of projective trees (:meth:`DependencyCRF.sample`) on both backends: empirical
frequencies of many samples against the tree probabilities of brute-force enumeration, with
ragged lengths, masked arcs, a sentence without a tree and one or several roots; reproducible
draws for a given generator."""

from __future__ import annotations

import math

import pytest
import torch

from synattn.structs import DependencyCRF
from tests.helpers.backends import BACKENDS, on
from tests.helpers.distributions import random_scores, total_variation, tree_log_probs

INF = float("inf")
SAMPLES = 20000


def tv_bound(structures: int) -> float:
    """A bound the total variation of ``SAMPLES`` exact samples exceeds with probability below
    ``1e-4``: its mean is at most ``sqrt(structures / SAMPLES) / 2`` (Cauchy-Schwarz) and one
    sample moves it by at most ``1 / SAMPLES`` (McDiarmid: ``exp(-2 SAMPLES t²) < 1e-4``)."""
    return 0.5 * math.sqrt(structures / SAMPLES) + math.sqrt(math.log(1e4) / (2 * SAMPLES))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_samples_match_the_enumerated_distribution(backend, multiroot):
    lengths = [4, 2, 4, 3, 1]
    scores = random_scores(11, (5, 5, 5), 0.2, 1.5)
    scores[2, 0, 1:] = -INF  # no arc from ROOT: no tree in the third sentence
    with on(backend):
        samples = DependencyCRF(scores, torch.tensor(lengths), multiroot=multiroot).sample(
            SAMPLES, generator=torch.Generator().manual_seed(5))
    assert samples.shape == (SAMPLES, 5, 4) and samples.dtype == torch.long
    assert (samples[:, 2] == -1).all()
    for b, n in enumerate(lengths):
        assert (samples[:, b, n:] == -1).all()
        if b == 2:
            continue
        trees, lp = tree_log_probs(scores[b, :n + 1, :n + 1], n, True, multiroot)
        keep = lp > -INF
        assert int(keep.sum()) >= 1
        # total_variation also fails on a sample that is not one of the possible trees (a masked arc)
        bound = tv_bound(int(keep.sum()))
        assert total_variation(samples[:, b, :n], trees[keep], lp[keep]) < bound
        if int(keep.sum()) > 4:  # the test can tell: uniform over the same trees is far off
            uniform = torch.full((int(keep.sum()),), -math.log(int(keep.sum())), dtype=torch.float64)
            assert total_variation(samples[:, b, :n], trees[keep], uniform) > 2 * bound


@pytest.mark.parametrize("backend", BACKENDS)
def test_samples_follow_sharp_scores(backend):
    """Scores of tens of nats: the walk's weights are ratios of chart entries far from 0."""
    scores = random_scores(3, (2, 5, 5), 0.0, 25.0)
    with on(backend):
        samples = DependencyCRF(scores, multiroot=True).sample(4000, generator=torch.Generator().manual_seed(2))
    for b in range(2):
        trees, lp = tree_log_probs(scores[b], 4, True, True)
        assert total_variation(samples[:, b], trees, lp) < 0.05


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_generator_reproduces_the_samples(backend):
    scores = torch.randn(3, 9, 9)
    lengths = torch.tensor([8, 5, 2])
    with on(backend):
        crf = DependencyCRF(scores, lengths, multiroot=False)
        a = crf.sample(16, generator=torch.Generator().manual_seed(7))
        b = crf.sample(16, generator=torch.Generator().manual_seed(7))
        c = crf.sample(16, generator=torch.Generator().manual_seed(8))
        torch.manual_seed(4)
        d = crf.sample(16)
        torch.manual_seed(4)
        e = crf.sample(16)
    assert torch.equal(a, b) and torch.equal(d, e)
    assert not torch.equal(a, c)  # the draws come from the generator
    roots = (a[:, 0] == 0).sum(-1)
    assert (roots == 1).all()  # single root
