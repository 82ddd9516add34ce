"""Linear-chain CRF against brute-force enumeration; the signed log-space backward.

Every property holds on both backends (pure PyTorch and the compiled numba kernels), and the two
give the same numbers.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import ChainMarginals, LinearChainCRF
from synattn.structs.backend import use_backend
from synattn.structs.chain.crf import ChainLogPartition, chain_log_partition, forward_backward, transfer_matrices
from synattn.structs.semirings.signed import signed_exp, signed_log, signed_logsumexp
from tests.helpers.backends import BACKENDS, on
from tests.helpers.chains import brute_force


def random_chain(seed: int, lengths: list[int], C: int, scale: float, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    unary = torch.randn(len(lengths), n, C, generator=gen, dtype=dtype) * scale
    edge = torch.randn(len(lengths), n - 1, C, C, generator=gen, dtype=dtype) * scale
    return unary, edge, torch.tensor(lengths)


chains = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "C": st.integers(1, 3),
    "scale": st.sampled_from([0.1, 1.0, 3.0]),
    "scan": st.sampled_from([None, True, False]),
})


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(case=chains)
def test_matches_brute_force(backend, case):
    with on(backend):
        check_edge_form_against_brute_force(case)


def check_edge_form_against_brute_force(case):
    unary, edge, lengths = random_chain(case["seed"], case["lengths"], case["C"], case["scale"])
    # edge form: unaries folded into the pair potentials of the first position and the rest
    log_potentials = edge + unary[:, 1:, None, :]
    if log_potentials.shape[1]:
        log_potentials[:, 0] += unary[:, 0, :, None]
    crf = LinearChainCRF(log_potentials, lengths, scan=case["scan"])
    for b, n in enumerate(case["lengths"]):
        if n == 1:  # the edge form has no unary scores: a single position is uniform
            log_z = torch.tensor(case["C"], dtype=torch.float64).log()
            node = torch.full((1, case["C"]), 1.0 / case["C"], dtype=torch.float64)
        else:
            log_z, node, pair, best, _ = brute_force(unary[b], edge[b], n)
            torch.testing.assert_close(crf.edge_marginals[b, :n - 1], pair)
            assert crf.edge_marginals[b, n - 1:].abs().sum() == 0
            torch.testing.assert_close(crf.max[b], best)
            torch.testing.assert_close(crf.score(crf.argmax)[b], best)
        torch.testing.assert_close(crf.log_partition[b], log_z)
        torch.testing.assert_close(crf.marginals[b, :n], node)
        assert (crf.argmax[b, n:] == -1).all() and crf.marginals[b, n:].abs().sum() == 0


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(case=chains)
def test_unary_transition_form_matches_brute_force(backend, case):
    with on(backend):
        check_unary_transition_form_against_brute_force(case)


def check_unary_transition_form_against_brute_force(case):
    unary, edge, lengths = random_chain(case["seed"], case["lengths"], case["C"], case["scale"])
    transition = edge[0, 0] if edge.shape[1] else torch.zeros(case["C"], case["C"]).double()
    crf = LinearChainCRF(unary=unary, transition=transition, lengths=lengths, scan=case["scan"])
    for b, n in enumerate(case["lengths"]):
        shared = transition.expand(max(n - 1, 0), -1, -1)
        log_z, node, pair, best, labels = brute_force(unary[b], shared, n)
        torch.testing.assert_close(crf.log_partition[b], log_z)
        torch.testing.assert_close(crf.marginals[b, :n], node)
        torch.testing.assert_close(crf.max[b], best)
        torch.testing.assert_close(crf.score(crf.argmax)[b], best)
        assert crf.argmax[b, :n].tolist() == labels.tolist()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), C=st.integers(1, 5), n=st.integers(1, 40))
def test_scan_equals_sequential(seed, C, n):
    gen = torch.Generator().manual_seed(seed)
    u0 = torch.randn(C, 3, generator=gen, dtype=torch.float64)  # internal layout: [C, B]
    T = torch.randn(C, C, n - 1, 3, generator=gen, dtype=torch.float64) * 2
    for a, b in zip(forward_backward(u0, T, scan=True), forward_backward(u0, T, scan=False)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(chain_log_partition(u0, T, scan=True),
                               chain_log_partition(u0, T, scan=False))


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=15, deadline=None)
@given(case=chains)
def test_batched_ragged_equals_one_by_one(backend, case):
    with on(backend):
        check_batched_ragged_equals_one_by_one(case)


def check_batched_ragged_equals_one_by_one(case):
    unary, edge, lengths = random_chain(case["seed"], case["lengths"], case["C"], case["scale"])
    crf = LinearChainCRF(unary=unary, transition=edge[:, 0] if edge.shape[1] else None,
                         lengths=lengths)
    for b, n in enumerate(case["lengths"]):
        transition = edge[b:b + 1, 0] if edge.shape[1] else None
        one = LinearChainCRF(unary=unary[b:b + 1, :n], transition=transition)
        torch.testing.assert_close(crf.log_partition[b:b + 1], one.log_partition)
        torch.testing.assert_close(crf.marginals[b:b + 1, :n], one.marginals)
        assert crf.argmax[b, :n].tolist() == one.argmax[0].tolist()


@pytest.mark.parametrize("backend, scan", [("torch", True), ("torch", False), ("numba", None)])
def test_signed_log_backward_equals_double_backward_and_finite_differences(backend, scan):
    with on(backend):
        check_signed_log_backward(scan)


def check_signed_log_backward(scan):
    unary, edge, lengths = random_chain(0, [6, 4, 1, 5], 3, 1.5)
    unary.requires_grad_()
    edge.requires_grad_()

    def marginals(u, e):
        return LinearChainCRF(unary=u, transition=e[:, 0], lengths=lengths, scan=scan).marginals

    torch.autograd.gradcheck(marginals, (unary, edge))  # finite differences (float64)
    g = torch.randn(unary.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ours = torch.autograd.grad(marginals(unary, edge), (unary, edge), g)
    # autograd's double backward of the log-partition
    log_z = LinearChainCRF(unary=unary, transition=edge[:, 0], lengths=lengths, scan=scan).log_partition
    (mu,) = torch.autograd.grad(log_z.sum(), unary, create_graph=True)
    double = torch.autograd.grad(mu, (unary, edge), g, allow_unused=True)
    torch.testing.assert_close(ours[0], double[0])
    torch.testing.assert_close(ours[1], double[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_marginals_function_direct_gradcheck(backend):
    gen = torch.Generator().manual_seed(4)
    u0 = torch.randn(2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    T = torch.randn(2, 2, 5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 6, dtype=torch.bool)
    with on(backend):
        torch.autograd.gradcheck(lambda a, b: ChainMarginals.apply(a, b, mask, None), (u0, T))


@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_marginals_are_the_gradient(backend):
    unary, edge, lengths = random_chain(1, [5, 2, 4, 1], 3, 1.0)
    potentials = (edge + unary[:, 1:, None, :]).requires_grad_()
    with on(backend):
        crf = LinearChainCRF(potentials, lengths)
        (grad,) = torch.autograd.grad(crf.log_partition.sum(), potentials)
        torch.testing.assert_close(crf.edge_marginals, grad)  # (with autograd: differentiable)
        with torch.no_grad():
            torch.testing.assert_close(LinearChainCRF(potentials, lengths).edge_marginals, grad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("C", [2, 16])
def test_scores_times_100_stay_finite(backend, C):
    with on(backend):
        check_scores_times_100_stay_finite(C)


def check_scores_times_100_stay_finite(C):
    unary, edge, lengths = random_chain(2, [200, 50, 1, 120], C, 100.0, torch.float32)
    crf = LinearChainCRF(unary=unary, transition=edge[0, 0], lengths=lengths)
    unary.requires_grad_()
    marginals = LinearChainCRF(unary=unary, transition=edge[0, 0], lengths=lengths).marginals
    (grad,) = torch.autograd.grad((marginals * torch.randn_like(marginals)).sum(), unary)
    assert torch.isfinite(crf.log_partition).all() and torch.isfinite(marginals).all()
    assert torch.isfinite(grad).all()
    assert (crf.log_partition >= crf.max - 1e-6 * crf.max.abs()).all()
    assert (crf.log_partition <= crf.max + lengths * torch.log(torch.tensor(float(C))) + 1e-2).all()
    valid = torch.arange(200) < lengths[:, None]
    # float32 log-scores of size ~1e4 carry absolute rounding errors of ~1e-2
    torch.testing.assert_close(marginals.sum(-1)[valid], torch.ones(int(valid.sum())),
                               atol=5e-2, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_inputs_and_autocast_run_in_float32(backend):
    with on(backend):
        check_half_inputs_and_autocast()


def check_half_inputs_and_autocast():
    unary, edge, lengths = random_chain(3, [7, 3], 2, 1.0, torch.float32)
    reference = LinearChainCRF(unary=unary.bfloat16().float(), transition=edge[0, 0].bfloat16().float(),
                               lengths=lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        crf = LinearChainCRF(unary=unary.bfloat16(), transition=edge[0, 0].bfloat16(), lengths=lengths)
        marginals = crf.marginals
    assert marginals.dtype == torch.float32
    torch.testing.assert_close(marginals, reference.marginals)


def test_signed_logsumexp_matches_ordinary_sums():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(50, 7, generator=gen, dtype=torch.float64) * 3
    x[0] = torch.tensor([1.0, -1.0, 2.0, -2.0, 0.0, 0.5, -0.5])  # cancels exactly
    logabs, sign = signed_log(x)
    total = signed_exp(*signed_logsumexp(logabs, sign, 1))
    torch.testing.assert_close(total, x.sum(1))
    big = signed_logsumexp(logabs + 1000.0, sign, 1)  # e^1000 overflows; its log does not
    torch.testing.assert_close(big[0][1:], (x.sum(1).abs().log() + 1000.0)[1:])
    assert torch.isfinite(big[0]).all()


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="either"):
        LinearChainCRF()
    with pytest.raises(ValueError, match="lengths"):
        LinearChainCRF(unary=torch.zeros(2, 3, 2), lengths=torch.tensor([3, 0]))
    with pytest.raises(ValueError, match="transition"):
        LinearChainCRF(unary=torch.zeros(2, 3, 2), transition=torch.zeros(3, 3))


# ---------------------------------------------------------------------------------------------
# The compiled kernels against the PyTorch path.
# ---------------------------------------------------------------------------------------------

def everything(unary, edge, lengths, g, form):
    """Every output of a CRF and the gradients of marginals and log-partition, on one backend."""
    unary, edge = unary.clone().requires_grad_(), edge.clone().requires_grad_()
    if form == "edge":
        crf = LinearChainCRF(edge + unary[:, 1:, None, :], lengths)
    else:
        crf = LinearChainCRF(unary=unary, transition=edge[:, 0], lengths=lengths)
    mu = crf.marginals
    grads_mu = torch.autograd.grad((mu * g).sum(), (unary, edge), allow_unused=True, retain_graph=True)
    grads_z = torch.autograd.grad((crf.log_partition * g[:, 0, 0]).sum(), (unary, edge),
                                  allow_unused=True)
    with torch.no_grad():
        xi = crf.edge_marginals
    return (crf.log_partition, mu, xi, crf.max, crf.argmax, *grads_mu, *grads_z)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), longest=st.integers(2, 30),
       others=st.lists(st.integers(1, 30), max_size=5), C=st.integers(1, 5),
       form=st.sampled_from(["edge", "unary"]), dtype=st.sampled_from([torch.float64, torch.float32]))
def test_compiled_equals_torch_path_on_ragged_batches(seed, longest, others, C, form, dtype):
    pytest.importorskip("numba")
    unary, edge, lengths = random_chain(seed, [*others, longest], C, 2.0, dtype)
    g = torch.randn(unary.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    with use_backend("torch"):  # the kernels compute in float64 whatever the dtype
        expected = everything(unary.double(), edge.double(), lengths, g.double(), form)
    with use_backend("numba"):
        actual = everything(unary, edge, lengths, g, form)
    tol = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    for name, a, e in zip(["log Z", "marginals", "edge marginals", "max", "argmax", "d mu/d unary",
                           "d mu/d edge", "d log Z/d unary", "d log Z/d edge"], actual, expected):
        assert a is not None and e is not None, name
        if name == "argmax":
            if dtype == torch.float64:  # (in float32, near-ties may round either way)
                assert torch.equal(a, e)
            continue
        assert a.dtype == dtype, name
        torch.testing.assert_close(a, e.to(dtype), **tol, msg=lambda m, name=name: f"{name}: {m}")


def test_compiled_backward_equals_torch_path_at_padded_positions():
    """Direct calls on identity-padded transfer matrices: the gradients of the padding agree too
    (the compiled kernels stop at each length and write those in closed form)."""
    pytest.importorskip("numba")
    unary, edge, lengths = random_chain(6, [7, 1, 4, 2], 3, 1.0)
    mask = torch.arange(7) < lengths[:, None]
    u0, T = transfer_matrices(unary, edge, mask)
    g = torch.randn(4, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    grads = {}
    for backend in BACKENDS:
        with use_backend(backend):
            a, b = u0.clone().requires_grad_(), T.clone().requires_grad_()
            mu_grads = torch.autograd.grad((ChainMarginals.apply(a, b, mask, None) * g).sum(), (a, b))
            log_z = (ChainLogPartition.apply(a, b, mask) if backend == "numba"
                     else chain_log_partition(a, b))
            grads[backend] = (*mu_grads, *torch.autograd.grad(log_z.sum(), (a, b)))
    for a, e in zip(grads["numba"], grads["torch"]):
        torch.testing.assert_close(a, e)
    assert grads["numba"][1][:, :, 4:, 3].abs().sum() > 0  # the padding's diagonal has a gradient


def test_compiled_log_partition_gradcheck_and_gradgradcheck():
    pytest.importorskip("numba")
    unary, edge, lengths = random_chain(8, [5, 3, 1], 2, 1.0)
    potentials = (edge + unary[:, 1:, None, :]).requires_grad_()
    unary = unary.requires_grad_()

    def log_z(u, e):
        return LinearChainCRF(unary=u, transition=e[:, 0], lengths=lengths).log_partition

    with use_backend("numba"):
        torch.autograd.gradcheck(lambda e: LinearChainCRF(e, lengths).log_partition, (potentials,))
        torch.autograd.gradgradcheck(log_z, (unary, edge.requires_grad_()))


def test_importing_synattn_does_not_load_the_kernels():
    code = ("import sys, synattn, synattn.structs; "
            "assert 'synattn.structs.chain._kernels' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("C", [2, 5])
def test_compiled_expectation_backward_equals_signed_semifield_at_large_scales(C):
    """Scores ×30 (float64): many marginals underflow; the compiled backward (conditional
    expectations) and the PyTorch path's signed log-space backward still agree."""
    pytest.importorskip("numba")
    unary, edge, lengths = random_chain(11, [40, 17, 1, 33], C, 30.0)
    g = torch.randn(4, 40, C, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    grads = {}
    for backend in BACKENDS:
        with use_backend(backend):
            u, e = unary.clone().requires_grad_(), edge.clone().requires_grad_()
            mu = LinearChainCRF(unary=u, transition=e[:, 0], lengths=lengths).marginals
            grads[backend] = torch.autograd.grad((mu * g).sum(), (u, e))
    for a, b in zip(grads["numba"], grads["torch"]):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7)


def test_log_partition_from_unary_and_transition_recomputes_underflowed_sums():
    """The compiled ``log Z`` of a chain given as ``unary`` and ``transition`` reads the two
    factors (no transfer matrices): here label 1's every term at positions 1 and 2 is ``e^-800``
    of the largest one, so its sums underflow and are recomputed in log space. The labellings
    ending in 1 (label 0 is masked last) score -800 three times: ``log Z = -800 + log 3``."""
    pytest.importorskip("numba")
    inf = float("inf")
    unary = torch.tensor([[[0.0, -800.0], [0.0, 0.0], [-inf, 0.0]]], dtype=torch.float64)
    transition = torch.tensor([[0.0, -800.0], [0.0, 0.0]], dtype=torch.float64)
    with use_backend("numba"):
        log_z = LinearChainCRF(unary=unary, transition=transition).log_partition
    torch.testing.assert_close(log_z, torch.tensor([-800.0 + math.log(3)], dtype=torch.float64),
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_log_partition_from_unary_and_transition_equals_the_edge_form(scale):
    """The same chains as unary and per-chain transitions (read as factors) and as edge
    potentials (transfer matrices): ``log Z`` and its gradients agree, masks and ragged lengths
    included."""
    pytest.importorskip("numba")
    gen = torch.Generator().manual_seed(int(scale))
    unary, _, lengths = random_chain(int(scale), [9, 2, 6, 9], 4, scale)
    transition = scale * torch.randn(4, 4, 4, generator=gen, dtype=torch.float64)
    unary[torch.rand(unary.shape, generator=gen) < 0.2] = -float("inf")
    transition[torch.rand(transition.shape, generator=gen) < 0.2] = -float("inf")
    grads = []
    with use_backend("numba"):
        for form in ("factors", "edge"):
            u, t = unary.clone().requires_grad_(), transition.clone().requires_grad_()
            if form == "factors":
                crf = LinearChainCRF(unary=u, transition=t, lengths=lengths)
            else:  # the edge form has no unaries: fold them into the transfer matrices
                edge = t.unsqueeze(1) + u[:, 1:, None, :]
                edge = torch.cat((edge[:, :1] + u[:, :1, :, None], edge[:, 1:]), 1)
                crf = LinearChainCRF(edge, lengths)
            log_z = crf.log_partition
            grads.append((log_z, *torch.autograd.grad(log_z.where(log_z > -float("inf"), 0).sum(), (u, t))))
    assert torch.isfinite(grads[0][0]).any()
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-10)
