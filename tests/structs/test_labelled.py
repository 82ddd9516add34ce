"""Labelled arcs (scores ``[B, n+1, n+1, R]``) on both dependency CRFs, against enumeration of
every labelled tree and against torch-struct's labelled ``DependencyCRF``."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import DependencyCRF, NonProjectiveDependencyCRF
from synattn.structs.convert import arcs_to_torch_struct
from tests.helpers.trees import all_trees

CRFS = {"projective": DependencyCRF, "nonprojective": NonProjectiveDependencyCRF}


def labelled_trees(n: int, R: int, projective: bool, multiroot: bool) -> torch.Tensor:
    """Every labelled tree over ``n`` words, ``[T, n, 2]``."""
    out = [torch.stack((torch.tensor(h), torch.tensor(lab)), -1)
           for h in all_trees(n, projective, multiroot).tolist()
           for lab in itertools.product(range(R), repeat=n)]
    return torch.stack(out)


def brute(scores: torch.Tensor, n: int, projective: bool, multiroot: bool):
    """log Z, labelled marginals, best score, all trees and their scores for one sentence."""
    trees = labelled_trees(n, scores.shape[-1], projective, multiroot)
    deps = torch.arange(1, n + 1)
    tree_scores = scores[trees[..., 0], deps, trees[..., 1]].sum(1)  # [T]
    log_z = torch.logsumexp(tree_scores, 0)
    mu = torch.zeros_like(scores)
    prob = (tree_scores - log_z).exp()
    mu.index_put_((trees[..., 0].flatten(), deps.repeat(len(trees)), trees[..., 1].flatten()),
                  prob.repeat_interleave(n), accumulate=True)
    return log_z, mu, tree_scores, trees


@settings(max_examples=8, deadline=None)
@given(kind=st.sampled_from(sorted(CRFS)), multiroot=st.booleans(),
       lengths=st.lists(st.integers(1, 3), min_size=1, max_size=3), R=st.integers(1, 3),
       seed=st.integers(0, 99))
def test_matches_enumeration_of_labelled_trees(kind, multiroot, lengths, R, seed):
    n = max(lengths)
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(len(lengths), n + 1, n + 1, R, generator=gen, dtype=torch.float64) * 2
    crf = CRFS[kind](scores, torch.tensor(lengths), multiroot=multiroot)
    assert isinstance(crf, CRFS[kind]) and crf.marginals.shape == scores.shape
    best = crf.argmax
    assert best.shape == (len(lengths), n, 2)
    k = 3
    top_scores, top = crf.kbest(k)
    for b, m in enumerate(lengths):
        log_z, mu, tree_scores, trees = brute(scores[b, :m + 1, :m + 1], m, kind == "projective",
                                              multiroot)
        assert torch.allclose(crf.log_partition[b], log_z)
        assert torch.allclose(crf.marginals[b, :m + 1, :m + 1], mu, atol=1e-9)
        assert torch.allclose(crf.max[b].double(), tree_scores.max())
        assert torch.allclose(crf.score(best)[b], tree_scores.max())
        assert (best[b, m:] == -1).all()
        expect = tree_scores.sort(descending=True).values[:k]
        assert torch.allclose(top_scores[b, :len(expect)], expect)
        assert torch.allclose(crf.score(top[:, 0])[b], expect[0])
        # log_prob of every labelled tree against its enumerated probability
        pad = torch.full((len(trees), n - m, 2), -1)
        full = torch.cat((trees, pad), 1)
        one = CRFS[kind](scores[b:b + 1].expand(len(trees), -1, -1, -1),
                         torch.tensor([m] * len(trees)), multiroot=multiroot)
        assert torch.allclose(one.log_prob(full), tree_scores - log_z)
        h = -((tree_scores - log_z).exp() * (tree_scores - log_z)).sum()
        assert torch.allclose(crf.entropy[b], h, atol=1e-9)


def test_one_label_is_the_unlabelled_crf_and_gradients_flow():
    scores = torch.randn(2, 5, 5, 1, dtype=torch.float64, requires_grad=True)
    for cls in CRFS.values():
        lab, plain = cls(scores, torch.tensor([4, 2])), cls(scores[..., 0], torch.tensor([4, 2]))
        assert torch.allclose(lab.log_partition, plain.log_partition)
        assert torch.allclose(lab.marginals[..., 0], plain.marginals)
        assert torch.equal(lab.argmax[..., 0], plain.argmax)
        (g,) = torch.autograd.grad(lab.log_partition.sum(), scores)
        assert torch.allclose(g[..., 0], plain.marginals)


def test_masked_labels_and_arcs_get_no_mass():
    scores = torch.randn(1, 4, 4, 3, dtype=torch.float64)
    scores[0, 0, :, :] = -float("inf")  # no arc from ROOT with any label: no tree at all
    crf = DependencyCRF(scores)
    assert crf.log_partition.item() == -float("inf") and (crf.argmax == -1).all()
    assert (crf.marginals == 0).all()
    scores = torch.randn(1, 4, 4, 3, dtype=torch.float64)
    scores[..., 1] = -float("inf")  # label 1 never used
    crf = NonProjectiveDependencyCRF(scores)
    assert (crf.marginals[..., 1] == 0).all() and (crf.argmax[..., 1] != 1).all()
    assert (crf.sample(20)[..., 1] != 1).all()


def test_samples_follow_the_labelled_distribution():
    scores = torch.randn(1, 3, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for kind, cls in CRFS.items():
        crf = cls(scores)
        _, _, tree_scores, trees = brute(scores[0], 2, kind == "projective", True)
        draws = crf.sample(4000, generator=torch.Generator().manual_seed(0))[:, 0]  # [4000, 2, 2]
        assert draws.shape == (4000, 2, 2)
        freq = (draws.unsqueeze(1) == trees.unsqueeze(0)).flatten(2).all(-1).double().mean(0)
        assert torch.allclose(freq, (tree_scores - tree_scores.logsumexp(0)).exp(), atol=0.03)


def test_constrain_and_errors():
    scores = torch.randn(2, 4, 4, 3, dtype=torch.float64)
    crf = DependencyCRF(scores, torch.tensor([3, 2]))
    labels = torch.tensor([[2, -1, -1], [-1, 0, -1]])
    sub = crf.constrain(labels=labels, heads=torch.tensor([[-1, 1, -1], [-1, -1, -1]]))
    assert torch.allclose(sub.marginals[0, :, 1, 2].sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.allclose(sub.marginals[0, 1, 2].sum(), torch.tensor(1.0, dtype=torch.float64))
    assert (sub.argmax[0, 0, 1] == 2) and (sub.argmax[1, 1, 1] == 0)
    with pytest.raises(ValueError, match=r"labels\[0, 0\] = 3"):
        crf.log_prob(torch.tensor([[[0, 3], [1, 0], [1, 0]], [[0, 0], [1, 0], [-1, -1]]]))
    with pytest.raises(ValueError, match="labelled tree is"):
        crf.score(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="labelled scores must be"):
        DependencyCRF(torch.randn(2, 4, 3, 2))


@pytest.mark.parametrize("multiroot", [True, False])
def test_matches_torch_struct_labelled(multiroot):
    torch_struct = pytest.importorskip("torch_struct")
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 6, 6, 4, generator=gen, dtype=torch.float64)
    theirs = scores.permute(3, 0, 1, 2).reshape(-1, 6, 6)
    theirs = arcs_to_torch_struct(theirs).view(4, 3, 5, 5).permute(1, 2, 3, 0)  # [B, N, N, R]
    theirs = theirs.contiguous().requires_grad_()  # (its in-place padding needs a non-leaf copy)
    peer = torch_struct.DependencyCRF(theirs, torch.tensor([5, 5, 5]), multiroot=multiroot)
    crf = DependencyCRF(scores, multiroot=multiroot)
    assert torch.allclose(crf.log_partition, peer.partition.detach())
    ours = crf.marginals
    mu = peer.marginals.detach()  # [B, N, N, R], ROOT arcs on the diagonal
    expect = arcs_to_torch_struct(ours.permute(3, 0, 1, 2).reshape(-1, 6, 6)).view(4, 3, 5, 5)
    assert torch.allclose(expect.permute(1, 2, 3, 0), mu, atol=1e-8)
    best = peer.argmax.detach()  # one-hot [B, N, N, R]
    ours_best = torch.zeros_like(mu)
    heads, labels = crf.argmax.unbind(-1)
    for b in range(3):
        for d in range(5):
            h = int(heads[b, d])
            ours_best[b, d if h == 0 else h - 1, d, labels[b, d]] = 1
    assert torch.equal(ours_best, best)


def test_torch_distribution_view_of_labelled_trees():
    from synattn.structs.torch_distribution import StructuredDistribution

    dist = StructuredDistribution(DependencyCRF(torch.randn(2, 3, 3, 2, dtype=torch.float64)))
    assert dist.event_shape == (2, 2)
    support = dist.enumerate_support()  # 3 projective trees of 2 words × 2^2 labellings
    assert support.shape == (12, 2, 2, 2)
    assert torch.allclose(dist.log_prob(support).exp().sum(0), torch.ones(2, dtype=torch.float64))
    assert dist.log_prob(dist.sample((3,))).shape == (3, 2)
