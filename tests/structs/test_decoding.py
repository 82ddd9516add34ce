"""Exact sampling, k-best and constrained (partially annotated) marginals of the three CRFs against
brute-force enumeration, on both backends."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF
from tests.helpers.backends import BACKENDS, on
from tests.helpers.distributions import TREES, chain_log_probs, random_scores, total_variation, tree_log_probs

INF = float("inf")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
@pytest.mark.parametrize("multiroot", [True, False])
def test_tree_samples_follow_the_distribution(backend, crf_class, projective, multiroot):
    n = 3
    scores = random_scores(1, (3, n + 1, n + 1), 0.15, 1.5)
    scores[1, 0, 1:] = -INF  # no tree at all in the second sentence
    with on(backend):
        crf = crf_class(scores, torch.tensor([3, 3, 2]), multiroot=multiroot)
        samples = crf.sample(3000, generator=torch.Generator().manual_seed(0))
    assert samples.shape == (3000, 3, n)
    assert (samples[:, 1] == -1).all() and (samples[:, 2, 2] == -1).all()
    for b, length in ((0, 3), (2, 2)):
        trees, lp = tree_log_probs(scores[b, :length + 1, :length + 1], length, projective, multiroot)
        assert total_variation(samples[:, b, :length], trees[lp > -INF], lp[lp > -INF]) < 0.04


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_samples_follow_the_distribution(backend):
    unary = random_scores(2, (2, 4, 3), 0.2)
    trans = random_scores(3, (3, 3), 0.2)
    with on(backend):
        crf = LinearChainCRF(unary=unary, transition=trans, lengths=torch.tensor([4, 2]))
        samples = crf.sample(4000, generator=torch.Generator().manual_seed(0))
    assert (samples[:, 1, 2:] == -1).all()
    for b, n in ((0, 4), (1, 2)):
        ys, lp = chain_log_probs(unary[b, :n], trans, n)
        keep = lp > -INF
        assert total_variation(samples[:, b, :n], ys[keep], lp[keep]) < 0.04


def test_sampling_is_seeded():
    crf = DependencyCRF(torch.randn(2, 5, 5))
    a = crf.sample(5, generator=torch.Generator().manual_seed(3))
    b = crf.sample(5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
@pytest.mark.parametrize("multiroot", [True, False])
def test_tree_kbest_is_the_sorted_brute_force_list(backend, crf_class, projective, multiroot):
    for seed in range(4):
        n = 1 + seed
        scores = random_scores(seed, (1, n + 1, n + 1), 0.2, 2.0)
        trees, lp = tree_log_probs(scores[0], n, projective, multiroot)
        exact = (lp + torch.logsumexp(lp, 0).nan_to_num(0.0)).sort(descending=True).values
        exact = exact[exact > -INF]
        k = len(exact) + 2
        with on(backend):
            crf = crf_class(scores, multiroot=multiroot)
            best, heads = crf.kbest(k)
        m = len(exact)
        if m == 0:
            assert (best == -INF).all()
            continue
        s = scores[0].masked_fill(scores[0] <= -1e9, -INF)
        tree_scores = s[trees, torch.arange(1, n + 1)].sum(1).sort(descending=True).values
        torch.testing.assert_close(best[0, :m], tree_scores[:m], rtol=1e-10, atol=1e-10)
        assert best.shape == (1, m) and heads.shape == (1, m, n)  # k = m + 2: the m that exist
        many = crf_class(scores.expand(m, -1, -1), multiroot=multiroot)
        torch.testing.assert_close(many.score(heads[0, :m]), best[0, :m])  # each is what it says
        assert len({tuple(h.tolist()) for h in heads[0, :m]}) == m  # all distinct
        found = (heads[0, :m].unsqueeze(1) == trees.unsqueeze(0)).all(-1).any(1)
        assert found.all()  # all valid trees of the class


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_kbest_is_the_sorted_brute_force_list(backend):
    for seed in range(4):
        n, C = 1 + seed, 2 + seed % 2
        unary = random_scores(seed, (1, n, C), 0.2)
        trans = random_scores(seed + 9, (C, C), 0.2)
        ys, lp = chain_log_probs(unary[0], trans, n)
        u = unary[0].masked_fill(unary[0] <= -1e9, -INF)
        t = trans.masked_fill(trans <= -1e9, -INF)
        scores = (u[torch.arange(n), ys].sum(1) + t[ys[:, :-1], ys[:, 1:]].sum(1)).sort(descending=True).values
        m = int((scores > -INF).sum())
        with on(backend):
            crf = LinearChainCRF(unary=unary, transition=trans)
            best, labels = crf.kbest(m + 1)
        torch.testing.assert_close(best[0, :m], scores[:m], rtol=1e-10, atol=1e-10)
        assert best.shape == (1, m)  # k = m + 1: only the m that exist are returned
        assert len({tuple(y.tolist()) for y in labels[0, :m]}) == m
        many = LinearChainCRF(unary=unary.expand(m, -1, -1), transition=trans)
        torch.testing.assert_close(many.score(labels[0, :m]), best[0, :m])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
@pytest.mark.parametrize("multiroot", [True, False])
def test_constrained_tree_marginals_match_brute_force(backend, crf_class, projective, multiroot):
    n = 4
    scores = random_scores(5, (1, n + 1, n + 1), 0.0, 1.0)
    heads = torch.tensor([[-1, 3, -1, -1]])  # word 2 attaches to word 3
    allowed = torch.ones(1, n + 1, n + 1, dtype=torch.bool)
    allowed[0, 0, 1] = False  # word 1 is not a root child
    trees, lp = tree_log_probs(scores[0], n, projective, multiroot, -1e9)
    consistent = (trees[:, 1] == 3) & (trees[:, 0] != 0)
    x = scores.clone().requires_grad_()
    all_scores = torch.where(x[0] <= -1e9, -1e9, x[0])[trees, torch.arange(1, n + 1)].sum(1)
    exact_loss = torch.logsumexp(all_scores, 0) - torch.logsumexp(all_scores[consistent], 0)
    exact_grad = torch.autograd.grad(exact_loss, x)[0]
    p = (lp[consistent] - torch.logsumexp(lp[consistent], 0)).exp()
    exact_mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    exact_mu.index_put_((trees[consistent].flatten(), torch.arange(1, n + 1).repeat(int(consistent.sum()))),
                        p.repeat_interleave(n), accumulate=True)
    with on(backend):
        y = scores.clone().requires_grad_()
        crf = crf_class(y, multiroot=multiroot)
        part = crf.constrain(heads=heads, allowed=allowed)
        torch.testing.assert_close(part.marginals[0], exact_mu, rtol=0, atol=1e-9)
        loss = crf.log_partition - part.log_partition
        torch.testing.assert_close(loss[0], exact_loss, rtol=1e-9, atol=1e-9)
        (grad,) = torch.autograd.grad(loss.sum(), y)
    torch.testing.assert_close(grad, exact_grad, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_constrained_chain_marginals_match_brute_force(backend):
    n, C = 4, 3
    unary, trans = random_scores(6, (1, n, C), 0.0), random_scores(7, (C, C), 0.0)
    labels = torch.tensor([[-1, 2, -1, -1]])
    allowed = torch.ones(1, n, C, dtype=torch.bool)
    allowed[0, 3, 0] = False
    ys, lp = chain_log_probs(unary[0], trans, n)
    consistent = (ys[:, 1] == 2) & (ys[:, 3] != 0)
    p = (lp[consistent] - torch.logsumexp(lp[consistent], 0)).exp()
    exact_mu = torch.stack([(p[:, None] * (ys[consistent][:, i, None] == torch.arange(C))).sum(0)
                            for i in range(n)])
    with on(backend):
        crf = LinearChainCRF(unary=unary, transition=trans).constrain(labels=labels, allowed=allowed)
        torch.testing.assert_close(crf.marginals[0], exact_mu, rtol=0, atol=1e-9)
        free = LinearChainCRF(unary=unary, transition=trans)
        torch.testing.assert_close(crf.log_partition[0] - free.log_partition[0],
                                   torch.logsumexp(lp[consistent], 0), rtol=1e-9, atol=1e-9)


def test_constrain_rejects_bad_annotations():
    crf = DependencyCRF(torch.randn(1, 4, 4))
    with pytest.raises(ValueError, match="heads must be"):
        crf.constrain(heads=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="-1 \\(free\\) or in 0..3"):
        crf.constrain(heads=torch.tensor([[0, 7, -1]]))
    with pytest.raises(ValueError, match="labels must be"):
        LinearChainCRF(unary=torch.randn(1, 3, 2)).constrain(labels=torch.tensor([[0, 5, -1]]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_root_with_a_known_root_stays_on_the_fast_path(backend):
    """A word whose head is fixed to ROOT (single root) cannot be headed by word 1, which the
    single-root elimination lets play ROOT: the sentence is solved with the two words swapped,
    exactly (values and the marginals' backward against brute force), not in log space."""
    from synattn.structs.dependency.matrix_tree import _marginals

    n = 4
    scores = random_scores(8, (1, n + 1, n + 1), 0.0, 1.0)
    known = torch.tensor([[-1, -1, 0, -1]])  # word 3 is the root child
    x = scores.clone().requires_grad_()
    trees, _ = tree_log_probs(x[0], n, False, False, -1e9)
    tree_scores = x[0][trees, torch.arange(1, n + 1)].sum(1)
    consistent = trees[:, 2] == 0
    p = torch.softmax(tree_scores[consistent], 0)
    exact_mu = torch.zeros(n + 1, n + 1, dtype=torch.float64).index_put(
        (trees[consistent].flatten(), torch.arange(1, n + 1).repeat(int(consistent.sum()))),
        p.repeat_interleave(n), accumulate=True)
    g = random_scores(9, (n + 1, n + 1), 0.0)
    (exact_hg,) = torch.autograd.grad((exact_mu * g).sum(), x)
    with on(backend):
        y = scores.clone().requires_grad_()
        part = NonProjectiveDependencyCRF(y, multiroot=False).constrain(heads=known)
        _, _, log_space, swap = _marginals(part.scores.detach(), part.lengths, False, True,
                                           backend == "numba")
        assert not log_space.any()  # (LAPACK, on the PyTorch path, needs no swap)
        assert swap.tolist() == [3 if backend == "numba" else 1]
        torch.testing.assert_close(part.marginals[0], exact_mu.detach(), rtol=0, atol=1e-9)
        (hg,) = torch.autograd.grad((part.marginals[0] * g).sum(), y)
    torch.testing.assert_close(hg, exact_hg, rtol=1e-8, atol=1e-9)
