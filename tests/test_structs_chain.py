"""Linear-chain CRF against brute-force enumeration; the signed log-space backward."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from synattn.structs import ChainMarginals, LinearChainCRF
from synattn.structs.chain import chain_log_partition, forward_backward
from synattn.structs.semiring import signed_exp, signed_log, signed_logsumexp


def brute_force(unary: torch.Tensor, edge: torch.Tensor, n: int):
    """log Z, node marginals ``[n, C]``, pair marginals ``[n-1, C, C]``, best score, best labels."""
    C = unary.shape[-1]
    labellings = torch.tensor(list(itertools.product(range(C), repeat=n)))  # [C^n, n]
    pos = torch.arange(n)
    scores = unary[pos, labellings].sum(1)
    if n > 1:
        scores = scores + edge[pos[:-1], labellings[:, :-1], labellings[:, 1:]].sum(1)
    log_z = torch.logsumexp(scores, 0)
    prob = (scores - log_z).exp()
    node = torch.stack([(prob[:, None] * (labellings[:, i, None] == torch.arange(C))).sum(0)
                        for i in range(n)])
    pair = unary.new_zeros(max(n - 1, 0), C, C)
    for i in range(n - 1):
        pair[i].index_put_((labellings[:, i], labellings[:, i + 1]), prob, accumulate=True)
    return log_z, node, pair, scores.max(), labellings[scores.argmax()]


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


@settings(max_examples=60, deadline=None)
@given(case=chains)
def test_matches_brute_force(case):
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


@settings(max_examples=60, deadline=None)
@given(case=chains)
def test_unary_transition_form_matches_brute_force(case):
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


@settings(max_examples=15, deadline=None)
@given(case=chains)
def test_batched_ragged_equals_one_by_one(case):
    unary, edge, lengths = random_chain(case["seed"], case["lengths"], case["C"], case["scale"])
    crf = LinearChainCRF(unary=unary, transition=edge[:, 0] if edge.shape[1] else None,
                         lengths=lengths)
    for b, n in enumerate(case["lengths"]):
        transition = edge[b:b + 1, 0] if edge.shape[1] else None
        one = LinearChainCRF(unary=unary[b:b + 1, :n], transition=transition)
        torch.testing.assert_close(crf.log_partition[b:b + 1], one.log_partition)
        torch.testing.assert_close(crf.marginals[b:b + 1, :n], one.marginals)
        assert crf.argmax[b, :n].tolist() == one.argmax[0].tolist()


@pytest.mark.parametrize("scan", [True, False])
def test_signed_log_backward_equals_double_backward_and_finite_differences(scan):
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


def test_chain_marginals_function_direct_gradcheck():
    gen = torch.Generator().manual_seed(4)
    u0 = torch.randn(2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    T = torch.randn(2, 2, 5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 6, dtype=torch.bool)
    torch.autograd.gradcheck(lambda a, b: ChainMarginals.apply(a, b, mask, None), (u0, T))


def test_edge_marginals_are_the_gradient():
    unary, edge, lengths = random_chain(1, [5, 2, 4], 3, 1.0)
    potentials = (edge + unary[:, 1:, None, :]).requires_grad_()
    crf = LinearChainCRF(potentials, lengths)
    (grad,) = torch.autograd.grad(crf.log_partition.sum(), potentials)
    torch.testing.assert_close(crf.edge_marginals, grad)


@pytest.mark.parametrize("C", [2, 16])
def test_scores_times_100_stay_finite(C):
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


def test_half_inputs_and_autocast_run_in_float32():
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
