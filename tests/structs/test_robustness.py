"""Masks, inputs without a valid structure, extreme scales, derivatives of every order and float32
precision, on both backends, against brute-force enumeration (issue: the peers' own tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF, TreeCRF
from synattn.structs.dependency.matrix_tree import best_tree
from tests.helpers.backends import BACKENDS, on
from tests.helpers.chains import brute_force as chain_brute_force
from tests.helpers.derivatives import third_derivative_check
from tests.helpers.trees import all_trees, brute_force as tree_brute_force

INF = float("inf")
MASKS = [-INF, torch.finfo(torch.float64).min, -1e30, -1e9]
TREES = [(DependencyCRF, True), (NonProjectiveDependencyCRF, False)]


def masked_tree_batch(seed: int, n: int, p: float, value: float, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    drop = torch.rand(1, n + 1, n + 1, generator=gen) < p
    return scores.masked_fill(drop, value)


def check_tree_against_brute_force(crf, scores, n, projective, multiroot):
    exact_z, exact_mu, exact_max = tree_brute_force(scores[0].masked_fill(scores[0] <= -1e9, -INF),
                                                    n, projective, multiroot)
    if exact_z == -INF:
        assert crf.log_partition.item() == -INF
        assert not crf.marginals.any()
        assert crf.max.item() == -INF and (crf.argmax == -1).all()
        return
    torch.testing.assert_close(crf.log_partition[0], exact_z, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(crf.marginals[0], exact_mu, rtol=0, atol=1e-9)
    torch.testing.assert_close(crf.max[0], exact_max, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(crf.score(crf.argmax)[0], exact_max, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# 1, 2, 3: masks anywhere and inputs without a valid structure.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_issue_minimal_cases(backend):
    with on(backend):
        s = torch.tensor([[[0., -INF, .3], [0., 0., .5], [0., .2, 0.]]], dtype=torch.float64)
        assert DependencyCRF(s).log_partition.item() == pytest.approx(0.5, abs=1e-12)
        assert NonProjectiveDependencyCRF(s).log_partition.item() == pytest.approx(0.5, abs=1e-12)
        u = torch.zeros(1, 3, 2, dtype=torch.float64)
        u[0, 1, 0] = -INF
        assert LinearChainCRF(unary=u).log_partition.item() == pytest.approx(math.log(4), abs=1e-12)
        u = torch.zeros(1, 3, 3, dtype=torch.float64, requires_grad=True)
        crf = LinearChainCRF(unary=u.index_put((torch.tensor([0]), torch.tensor([1]),
                                                torch.tensor([0])), torch.tensor(-INF).double()))
        mu = crf.marginals
        assert mu[0, 1, 0].item() == 0.0 and not mu.isnan().any()
        mu.pow(2).sum().backward()
        assert torch.isfinite(u.grad).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("value", MASKS)
def test_tree_masks_match_brute_force(backend, crf_class, projective, multiroot, value):
    with on(backend):
        for seed in range(12):
            n = 1 + seed % 5
            scores = masked_tree_batch(seed, n, 0.35, value).requires_grad_()
            crf = crf_class(scores, multiroot=multiroot)
            check_tree_against_brute_force(crf, scores.detach(), n, projective, multiroot)
            (crf.log_partition.exp().sum() + crf.marginals.pow(2).sum()).backward()
            assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_ragged_batches_equal_one_by_one(backend, crf_class, projective, dtype):
    """Masks (of the dtype's own finfo.min too) in a ragged batch change nothing elsewhere."""
    gen = torch.Generator().manual_seed(11)
    lengths = torch.tensor([5, 2, 4, 1, 3])
    scores = torch.randn(5, 6, 6, generator=gen, dtype=torch.float64).to(dtype)
    drop = torch.rand(5, 6, 6, generator=gen) < 0.3
    scores = scores.masked_fill(drop, torch.finfo(dtype).min).masked_fill(drop & (scores > 0), -INF)
    scores[1, 0, 1:] = -INF  # no tree
    with on(backend):
        for multiroot in (True, False):
            crf = crf_class(scores, lengths, multiroot=multiroot)
            for b, n in enumerate(lengths.tolist()):
                one = crf_class(scores[b:b + 1, :n + 1, :n + 1], multiroot=multiroot)
                torch.testing.assert_close(crf.log_partition[b:b + 1], one.log_partition)
                torch.testing.assert_close(crf.marginals[b:b + 1, :n + 1, :n + 1], one.marginals)
                assert torch.equal(crf.argmax[b:b + 1, :n], one.argmax)
            assert crf.log_partition[1] == -INF and crf.log_partition.dtype == dtype


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", MASKS)
def test_chain_masks_match_brute_force(backend, value):
    with on(backend):
        for seed in range(12):
            gen = torch.Generator().manual_seed(seed)
            n, C = 1 + seed % 4, 1 + seed % 3
            unary = torch.randn(1, n, C, generator=gen, dtype=torch.float64)
            unary = unary.masked_fill(torch.rand(1, n, C, generator=gen) < 0.3, value)
            trans = torch.randn(C, C, generator=gen, dtype=torch.float64)
            trans = trans.masked_fill(torch.rand(C, C, generator=gen) < 0.3, value)
            unary.requires_grad_()
            crf = LinearChainCRF(unary=unary, transition=trans)
            exact = chain_brute_force(unary.detach().clamp_min(-INF).masked_fill(unary <= -1e9, -INF)[0],
                                      trans.masked_fill(trans <= -1e9, -INF).expand(max(n - 1, 0), C, C), n)
            if exact[0] == -INF:
                assert crf.log_partition.item() == -INF and not crf.marginals.any()
                assert crf.max.item() == -INF and (crf.argmax == -1).all()
            else:
                torch.testing.assert_close(crf.log_partition[0], exact[0], rtol=1e-10, atol=1e-10)
                torch.testing.assert_close(crf.marginals[0], exact[1], rtol=0, atol=1e-9)
                torch.testing.assert_close(crf.max[0], exact[3], rtol=1e-10, atol=1e-10)
            (crf.log_partition.exp().sum() + crf.marginals.pow(2).sum()).backward()
            assert torch.isfinite(unary.grad).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_edge_form_masks_match_brute_force(backend):
    gen = torch.Generator().manual_seed(5)
    with on(backend):
        for n, C in ((2, 2), (4, 3), (5, 2)):
            edge = torch.randn(1, n - 1, C, C, generator=gen, dtype=torch.float64)
            edge = edge.masked_fill(torch.rand(1, n - 1, C, C, generator=gen) < 0.4, -INF)
            crf = LinearChainCRF(edge, scan=None)
            exact = chain_brute_force(edge.new_zeros(n, C), edge[0], n)
            torch.testing.assert_close(crf.log_partition[0], exact[0], rtol=1e-10, atol=1e-10)
            if exact[0] > -INF:
                torch.testing.assert_close(crf.edge_marginals[0], exact[2], rtol=0, atol=1e-9)
                torch.testing.assert_close(crf.marginals[0], exact[1], rtol=0, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_valid_structure_has_one_answer_everywhere(backend):
    """log Z = -inf, marginals 0, zero (not NaN) gradients, max -inf and argmax -1, for every
    structure and backend; the other sentences of the batch are unaffected."""
    with on(backend):
        s = torch.randn(2, 4, 4, dtype=torch.float64)
        s[0, 0, 1:] = -INF  # no arc from ROOT: no tree at all
        s[1, 0, 1:] = -INF  # ROOT -> 3 only, but 3 cannot reach 1 or 2 ...
        s[1, 0, 3] = 0.5
        s[1, 3, 1:3] = -INF
        s[1, 1:3, 3] = -INF  # ... and 1 <-> 2 is a cycle: no arborescence
        for crf_class, _ in TREES:
            for multiroot in (True, False):
                x = s.clone().requires_grad_()
                crf = crf_class(x, multiroot=multiroot)
                assert (crf.log_partition == -INF).all()
                assert not crf.marginals.any() and (crf.argmax == -1).all()
                (crf.log_partition.clamp_min(-1.0).sum() + crf.marginals.sum()).backward()
                assert x.grad is not None and not x.grad.any()
        u = torch.randn(2, 3, 2, dtype=torch.float64)
        u[0, 1] = -INF
        x = u.clone().requires_grad_()
        crf = LinearChainCRF(unary=x)
        assert crf.log_partition[0] == -INF and torch.isfinite(crf.log_partition[1])
        assert not crf.marginals[0].any() and not crf.edge_marginals[0].any()
        (crf.log_partition.clamp_min(-1.0).sum() + crf.marginals.sum()).backward()
        assert torch.isfinite(x.grad).all() and not x.grad[0].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_precision_minimum_is_a_mask(backend):
    s = torch.tensor([[[0., -INF, .3], [0., 0., .5], [0., .2, 0.]]])
    half = s.half().masked_fill(s == -INF, torch.finfo(torch.float16).min)
    with on(backend):
        assert DependencyCRF(half).log_partition.item() == pytest.approx(0.5, abs=1e-3)
        u = torch.zeros(1, 3, 2).half()
        u[0, 1] = torch.finfo(torch.float16).min
        assert LinearChainCRF(unary=u).log_partition.item() == -INF


def test_scores_too_large_for_masks_are_refused():
    with pytest.raises(ValueError, match="scores: finite scores up to"):
        DependencyCRF(torch.full((1, 3, 3), 1e8))
    with pytest.raises(ValueError, match="unary"):
        LinearChainCRF(unary=torch.full((1, 3, 2), 1e8))


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("value", MASKS)
def test_chu_liu_edmonds_with_masks(multiroot, value):
    trees = all_trees(5, False, multiroot)
    for seed in range(50):
        s = masked_tree_batch(seed, 5, 0.15, value, scale=3.0)[0].numpy()
        heads = best_tree(s, multiroot)
        tree_scores = np.where(s <= -1e9, -np.inf, s)[trees, np.arange(1, 6)].sum(1)
        best = tree_scores.max()
        if best == -np.inf:
            continue
        assert s[heads, np.arange(1, 6)].sum() == pytest.approx(best, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# 4: extreme scales.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_matrix_tree_extreme_scales_match_brute_force(backend, multiroot):
    with on(backend):
        for scale in (500.0, 1000.0, 1e5):
            for seed in range(8):
                n = 2 + seed % 4
                scores = masked_tree_batch(seed, n, 0.0, 0.0, scale)
                crf = NonProjectiveDependencyCRF(scores, multiroot=multiroot)
                check_tree_against_brute_force(crf, scores, n, False, multiroot)
                log_count = math.log(len(all_trees(n, False, multiroot)))
                tol = 1e-12 * abs(crf.max[0].item())
                assert crf.max[0] - tol <= crf.log_partition[0] <= crf.max[0] + log_count + tol


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_matrix_tree_hessian_at_extreme_scales(backend, multiroot):
    """The backward of the marginals on the log-space path is the brute-force Hessian."""
    n = 4
    scores = masked_tree_batch(3, n, 0.0, 0.0, 500.0)[0]
    g = torch.randn(n + 1, n + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = scores.clone().requires_grad_()
    _, mu, _ = tree_brute_force(x, n, False, multiroot)
    (exact,) = torch.autograd.grad((mu * g).sum(), x)
    with on(backend):
        y = scores.clone().unsqueeze(0).requires_grad_()
        (got,) = torch.autograd.grad((NonProjectiveDependencyCRF(y, multiroot=multiroot).marginals
                                      * g).sum(), y)
    torch.testing.assert_close(got[0], exact, rtol=0, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crf_class, projective", TREES)
def test_log_partition_between_max_and_max_plus_log_count(backend, crf_class, projective):
    with on(backend):
        for scale in (1.0, 100.0, 1e4, 1e6):
            scores = masked_tree_batch(7, 5, 0.2, -INF, scale)
            for multiroot in (True, False):
                crf = crf_class(scores, multiroot=multiroot)
                log_count = math.log(len(all_trees(5, projective, multiroot)))
                lo, hi = crf.max[0].item(), crf.log_partition[0].item()
                assert lo - 1e-9 * abs(lo) <= hi <= lo + log_count + 1e-9 * abs(lo)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_log_partition_between_max_and_max_plus_log_count(backend):
    gen = torch.Generator().manual_seed(8)
    with on(backend):
        for scale in (1.0, 100.0, 1e4, 1e6):
            unary = torch.randn(1, 5, 3, generator=gen, dtype=torch.float64) * scale
            unary[0, 2, 1] = -INF
            crf = LinearChainCRF(unary=unary, transition=torch.randn(3, 3, generator=gen,
                                                                      dtype=torch.float64) * scale)
            lo, hi = crf.max[0].item(), crf.log_partition[0].item()
            assert lo - 1e-12 * abs(lo) <= hi <= lo + math.log(3 ** 5) + 1e-12 * abs(lo)
            assert crf.feasible.all()


# ---------------------------------------------------------------------------------------------
# 5: derivatives of every order: right (finite differences) or an explicit error.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_eisner_third_derivative(backend, multiroot):
    with on(backend):
        third_derivative_check(lambda x: DependencyCRF(x, multiroot=multiroot).marginals, (1, 4, 4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_third_derivative(backend):
    with on(backend):
        third_derivative_check(lambda x: LinearChainCRF(unary=x).marginals, (1, 5, 3))
        third_derivative_check(lambda x: LinearChainCRF(x).edge_marginals, (1, 3, 2, 2), seed=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cky_third_derivative(backend):
    with on(backend):
        third_derivative_check(lambda x: TreeCRF(x).marginals, (1, 4, 4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_eisner_fourth_derivative_of_log_partition(backend):
    """log Z's fourth derivative (autograd through autograd) in one direction, by differences."""
    gen = torch.Generator().manual_seed(4)
    x0, d = (torch.randn(1, 4, 4, generator=gen, dtype=torch.float64) for _ in range(2))

    def third(x):
        with on(backend):
            lz = DependencyCRF(x).log_partition.sum()
            out = lz
            for _ in range(3):
                (g,) = torch.autograd.grad(out, x, create_graph=True)
                out = (g * d).sum()
            return out

    x = x0.clone().requires_grad_()
    (g4,) = torch.autograd.grad(third(x), x)
    eps = 1e-4
    fd = (third((x0 + eps * d).requires_grad_()) - third((x0 - eps * d).requires_grad_())) / (2 * eps)
    assert (g4 * d).sum().item() == pytest.approx(fd.item(), rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multiroot", [True, False])
def test_matrix_tree_third_derivative(backend, multiroot):
    """Matrix-Tree's third derivative is exact (it was an error, and before that silently 0),
    and gradcheck/gradgradcheck hold for the marginals in float64, masked arcs included."""
    with on(backend):
        third_derivative_check(
            lambda x: NonProjectiveDependencyCRF(x, multiroot=multiroot).marginals, (1, 4, 4))
        gen = torch.Generator().manual_seed(3)
        x = torch.randn(2, 4, 4, generator=gen, dtype=torch.float64)
        x[1, 0, 2] = -float("inf")
        lengths = torch.tensor([3, 3])

        def marginals(y):
            return NonProjectiveDependencyCRF(torch.where(x > -1e9, y, x), lengths,
                                              multiroot=multiroot).marginals

        y = x.masked_fill(x == -float("inf"), 0.0).requires_grad_()
        assert torch.autograd.gradcheck(marginals, (y,))
        assert torch.autograd.gradgradcheck(marginals, (y,))


# ---------------------------------------------------------------------------------------------
# 6: float32 precision of the chain's PyTorch path.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("C", [2, 20])
def test_float32_chain_marginals_at_large_potentials(backend, C):
    gen = torch.Generator().manual_seed(C)
    lp = (torch.rand(2, 59, C, C, generator=gen) * 2 - 1) * 1e4
    with on("torch"):
        exact = LinearChainCRF(lp.double()).marginals
    with on(backend):
        got = LinearChainCRF(lp).marginals
    assert got.dtype == torch.float32
    assert (got.double() - exact).abs().max() < 1e-5

