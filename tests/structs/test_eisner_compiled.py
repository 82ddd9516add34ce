"""Compiled (numba) Eisner kernels: brute force on both backends, compiled == PyTorch path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import DependencyCRF
from synattn.structs.backend import use_backend
from tests.helpers.trees import all_trees, brute_force, check_log_z_bounds, dirty_scores, random_batch

pytest.importorskip("numba")

BACKENDS = ["torch", "numba"]

batches = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "scale": st.sampled_from([0.1, 1.0, 3.0]),
    "multiroot": st.booleans(),
})


def outputs(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, backend: str):
    """log Z, marginals, best score and best heads of one batch on one backend."""
    with use_backend(backend):
        crf = DependencyCRF(scores, lengths, multiroot)
        return crf.log_partition, crf.marginals, crf.max, crf.argmax


# ---------------------------------------------------------------------------------------------
# Brute force, on both backends.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(case=batches)
def test_matches_brute_force(backend, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], case["scale"])
    log_z, marginals, best, heads = outputs(scores, lengths, case["multiroot"], backend)
    for b, n in enumerate(case["lengths"]):
        ref_log_z, ref_marginals, ref_best = brute_force(scores[b], n, True, case["multiroot"])
        torch.testing.assert_close(log_z[b], ref_log_z, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(marginals[b], ref_marginals, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(best[b], ref_best, rtol=1e-12, atol=1e-12)
        tree = tuple(heads[b, :n].tolist())
        assert tree in set(map(tuple, all_trees(n, True, case["multiroot"])))
        torch.testing.assert_close(DependencyCRF(scores, lengths).score(heads)[b], ref_best)
        assert (heads[b, n:] == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_and_ignored_entries_do_not_matter(backend):
    scores, lengths = random_batch(0, [4, 2, 5, 1], 1.0)
    dirty = dirty_scores(scores, lengths)
    for multiroot in (True, False):
        clean = outputs(scores, lengths, multiroot, backend)
        noisy = outputs(dirty, lengths, multiroot, backend)
        for a, b in zip(clean, noisy):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Compiled == PyTorch path.
# ---------------------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), multiroot=st.booleans(),
       lengths=st.lists(st.integers(1, 30), min_size=1, max_size=5),
       scale=st.sampled_from([0.5, 2.0, 10.0]))
def test_compiled_equals_torch_path_on_ragged_batches(seed, multiroot, lengths, scale):
    scores, lengths = random_batch(seed, lengths, scale)
    ours = outputs(scores, lengths, multiroot, "numba")
    ref = outputs(scores, lengths, multiroot, "torch")
    for a, b in zip(ours[:3], ref[:3]):
        assert a.dtype == torch.float64
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert torch.equal(ours[3], ref[3])


@pytest.mark.parametrize("multiroot", [True, False])
def test_compiled_float32_close_to_float64(multiroot):
    scores, lengths = random_batch(1, [25, 1, 17, 9], 2.0)
    log_z, marginals, best, heads = outputs(scores.float(), lengths, multiroot, "numba")
    ref = outputs(scores, lengths, multiroot, "torch")
    assert log_z.dtype == marginals.dtype == best.dtype == torch.float32
    torch.testing.assert_close(log_z.double(), ref[0], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(marginals.double(), ref[1], rtol=0, atol=2e-6)
    torch.testing.assert_close(best.double(), ref[2], rtol=1e-6, atol=1e-5)
    assert torch.equal(heads, ref[3])


@pytest.mark.parametrize("multiroot", [True, False])
def test_length_one(multiroot):
    scores, lengths = random_batch(2, [1, 1, 1], 1.0)
    log_z, marginals, best, heads = outputs(scores, lengths, multiroot, "numba")
    torch.testing.assert_close(log_z, scores[:, 0, 1])  # the only tree: ROOT -> 1
    torch.testing.assert_close(best, scores[:, 0, 1])
    expected = torch.zeros_like(marginals)
    expected[:, 0, 1] = 1.0
    torch.testing.assert_close(marginals, expected, rtol=0, atol=0)
    assert heads.tolist() == [[0], [0], [0]]


@pytest.mark.parametrize("multiroot", [True, False])
def test_scores_times_100_stay_finite(multiroot):
    scores, lengths = random_batch(8, [30, 12, 1, 25], 100.0, torch.float32)
    log_z, marginals, best, _ = outputs(scores, lengths, multiroot, "numba")
    assert torch.isfinite(log_z).all() and torch.isfinite(marginals).all()
    check_log_z_bounds(log_z, best, lengths)
    words = torch.arange(1, scores.shape[-1]) <= lengths[:, None]
    # the kernels work in float64 inside: the marginals are those of the float32 scores
    torch.testing.assert_close(marginals.sum(1)[:, 1:][words], torch.ones(int(words.sum())),
                               atol=1e-5, rtol=0)
    assert marginals.min() >= 0 and marginals.max() <= 1 + 1e-6
    torch.testing.assert_close(marginals, outputs(scores.double(), lengths, multiroot, "torch")[1]
                               .float(), atol=1e-5, rtol=0)


def test_backend_choice_runs_the_kernels(monkeypatch):
    from synattn.structs.dependency import _eisner_kernels

    calls = []
    batch = _eisner_kernels._batch

    def counting(*args):
        calls.append(args[4])  # the mode
        return batch(*args)

    monkeypatch.setattr(_eisner_kernels, "_batch", counting)
    scores, lengths = random_batch(4, [5, 3], 1.0)
    outputs(scores, lengths, True, "torch")
    assert calls == []
    outputs(scores, lengths, True, "numba")
    assert sorted(calls) == sorted([_eisner_kernels.LOG, _eisner_kernels.LOG,
                                    _eisner_kernels.VITERBI])


# ---------------------------------------------------------------------------------------------
# Gradients of the compiled path.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("multiroot", [True, False])
def test_compiled_gradients(multiroot):
    scores, lengths = random_batch(5, [4, 2, 1], 1.0)
    scores.requires_grad_()
    with use_backend("numba"):
        torch.autograd.gradcheck(lambda x: DependencyCRF(x, lengths, multiroot).marginals,
                                 (scores,))
        torch.autograd.gradcheck(lambda x: DependencyCRF(x, lengths, multiroot).log_partition,
                                 (scores,))
        torch.autograd.gradgradcheck(
            lambda x: DependencyCRF(x, lengths, multiroot).log_partition, (scores,))


@pytest.mark.parametrize("multiroot", [True, False])
def test_compiled_hessian_vector_product_equals_torch_path(multiroot):
    """The marginals' backward (dual-number inside-outside) equals the PyTorch path's."""
    scores, lengths = random_batch(9, [12, 7, 1, 10], 2.0)
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    grads = {}
    for backend in BACKENDS:
        x = scores.clone().requires_grad_()
        with use_backend(backend):
            mu = DependencyCRF(x, lengths, multiroot).marginals
            log_z = DependencyCRF(x, lengths, multiroot).log_partition
        (grads[backend],) = torch.autograd.grad(mu, x, g)
        (grads[backend + " log_z"],) = torch.autograd.grad(log_z, x, torch.arange(4.0).double())
    torch.testing.assert_close(grads["numba"], grads["torch"], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(grads["numba log_z"], grads["torch log_z"], rtol=1e-10, atol=1e-12)


def test_log_partition_without_grad_equals_marginals_pass():
    scores, lengths = random_batch(6, [9, 4], 1.0)
    with use_backend("numba"):
        with torch.no_grad():
            plain = DependencyCRF(scores, lengths).log_partition
        tracked = DependencyCRF(scores.clone().requires_grad_(), lengths).log_partition
    torch.testing.assert_close(plain, tracked.detach(), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The kernels' exponential.
# ---------------------------------------------------------------------------------------------

def test_polynomial_exp_matches_math_exp():
    pytest.importorskip("numba")
    from synattn.structs._numba_math import EXP_MIN, exp as _exp

    xs = np.concatenate([-np.linspace(0.0, -EXP_MIN, 3001), np.linspace(0.0, 50.0, 201),
                         np.random.default_rng(0).uniform(-60.0, 1.0, 2000)])
    for x in xs:
        assert _exp(x) == pytest.approx(math.exp(x), rel=4e-16, abs=0.0)
    assert _exp(EXP_MIN - 1e-9) == 0.0 and _exp(-1e9) == 0.0 and _exp(-2e9) == 0.0
    assert math.isnan(_exp(float("nan")))
