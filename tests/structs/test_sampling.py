"""Exact non-projective tree samples (Sherman-Morrison conditioning) against brute-force
enumeration: plain, masked, extreme scales and the robust completion of untrusted conditionals."""

from __future__ import annotations

import pytest
import torch

import synattn.structs.dependency.matrix_tree_sample as mts
from synattn.structs import NonProjectiveDependencyCRF
from tests.helpers.backends import BACKENDS, on
from tests.helpers.distributions import random_scores, total_variation, tree_log_probs

INF = float("inf")


def noise(log_probs: torch.Tensor, count: int) -> float:
    """1.5 times the expected total variation of ``count`` exact samples, plus 0.01: the
    expected ``|frequency - p|`` of a structure is about ``sqrt(2 p (1 - p) / (π count))``."""
    p = log_probs.exp()
    return 1.5 * 0.5 * float((2 * p * (1 - p) / (torch.pi * count)).sqrt().sum()) + 0.01


def check_samples(scores: torch.Tensor, lengths: list[int], multiroot: bool,
                  count: int = 3000) -> None:
    crf = NonProjectiveDependencyCRF(scores, torch.tensor(lengths), multiroot=multiroot)
    samples = crf.sample(count, generator=torch.Generator().manual_seed(0))
    assert samples.shape == (count, len(lengths), scores.shape[-1] - 1)
    for b, n in enumerate(lengths):
        assert (samples[:, b, n:] == -1).all()
        trees, lp = tree_log_probs(scores[b, :n + 1, :n + 1], n, False, multiroot)
        if not bool((lp > -INF).any()) or bool(lp.isnan().all()):
            assert (samples[:, b] == -1).all()
            continue
        trees, lp = trees[lp > -INF], lp[lp > -INF]
        assert total_variation(samples[:, b, :n], trees, lp) < noise(lp, count)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_samples_follow_the_distribution(backend, multiroot):
    scores = random_scores(11, (3, 5, 5), 0.0, 1.5)
    with on(backend):
        check_samples(scores, [4, 3, 1], multiroot)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_masked_samples_follow_the_distribution(backend, multiroot):
    scores = random_scores(12, (4, 5, 5), 0.3, 1.5)
    scores[1, 0, 1:] = -INF  # no tree at all
    scores[2, :, 2] = -INF
    scores[2, 3, 2] = 0.5  # word 2's head is word 3
    scores[3, 0, 1] = torch.finfo(torch.float64).min  # word 1 cannot be the root child
    with on(backend):
        check_samples(scores, [4, 4, 4, 4], multiroot)


@pytest.mark.parametrize("multiroot", [True, False])
def test_extreme_scales_are_exact(multiroot):
    """Scores ×60 (near-deterministic, cancellation in the inverse) and ×500 (fails the LU
    certificate): samples still follow the exact distribution."""
    for scale in (60.0, 500.0):
        scores = random_scores(13, (2, 5, 5), 0.0, 1.0) * scale
        check_samples(scores, [4, 3], multiroot, count=1000)


@pytest.mark.parametrize("multiroot", [True, False])
def test_untrusted_conditionals_are_completed_exactly(monkeypatch, multiroot):
    """A tolerance no conditional meets sends every sample, at some word, to the robust
    completion: the samples still follow the distribution (the drawn prefix is kept)."""
    monkeypatch.setattr(mts, "TOLERANCE", 1e-17)
    calls = []
    original = NonProjectiveDependencyCRF._continue_sample

    def spy(self, index, out, start, generator):
        calls.append(start.clone())
        return original(self, index, out, start, generator)

    monkeypatch.setattr(NonProjectiveDependencyCRF, "_continue_sample", spy)
    scores = random_scores(14, (2, 5, 5), 0.1, 1.5)
    check_samples(scores, [4, 3], multiroot)
    assert calls and bool((torch.cat(calls) >= 0).all())


def test_long_sentences_use_the_robust_sampler(monkeypatch):
    monkeypatch.setattr(mts, "LAPACK_MAX_N", 3)
    scores = random_scores(15, (1, 4, 4), 0.0, 1.0)
    check_samples(scores, [3], True, count=2000)


def test_sampling_is_seeded_and_cheap():
    crf = NonProjectiveDependencyCRF(torch.randn(3, 31, 31, dtype=torch.float64), multiroot=False)
    a = crf.sample(50, generator=torch.Generator().manual_seed(1))
    b = crf.sample(50, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert bool(torch.isfinite(crf.log_prob(a.flatten(0, 1).view(50, 3, 30)[0])).all())
    assert ((a == 0).sum(-1) == 1).all()  # one root child per tree


@pytest.mark.parametrize("backend", BACKENDS)
def test_tree_crf_kbest_is_the_sorted_brute_force_list(backend):
    from synattn.structs import TreeCRF
    from synattn.structs.cky.crf import spans_to_chart
    from tests.helpers.spans import bracketings, random_batch, tree_scores

    scores, lengths = random_batch(3, [5, 4, 1, 3])
    scores[1, 0, 1] = -INF  # forbidden spans
    scores[1, 2, 3] = -INF
    scores[3, 0, 1] = scores[3, 1, 2] = -INF  # no tree at all
    with on(backend):
        crf = TreeCRF(scores, lengths)
        best, charts = crf.kbest(16)
    assert best.shape == (4, 14) and charts.shape == (4, 14, 5, 5)  # 14 binary trees of 5 words
    for b, n in enumerate(lengths.tolist()):
        s = scores[b].masked_fill(scores[b] <= -1e9, -INF)
        exact = tree_scores(s, n).sort(descending=True).values
        exact = exact[exact > -INF][:16]
        m = len(exact)
        torch.testing.assert_close(best[b, :m], exact, rtol=1e-10, atol=1e-10)
        assert (best[b, m:] == -INF).all() and (charts[b, m:] == 0).all()
        trees = {frozenset(t) for t in bracketings(0, n - 1)}
        found = [frozenset((i, j) for i, j in torch.nonzero(c > 0.5).tolist()) for c in charts[b, :m]]
        assert len(set(found)) == m and set(found) <= trees  # distinct valid bracketings
        rescored = TreeCRF(scores[b:b + 1].expand(m, -1, -1), lengths[b:b + 1].expand(m))
        torch.testing.assert_close(rescored.score(spans_to_chart([sorted(t) for t in found], 5,
                                                                 torch.float64)), best[b, :m])
