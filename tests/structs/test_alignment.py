"""AlignmentCRF (torch-struct's monotonic alignment) against enumeration of every path."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import AlignmentCRF

MOVES = ((0, (0, 1)), (1, (1, 1)), (2, (1, 0)))


def all_paths(n: int, m: int, local: bool, max_gap: int | None) -> list[list[tuple[int, int, int]]]:
    """Every path as (i, j, op) cells, by depth-first search (torch-struct's enumeration)."""
    out = []

    def ok(i, j):
        return max_gap is None or abs(i - j) <= max_gap

    def extend(path):
        if local or path[-1][:2] == (n - 1, m - 1):
            out.append(path)
        i, j, _ = path[-1]
        for op, (di, dj) in MOVES:
            if i + di < n and j + dj < m and ok(i + di, j + dj):
                extend(path + [(i + di, j + dj, op)])

    for i, j in ([(a, b) for a in range(n) for b in range(m)] if local else [(0, 0)]):
        if ok(i, j):
            extend([(i, j, 1)])
    return out


def brute(s: torch.Tensor, n: int, m: int, local: bool, max_gap=None):
    paths = all_paths(n, m, local, max_gap)
    scores = torch.stack([sum(s[i, j, op] for i, j, op in p) for p in paths])
    log_z = scores.logsumexp(0)
    mu = torch.zeros_like(s)
    for p, q in zip(paths, (scores - log_z).exp()):
        for i, j, op in p:
            mu[i, j, op] += q
    return log_z, mu, scores


@settings(max_examples=10, deadline=None)
@given(local=st.booleans(), n=st.lists(st.integers(1, 3), min_size=1, max_size=2),
       m=st.integers(1, 4), gap=st.sampled_from([None, 1, 2]), seed=st.integers(0, 99))
def test_matches_enumeration(local, n, m, gap, seed):
    B, N = len(n), max(n)
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(B, N, m, 3, generator=gen, dtype=torch.float64)
    crf = AlignmentCRF(s, torch.tensor(n), local=local, max_gap=gap)
    for b in range(B):
        if not all_paths(n[b], m, local, gap):
            assert crf.log_partition[b] == -float("inf") and crf.argmax[b].sum() == 0
            continue
        log_z, mu, scores = brute(s[b], n[b], m, local, gap)
        assert torch.allclose(crf.log_partition[b], log_z)
        assert torch.allclose(crf.marginals[b, :n[b]], mu[:n[b]], atol=1e-9)
        assert torch.allclose(crf.max[b], scores.max())
        assert torch.allclose(crf.score(crf.argmax)[b], scores.max())
        p = (scores - log_z).exp()
        assert torch.allclose(crf.entropy[b], -(p * p.log()).sum(), atol=1e-9)
        top, parts = crf.kbest(4)
        expect = scores.sort(descending=True).values[:4]
        assert torch.allclose(top[b, :len(expect)], expect)
        for r in range(len(expect)):
            assert torch.allclose(crf.score(parts[:, r])[b], expect[r])


@settings(max_examples=8, deadline=None)
@given(local=st.booleans(), n=st.lists(st.integers(1, 3), min_size=2, max_size=2),
       m=st.integers(1, 3), gap=st.sampled_from([None, 1]), masked=st.booleans(),
       seed=st.integers(0, 99))
def test_kbest_lists_every_path_once_best_first(local, n, m, gap, masked, seed):
    """k larger than the number of paths: every path (local: any start and end) exactly once,
    in the order of the sorted enumeration, then padding; masked moves are never used."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(2, max(n), m, 3, generator=gen, dtype=torch.float64)
    if masked:
        s[torch.rand(s.shape, generator=gen) < 0.2] = -float("inf")
    crf = AlignmentCRF(s, torch.tensor(n), local=local, max_gap=gap)
    k = len(all_paths(max(n), m, True, None)) + 2
    top, parts = crf.kbest(k)
    for b in range(2):
        paths = all_paths(n[b], m, local, gap)
        scores = torch.stack([sum(s[b, i, j, op] for i, j, op in p) for p in paths]) if paths \
            else torch.zeros(0, dtype=torch.float64)
        expect = scores[scores > -float("inf")].sort(descending=True).values
        assert torch.allclose(top[b, :len(expect)], expect)
        assert (top[b, len(expect):] == -float("inf")).all() and parts[b, len(expect):].sum() == 0
        listed = {tuple(parts[b, r].flatten().tolist()) for r in range(len(expect))}
        assert len(listed) == len(expect)  # distinct paths
        for r in range(len(expect)):
            assert torch.allclose(crf.score(parts[:, r])[b], expect[r])


def test_kbest_when_a_round_holds_only_shorter_pairs():
    """After its first path the 3 x 1 pair has none left, so later rounds solve the 2 x 3 pair
    alone, padded to N = 3 (its subproblem's lengths do not set the grid's size)."""
    s = torch.randn(2, 3, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    crf = AlignmentCRF(s, torch.tensor([2, 3]), torch.tensor([3, 1]))
    top, _ = crf.kbest(6)
    _, _, scores = brute(s[0], 2, 3, False)
    assert top.shape == (2, 5)  # the most paths any pair has
    assert torch.allclose(top[0], scores.sort(descending=True).values)
    assert top[1, 0] > -float("inf") and (top[1, 1:] == -float("inf")).all()


def test_kbest_beyond_the_only_path():
    """One column (``m = 1``) has one global path; the subspaces left after it have none, and
    their traceback stops instead of walking off the grid."""
    s = torch.randn(1, 3, 1, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    crf = AlignmentCRF(s, torch.tensor([3]))
    top, parts = crf.kbest(4)
    assert torch.allclose(top[0, 0], crf.max[0]) and torch.equal(parts[0, 0], crf.argmax[0])
    assert (top[0, 1:] == -float("inf")).all() and parts[0, 1:].sum() == 0


@pytest.mark.parametrize("local", [False, True])
def test_samples_have_the_marginals_and_log_prob_normalises(local):
    s = torch.randn(2, 3, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    crf = AlignmentCRF(s, torch.tensor([3, 2]), torch.tensor([3, 3]), local=local)
    draws = crf.sample(3000, generator=torch.Generator().manual_seed(0))
    assert draws.shape == (3000, 2, 3, 3, 3)
    assert torch.allclose(draws.mean(0), crf.marginals, atol=0.04)
    log_z, _, scores = brute(s[1], 2, 3, local)
    assert torch.allclose(crf.log_prob(draws[0])[1], crf.score(draws[0])[1] - log_z)
    assert torch.allclose(torch.logsumexp(scores - log_z, 0), torch.zeros((), dtype=torch.float64))


def test_masks_gradients_and_errors():
    s = torch.randn(1, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    crf = AlignmentCRF(s)
    (g,) = torch.autograd.grad(crf.log_partition.sum(), s)
    assert torch.allclose(g, crf.marginals)
    masked = s.detach().clone()
    masked[0, :, :, 1] = -float("inf")  # no matches: no path (the first cell is a match)
    none = AlignmentCRF(masked)
    assert none.log_partition.item() == -float("inf") and none.argmax.sum() == 0
    assert (none.marginals == 0).all()
    with pytest.raises(ValueError, match=r"\[B, N, M, 3\]"):
        AlignmentCRF(torch.randn(1, 3, 3))
    with pytest.raises(ValueError, match="max_gap"):
        AlignmentCRF(torch.randn(1, 3, 3, 3), max_gap=-1)


@pytest.mark.parametrize("shape", [(2, 1, 1), (2, 3, 3), (3, 4, 6), (1, 2, 7)])
def test_matches_torch_struct_where_it_runs(shape):
    """Global alignments at full lengths: log Z and marginals equal torch-struct 0.5's parallel
    scan (which runs on CPU through genbmm's reference loops; genbmm is not on PyPI, so this runs
    where it was installed from its source). Its loops sum in float32, hence the tolerance."""
    pytest.importorskip("genbmm")
    torch_struct = pytest.importorskip("torch_struct")
    s = torch.randn(*shape, 3, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(sum(shape)))
    peer = torch_struct.AlignmentCRF(s.clone().requires_grad_())
    ours = AlignmentCRF(s)
    assert torch.allclose(ours.log_partition, peer.partition.detach(), atol=1e-6)
    assert torch.allclose(ours.marginals, peer.marginals.detach(), atol=1e-6)
