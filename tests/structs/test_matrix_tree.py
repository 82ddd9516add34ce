"""Matrix-Tree CRF on both backends (pure PyTorch and compiled numba kernels).

Every property is checked against brute-force enumeration of arborescences or against the
other backend; the compiled tests are skipped when numba is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from synattn.structs import NonProjectiveDependencyCRF
from synattn.structs.backend import use_backend
from synattn.structs.dependency.arc_scores import check_arc_scores, usable_arcs
from synattn.structs.dependency.matrix_tree import _gth_marginals
from tests.helpers.trees import brute_force as tree_brute_force, check_log_z_bounds, dirty_scores

# The backend fixtures only enter a context that no example changes: hypothesis may share them.
FIXTURES_OK = [HealthCheck.function_scoped_fixture]


@pytest.fixture(params=["torch", "numba"])
def backend(request):
    """Runs the test body on one backend."""
    if request.param == "numba":
        pytest.importorskip("numba")
    with use_backend(request.param):
        yield request.param


@pytest.fixture
def compiled():
    """Runs the test body on the compiled kernels."""
    pytest.importorskip("numba")
    with use_backend("numba"):
        yield


# ---------------------------------------------------------------------------------------------
# Brute force.
# ---------------------------------------------------------------------------------------------

def brute_force(scores: torch.Tensor, n: int, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """log Z and arc marginals ``[n+1, n+1]`` of one sentence of ``n`` words over all
    arborescences (float64; differentiable)."""
    log_z, marginals, _ = tree_brute_force(scores.double(), n, False, multiroot)
    return log_z, marginals[:n + 1, :n + 1]


def random_batch(seed: int, lengths: list[int], scale: float, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    scores = torch.randn(len(lengths), n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    return scores.to(dtype), torch.tensor(lengths)


batches = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "scale": st.sampled_from([0.1, 1.0, 3.0]),
    "multiroot": st.booleans(),
})


# ---------------------------------------------------------------------------------------------
# Exactness on both backends.
# ---------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES_OK)
@given(case=batches)
def test_matches_brute_force(backend, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], case["scale"])
    crf = NonProjectiveDependencyCRF(scores, lengths, multiroot=case["multiroot"])
    log_partition, marginals = crf.log_partition, crf.marginals
    for b, n in enumerate(case["lengths"]):
        log_z, expected = brute_force(scores[b], n, case["multiroot"])
        torch.testing.assert_close(log_partition[b], log_z, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(marginals[b, :n + 1, :n + 1], expected, rtol=1e-8, atol=1e-9)
        assert marginals[b, n + 1:].abs().sum() == 0 and marginals[b, :, n + 1:].abs().sum() == 0


@settings(max_examples=20, deadline=None, suppress_health_check=FIXTURES_OK)
@given(case=batches)
def test_float32_within_1e_5(backend, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], 1.0)
    crf = NonProjectiveDependencyCRF(scores.float(), lengths, multiroot=case["multiroot"])
    assert crf.marginals.dtype == crf.log_partition.dtype == torch.float32
    for b, n in enumerate(case["lengths"]):
        log_z, expected = brute_force(scores[b], n, case["multiroot"])
        assert abs(crf.log_partition[b].item() - log_z.item()) < 1e-5 * max(1.0, abs(log_z.item()))
        assert (crf.marginals[b, :n + 1, :n + 1].double() - expected).abs().max() < 1e-5


@pytest.mark.parametrize("multiroot", [True, False])
def test_length_one(backend, multiroot):
    scores, lengths = random_batch(1, [1, 1], 2.0)
    scores = scores[:, :2, :2].clone().requires_grad_()  # [2, 2, 2]: ROOT and one word
    crf = NonProjectiveDependencyCRF(scores, lengths, multiroot)
    torch.testing.assert_close(crf.log_partition, scores[:, 0, 1].detach())
    expected = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64).expand(2, 2, 2)
    torch.testing.assert_close(crf.marginals, expected)
    (grad,) = torch.autograd.grad(crf.marginals, scores, torch.randn(2, 2, 2, dtype=torch.float64))
    assert grad.abs().sum() == 0  # p(ROOT -> 1) = 1 whatever the scores


def test_padding_and_ignored_entries_do_not_matter(backend):
    scores, lengths = random_batch(0, [4, 2, 5], 1.0)
    dirty = dirty_scores(scores, lengths)
    for multiroot in (True, False):
        clean = NonProjectiveDependencyCRF(scores, lengths, multiroot)
        noisy = NonProjectiveDependencyCRF(dirty, lengths, multiroot)
        torch.testing.assert_close(clean.log_partition, noisy.log_partition)
        torch.testing.assert_close(clean.marginals, noisy.marginals)


def test_backward_ignores_gradients_of_unusable_arcs(backend):
    scores, lengths = random_batch(13, [5, 2, 4], 1.0)
    usable = usable_arcs(lengths, scores.shape[-1])
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for multiroot in (True, False):
        x = scores.clone().requires_grad_()
        mu = NonProjectiveDependencyCRF(x, lengths, multiroot).marginals
        (clean,) = torch.autograd.grad(mu, x, torch.where(usable, g, 0.0))
        x = scores.clone().requires_grad_()
        mu = NonProjectiveDependencyCRF(x, lengths, multiroot).marginals
        (noisy,) = torch.autograd.grad(mu, x, torch.where(usable, g, float("nan")))
        torch.testing.assert_close(noisy, clean)
        assert torch.isfinite(clean).all() and clean.abs().sum() > 0


# ---------------------------------------------------------------------------------------------
# Gradients.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("multiroot", [True, False])
def test_gradcheck(backend, multiroot):
    scores, lengths = random_batch(5, [4, 2, 1, 3], 1.0)
    scores.requires_grad_()
    torch.autograd.gradcheck(
        lambda x: NonProjectiveDependencyCRF(x, lengths, multiroot).marginals, (scores,))
    torch.autograd.gradgradcheck(
        lambda x: NonProjectiveDependencyCRF(x, lengths, multiroot).log_partition, (scores,))


@pytest.mark.parametrize("multiroot", [True, False])
def test_marginals_backward_is_the_hessian_of_brute_force(backend, multiroot):
    """``Σ g ∂μ/∂s`` equals the second derivative of the brute-force ``log Z`` (autograd)."""
    scores, lengths = random_batch(6, [4, 5, 3], 1.5)
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    x = scores.clone().requires_grad_()
    (ours,) = torch.autograd.grad(NonProjectiveDependencyCRF(x, lengths, multiroot).marginals, x, g)
    for b, n in enumerate(lengths.tolist()):
        y = scores[b].clone().requires_grad_()
        (mu,) = torch.autograd.grad(brute_force(y, n, multiroot)[0], y, create_graph=True)
        (expected,) = torch.autograd.grad(mu, y, g[b])
        torch.testing.assert_close(ours[b], expected, rtol=1e-7, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Numerics.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("multiroot", [True, False])
def test_scores_times_100_stay_finite(backend, multiroot):
    scores, lengths = random_batch(8, [30, 12, 1, 25], 100.0, torch.float32)
    x = scores.clone().requires_grad_()
    crf = NonProjectiveDependencyCRF(x, lengths, multiroot)
    log_z, marginals = crf.log_partition, crf.marginals
    best = crf.max
    assert torch.isfinite(log_z).all() and torch.isfinite(marginals).all()
    check_log_z_bounds(log_z, best, lengths)
    words = torch.arange(1, scores.shape[-1]) <= lengths[:, None]
    torch.testing.assert_close(marginals.sum(1)[:, 1:][words], torch.ones(int(words.sum())),
                               atol=1e-5, rtol=0)
    assert marginals.min() >= -1e-5 and marginals.max() <= 1 + 1e-5
    (grad,) = torch.autograd.grad(marginals, x, torch.randn_like(marginals))
    assert torch.isfinite(grad).all()


def test_long_sentences_with_two_threads(backend):
    """N = 160 with two threads, where batched LAPACK LU can fail on some CPU builds."""
    torch.set_num_threads(2)  # (the suite's fixture restores the thread count)
    scores, lengths = random_batch(9, [160, 150, 97, 160], 1.0, torch.float32)
    for scale in (1.0, 100.0):
        crf = NonProjectiveDependencyCRF(scores * scale, lengths)
        marginals = crf.marginals
        assert torch.isfinite(crf.log_partition).all() and torch.isfinite(marginals).all()
        words = torch.arange(1, 161) <= lengths[:, None]
        torch.testing.assert_close(marginals.sum(1)[:, 1:][words], torch.ones(int(words.sum())),
                                   atol=1e-4, rtol=0)


# ---------------------------------------------------------------------------------------------
# The compiled kernels against the pure-PyTorch path.
# ---------------------------------------------------------------------------------------------

def _both_paths(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, g: torch.Tensor):
    """``(log Z, marginals, backward of the marginals along g)`` on each backend."""
    out = []
    for name in ("torch", "numba"):
        with use_backend(name):
            x = scores.clone().requires_grad_()
            crf = NonProjectiveDependencyCRF(x, lengths, multiroot)
            (grad,) = torch.autograd.grad(crf.marginals, x, g)
            out.append((crf.log_partition.detach(), crf.marginals.detach(), grad))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES_OK)
@given(seed=st.integers(0, 2**31 - 1), multiroot=st.booleans(),
       lengths=st.lists(st.integers(1, 24), min_size=1, max_size=6),
       scale=st.sampled_from([0.5, 2.0, 10.0]))
def test_compiled_equals_torch_float64(compiled, seed, multiroot, lengths, scale):
    scores, lengths = random_batch(seed, lengths, scale)
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(scores.shape, dtype=torch.float64, generator=gen)
    torch_path, numba_path = _both_paths(scores, lengths, multiroot, g)
    # (the PyTorch path's log Z and marginals come from LAPACK's LU and Koo's closed form where
    # its certificate holds, which accepts column sums within 1e-9 of 1: at scale 10 they differ
    # from the GTH elimination by up to ~3e-11 relative in log Z and ~3e-10 in the marginals)
    torch.testing.assert_close(numba_path[0], torch_path[0], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(numba_path[1], torch_path[1], rtol=0, atol=1e-8)
    # the backward of the marginals is a second derivative: the compiled path's closed form from the
    # inverse of Koo's matrix and the PyTorch path's autograd through LU differ by up to ~1.4e-9
    # absolute at scale 10 (seed 2758, lengths [1, 1, 1, 24, 13]); both are checked against
    # float64 finite differences elsewhere
    torch.testing.assert_close(numba_path[2], torch_path[2], rtol=1e-7, atol=1e-8)
    assert numba_path[1].dtype == numba_path[2].dtype == torch.float64


@pytest.mark.parametrize("multiroot", [True, False])
def test_compiled_equals_torch_float32(compiled, multiroot):
    scores, lengths = random_batch(14, [20, 7, 1, 13, 20], 1.0, torch.float32)
    g = torch.randn(scores.shape, generator=torch.Generator().manual_seed(4))
    torch_path, numba_path = _both_paths(scores, lengths, multiroot, g)
    for ours, reference in zip(numba_path, torch_path):
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("multiroot", [True, False])
def test_compiled_equals_gth_at_extreme_scales(compiled, multiroot):
    """Scores ×100 (where the closed form of the inverse cancels) against the PyTorch GTH code."""
    scores, lengths = check_arc_scores(*random_batch(12, [30, 12, 1, 25, 30], 100.0))
    gth_log_z, gth_marginals = _gth_marginals(scores, lengths, multiroot)
    crf = NonProjectiveDependencyCRF(scores, lengths, multiroot)
    torch.testing.assert_close(crf.log_partition, gth_log_z, rtol=1e-12, atol=1e-8)
    torch.testing.assert_close(crf.marginals, gth_marginals, rtol=0, atol=1e-9)


def test_dispatch(monkeypatch):
    """CPU tensors take the compiled kernels under ``numba`` and ``auto``, never under ``torch``."""
    forward = pytest.importorskip("synattn.structs.dependency._matrix_tree_kernels")
    tangent = pytest.importorskip("synattn.structs.dependency._matrix_tree_tangent_kernels")
    calls = []
    for kernels, name in ((forward, "gth_forward"), (tangent, "gth_tangent"), (tangent, "closed_form_tangent")):
        kernel = getattr(kernels, name)
        monkeypatch.setattr(kernels, name,
                            lambda *args, _k=kernel, _n=name: calls.append(_n) or _k(*args))
    scores, lengths = random_batch(15, [3, 2], 1.0)
    for name, expected in (("torch", []), ("numba", ["gth_forward", "closed_form_tangent"]),
                           ("auto", ["gth_forward", "closed_form_tangent"])):
        calls.clear()
        with use_backend(name):
            x = scores.clone().requires_grad_()
            NonProjectiveDependencyCRF(x, lengths).marginals.sum().backward()
        assert calls == expected, name


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0])
@pytest.mark.parametrize("longest", [30, 70])
def test_closed_form_backward_equals_the_forward_mode_kernel(compiled, multiroot, scale, longest):
    """The backward of the compiled marginals (two matrix products with the inverses the forward
    kept: the GTH kernel's below ``LAPACK_FROM`` words, LAPACK's from there, with the products
    batched by BLAS) against the forward-mode GTH kernel, at scales where the inverse's entries
    cancel."""
    from synattn.structs.dependency.matrix_tree import _marginals
    from synattn.structs.dependency.matrix_tree_gth import _compiled_closed_form_tangent, _compiled_marginals_tangent

    scores, lengths = check_arc_scores(*random_batch(21, [longest, 12, 1, 25, 30, 7], scale))
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    _, _, log_space, swap, inverse = _marginals(scores, lengths, multiroot, True, True, with_inverse=True)
    fast = ~log_space & (swap == 1)
    assert bool(fast.any())
    closed = _compiled_closed_form_tangent(scores, lengths, multiroot, g, inverse)
    forward_mode = _compiled_marginals_tangent(scores, lengths, multiroot, g)
    torch.testing.assert_close(closed[fast], forward_mode[fast], rtol=0, atol=1e-8 * g.abs().max().item())


def test_closed_form_backward_checks_each_sentence(compiled):
    """A sentence whose inverse is off (here: perturbed by 1e-6) fails the column-sum check and is
    recomputed by the forward-mode kernel; the others keep the closed form."""
    from synattn.structs.dependency.matrix_tree import _marginals
    from synattn.structs.dependency.matrix_tree_gth import _compiled_closed_form_tangent, _compiled_marginals_tangent

    scores, lengths = check_arc_scores(*random_batch(22, [9, 6, 9], 1.0))
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    inverse = _marginals(scores, lengths, True, True, True, with_inverse=True)[4]
    bad = inverse.clone()
    bad[1, :6, :6] += 1e-6 * torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    reference = _compiled_marginals_tangent(scores, lengths, True, g)
    closed = _compiled_closed_form_tangent(scores, lengths, True, g, bad)
    assert torch.equal(closed[1], reference[1])  # recomputed: the kernel's own numbers
    torch.testing.assert_close(closed, reference, rtol=0, atol=1e-12)
    garbage = _compiled_closed_form_tangent(scores, lengths, True, g, torch.zeros_like(inverse))
    assert torch.equal(garbage, reference)  # every sentence fails and is recomputed


def test_compiled_exp_within_an_ulp_or_zero_below_the_floor():
    kernels = pytest.importorskip("synattn.structs.dependency._matrix_tree_kernels")
    from synattn.structs._numba_math import EXP_MIN

    x = np.concatenate([-np.random.default_rng(0).exponential(30.0, 5000), np.linspace(-1, 0, 1001),
                        [0.0, -1e-300, EXP_MIN, EXP_MIN - 1e-9, -745.0, -1e9]])
    out = np.empty_like(x)
    kernels._exp_row(x, out)
    normal = x >= EXP_MIN
    assert (out[~normal] == 0).all()
    exact = np.exp(x[normal])
    assert (np.abs(out[normal] - exact) <= 4.5e-16 * exact).all()  # (np.exp: within 1 ulp too)
