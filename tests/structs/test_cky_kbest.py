"""The compiled k-best CKY pass of TreeCRF (unlabelled and labelled spans) against the enumeration
of every (labelled) bracketing and against Lawler's scheme, which the other backends keep."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.structs import TreeCRF
from synattn.structs.backend import use_backend
from synattn.structs.cky import kbest as cky_kbest
from tests.helpers.spans import bracketings

pytest.importorskip("numba")

INF = float("inf")


def enumerate_trees(scores: torch.Tensor, n: int) -> list[tuple[float, frozenset]]:
    """Every labelled bracketing of ``n`` words under ``scores [N, N, L]`` (``<= -1e9``: forbidden)
    with its score, as ``(score, {(i, j, label)})``; the trees with a forbidden span left out."""
    out = []
    for tree in bracketings(0, n - 1):
        for labels in itertools.product(range(scores.shape[-1]), repeat=len(tree)):
            parts = frozenset((i, j, label) for (i, j), label in zip(tree, labels))
            values = [float(scores[i, j, label]) for i, j, label in parts]
            if min(values) > -1e9:
                out.append((sum(values), parts))
    return out


def parts_of(chart: torch.Tensor) -> frozenset:
    return frozenset(tuple(p) for p in torch.nonzero(chart > 0.5).tolist())


def check_against_enumeration(scores: torch.Tensor, lengths: list[int], k: int, labelled: bool):
    """``kbest(k)`` of the compiled pass lists exactly the best ``k`` trees of the enumeration, best
    first: each listed chart is a distinct allowed tree with the listed score, the scores are the
    ``k`` largest, and every tree strictly better than the last listed one is listed."""
    with use_backend("numba"):
        crf = TreeCRF(scores if labelled else scores[..., 0], torch.tensor(lengths))
        best, charts = crf.kbest(k)
        first = crf.argmax, crf.max
    if not labelled:
        charts = charts.unsqueeze(-1)
    trees = [enumerate_trees(scores[b], n) for b, n in enumerate(lengths)]
    width = k if any(len(t) >= k for t in trees) else max(len(t) for t in trees)
    assert best.shape == (len(lengths), width) and best.dtype == torch.float64
    assert charts.shape == (len(lengths), width, *scores.shape[1:]) and charts.dtype == scores.dtype
    for b, listed in enumerate(trees):
        exact = sorted((s for s, _ in listed), reverse=True)[:k]
        m = len(exact)
        torch.testing.assert_close(best[b, :m], torch.tensor(exact, dtype=torch.float64), rtol=0, atol=1e-12)
        assert (best[b, m:] == -INF).all() and (charts[b, m:] == 0).all()
        by_parts = dict((p, s) for s, p in listed)
        found = [parts_of(c) for c in charts[b, :m]]
        assert len(set(found)) == m and all(p in by_parts for p in found)  # distinct allowed trees
        torch.testing.assert_close(torch.tensor([by_parts[p] for p in found], dtype=torch.float64),
                                   best[b, :m], rtol=0, atol=1e-12)
        if m:
            better = {p for s, p in listed if s > float(best[b, m - 1]) + 1e-9}
            assert better <= set(found)  # ties at the cut aside, the list is the top of the ranking
            chart = first[0][b] if labelled else first[0][b].unsqueeze(-1)
            assert torch.equal(charts[b, 0], chart) and float(best[b, 0]) == float(first[1][b])
        else:
            assert float(first[1][b]) == -INF


def random_scores(seed: int, lengths: list[int], labels: int, mask: float = 0.0, ties: bool = False,
                  dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    N = max(lengths)
    if ties:  # few distinct values: many trees share a score
        scores = torch.randint(-1, 2, (len(lengths), N, N, labels), generator=gen).to(dtype)
    else:
        scores = torch.randn(len(lengths), N, N, labels, generator=gen, dtype=dtype)
    return scores.masked_fill(torch.rand(scores.shape, generator=gen) < mask, -INF)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 3, 16, 60])
def test_unlabelled_kbest_is_the_enumerated_ranking(seed, k):
    lengths = [5, 1, 2, 4, 3][: 3 + seed % 3]
    scores = random_scores(seed, lengths, 1, mask=0.1 * (seed % 3))
    check_against_enumeration(scores, lengths, k, labelled=False)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [1, 4, 30])
def test_unlabelled_kbest_with_ties(seed, k):
    lengths = [5, 4, 2, 1]
    check_against_enumeration(random_scores(10 + seed, lengths, 1, ties=True), lengths, k, labelled=False)
    zeros = torch.zeros(2, 5, 5, 1, dtype=torch.float64)  # every tree ties
    check_against_enumeration(zeros, [5, 3], k, labelled=False)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [1, 5, 200])
def test_labelled_kbest_is_the_enumerated_ranking(seed, k):
    lengths = [3, 1, 2, 4][: 2 + seed]
    labels = 2 if max(lengths) == 4 else 3
    check_against_enumeration(random_scores(20 + seed, lengths, labels, mask=0.2, ties=seed == 1),
                              lengths, k, labelled=True)


def test_sentences_without_a_tree_and_forbidden_spans():
    scores = random_scores(30, [4, 4, 3, 2], 1)
    scores[0, 0, 1] = scores[0, 2, 3] = -INF  # forbidden spans, trees remain
    scores[1, 0, 0] = -INF  # a forbidden word: no tree
    scores[2, 0, 1] = scores[2, 1, 2] = -INF  # every split of the sentence blocked: no tree
    scores[3, 1, 1] = torch.finfo(torch.float64).min  # a mask of another spelling
    check_against_enumeration(scores, [4, 4, 3, 2], 6, labelled=False)
    labelled = random_scores(31, [3, 2], 2)
    labelled[0, 0, 2] = -INF  # the whole sentence has no label left: no tree
    labelled[1, 0, 0, 0] = -INF  # one label of a word forbidden
    check_against_enumeration(labelled, [3, 2], 5, labelled=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_pass_equals_lawlers_scheme(dtype):
    """The same scores bit for bit (both round float64 sums to the scores' dtype) and, where the
    scores of a list are distinct, the same trees in the same order."""
    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(6, 9, 9, generator=gen, dtype=dtype)
    scores[2, 1, 4] = scores[3, 0, 2] = -INF
    crf = TreeCRF(scores, torch.tensor([9, 7, 1, 2, 6, 9]))
    with use_backend("numba"):
        got = crf.kbest(12)
        want = cky_kbest.tree_kbest_lawler(crf, 12)
    assert torch.equal(got[0], want[0])
    distinct = got[0][:, :-1] > got[0][:, 1:]
    assert distinct[[0, 1, 4, 5], :4].all()  # (rows 2 and 3: one tree each)
    for b in range(6):
        m = int(torch.isfinite(got[0][b]).sum())
        if distinct[b, :m - 1].all():
            assert torch.equal(got[1][b], want[1][b])
    labelled = torch.randn(3, 5, 5, 3, generator=gen, dtype=dtype)
    labelled[0, 1, 3, :2] = -INF
    lab = TreeCRF(labelled, torch.tensor([5, 4, 2]))
    with use_backend("numba"):
        got = lab.kbest(9)
    with use_backend("torch"):
        want = lab.kbest(9)  # Lawler's scheme over (span, label) pairs on the PyTorch path
    torch.testing.assert_close(got[0], want[0], rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=0)
    assert torch.equal(got[1], want[1])


def test_other_backends_keep_lawlers_scheme(monkeypatch):
    calls = []
    real = cky_kbest.compiled_kbest
    monkeypatch.setattr(cky_kbest, "compiled_kbest", lambda *a: calls.append(1) or real(*a))
    gen = torch.Generator().manual_seed(3)
    crf = TreeCRF(torch.randn(2, 4, 4, generator=gen, dtype=torch.float64), torch.tensor([4, 3]))
    lab = TreeCRF(torch.randn(2, 4, 4, 2, generator=gen, dtype=torch.float64), torch.tensor([4, 3]))
    with use_backend("torch"):
        slow = crf.kbest(3), lab.kbest(3)
    assert not calls
    with use_backend("numba"):
        fast = crf.kbest(3), lab.kbest(3)
    assert len(calls) == 2
    for (a, x), (b, y) in zip(slow, fast):
        torch.testing.assert_close(a, b)
        assert torch.equal(x, y)


def test_empty_batches_and_large_k():
    with use_backend("numba"):
        best, charts = TreeCRF(torch.randn(0, 4, 4)).kbest(3)
        assert best.shape == (0, 0) and charts.shape == (0, 0, 4, 4)
        best, charts = TreeCRF(torch.randn(2, 4, 4), torch.tensor([4, 2])).kbest(10 ** 6)
        assert best.shape == (2, 5) and charts.shape == (2, 5, 4, 4)  # 5 trees of 4 words, 1 of 2
        assert torch.isfinite(best[0]).all() and torch.isinf(best[1, 1:]).all()
        best, charts = TreeCRF(torch.randn(1, 12, 12)).kbest(10 ** 5)  # 58786 trees of 12 words
        assert best.shape == (1, 58786) and (best[0, :-1] >= best[0, 1:]).all()
        assert len({tuple(c.flatten().tolist()) for c in charts[0, ::97]}) == len(charts[0, ::97])
