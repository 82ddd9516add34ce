"""log_prob, entropy, cross_entropy and kl of the three CRFs against brute-force enumeration, on
both backends, with and without masks, values and gradients."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF
from tests.helpers.backends import BACKENDS, on
from tests.helpers.distributions import TREES, chain_log_probs, random_scores, tree_log_probs

INF = float("inf")


def exact_entropy(lp):
    p = lp.exp()
    return -(torch.where(p > 0, p * lp, lp.new_zeros(()))).sum()


def exact_cross_entropy(lp, lq):
    p = lp.exp()
    if bool(((p > 0) & (lq == -INF)).any()):
        return torch.tensor(INF, dtype=lp.dtype)
    return -(torch.where(p > 0, p * lq, lq.new_zeros(()))).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("p_mask", [0.0, 0.25])
def test_tree_distribution_matches_brute_force(backend, crf_class, projective, multiroot, p_mask):
    with on(backend):
        for seed in range(6):
            n = 1 + seed % 4
            sp = random_scores(seed, (1, n + 1, n + 1), p_mask, 2.0)
            sq = random_scores(seed + 100, (1, n + 1, n + 1), p_mask, 2.0)
            p, q = crf_class(sp, multiroot=multiroot), crf_class(sq, multiroot=multiroot)
            trees, lp = tree_log_probs(sp[0], n, projective, multiroot)
            _, lq = tree_log_probs(sq[0], n, projective, multiroot)
            if bool(torch.isnan(lp).any()):  # no tree under p
                assert p.entropy.item() == 0.0 and p.kl(q).item() == 0.0
                continue
            heads = trees[torch.randint(len(trees), (1,), generator=torch.Generator().manual_seed(seed))]
            torch.testing.assert_close(p.log_prob(heads)[0], lp[lp.new_zeros((), dtype=torch.long) + int(
                (trees == heads).all(1).nonzero()[0])], rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(p.entropy[0], exact_entropy(lp), rtol=1e-8, atol=1e-9)
            if bool(torch.isnan(lq).any()):
                assert p.cross_entropy(q).item() == INF
                continue
            ce = exact_cross_entropy(lp, lq)
            torch.testing.assert_close(p.cross_entropy(q)[0], ce, rtol=1e-8, atol=1e-9)
            torch.testing.assert_close(p.kl(q)[0], ce - exact_entropy(lp), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p_mask", [0.0, 0.25])
def test_chain_distribution_matches_brute_force(backend, p_mask):
    with on(backend):
        for seed in range(8):
            n, C = 1 + seed % 4, 1 + seed % 3
            up, uq = (random_scores(seed + k, (1, n, C), p_mask) for k in (0, 50))
            tp, tq = (random_scores(seed + k, (C, C), p_mask) for k in (1, 51))
            p, q = LinearChainCRF(unary=up, transition=tp), LinearChainCRF(unary=uq, transition=tq)
            ys, lp = chain_log_probs(up[0], tp, n)
            _, lq = chain_log_probs(uq[0], tq, n)
            if bool(torch.isnan(lp).any()):
                assert p.entropy.item() == 0.0 and p.log_prob(ys[:1]).item() == -INF
                continue
            k = seed % len(ys)
            torch.testing.assert_close(p.log_prob(ys[k:k + 1])[0], lp[k], rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(p.entropy[0], exact_entropy(lp), rtol=1e-8, atol=1e-9)
            if bool(torch.isnan(lq).any()):
                assert p.kl(q).item() == INF
                continue
            ce = exact_cross_entropy(lp, lq)
            torch.testing.assert_close(p.cross_entropy(q)[0], ce, rtol=1e-8, atol=1e-9)
            torch.testing.assert_close(p.kl(q)[0], ce - exact_entropy(lp), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
def test_entropy_and_kl_gradients_match_brute_force(backend, crf_class, projective):
    n = 3
    sp = random_scores(3, (1, n + 1, n + 1), 0.2)
    sq = random_scores(4, (1, n + 1, n + 1), 0.0)
    x, y = sp.clone().requires_grad_(), sq.clone().requires_grad_()
    _, lp = tree_log_probs(x[0], n, projective, False, -1e9)
    _, lq = tree_log_probs(y[0], n, projective, False, -1e9)
    exact = torch.autograd.grad(exact_entropy(lp) + 0.5 * (exact_cross_entropy(lp, lq)), (x, y))
    with on(backend):
        a, b = sp.clone().requires_grad_(), sq.clone().requires_grad_()
        p, q = crf_class(a, multiroot=False), crf_class(b, multiroot=False)
        got = torch.autograd.grad((p.entropy + 0.5 * p.cross_entropy(q)).sum(), (a, b))
    for e, g in zip(exact, got):
        torch.testing.assert_close(g, e, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_entropy_gradient_matches_brute_force(backend):
    u, t = random_scores(5, (1, 4, 3), 0.2), random_scores(6, (3, 3), 0.0)
    x = u.clone().requires_grad_()
    (exact,) = torch.autograd.grad(exact_entropy(chain_log_probs(x[0], t, 4, -1e9)[1]), x)
    with on(backend):
        a = u.clone().requires_grad_()
        (got,) = torch.autograd.grad(LinearChainCRF(unary=a, transition=t).entropy.sum(), a)
    torch.testing.assert_close(got, exact, rtol=1e-7, atol=1e-9)


def test_kl_of_a_distribution_with_itself_is_zero_and_mismatches_are_errors():
    s = torch.randn(2, 5, 5, dtype=torch.float64)
    p = DependencyCRF(s, torch.tensor([4, 2]))
    torch.testing.assert_close(p.kl(DependencyCRF(s, torch.tensor([4, 2]))), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(TypeError, match="DependencyCRF"):
        p.kl(NonProjectiveDependencyCRF(s, torch.tensor([4, 2])))
    with pytest.raises(ValueError, match="lengths"):
        p.kl(DependencyCRF(s, torch.tensor([4, 3])))
