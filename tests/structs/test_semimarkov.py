"""SemiMarkovCRF against brute-force enumeration (every backend), batching, gradients, the
linear chain it generalises, decoding, masks and argument checks, and torch-struct."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import LinearChainCRF, SemiMarkovCRF
from synattn.structs.backend import numba_available, use_backend
from tests.helpers.segments import structures

BACKENDS = ["torch", "reference"] + (["numba"] if numba_available() else [])


def brute_force(edge: torch.Tensor, L: int):
    """log Z, marginals, best score, the scores of every structure and the structures, for one
    sequence ``edge [n-1, K, C, C]`` of length ``L``, by enumeration."""
    _, K, C, _ = edge.shape
    ys = structures(L, K, C, edge.shape[0] + 1)
    one = SemiMarkovCRF(edge.expand(len(ys), *edge.shape), torch.full((len(ys),), L))
    parts = one.parts(ys)  # [S, n-1, K, C, C]
    scores = torch.where(parts > 0, edge, 0.0).flatten(1).sum(1)
    scores = torch.where(scores > -1e8, scores, -float("inf"))
    log_z = torch.logsumexp(scores, 0)
    mu = ((scores - log_z).exp().view(-1, 1, 1, 1, 1) * parts).sum(0)
    return log_z, mu, scores.max(), scores, ys


cases = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "K": st.integers(2, 4),
    "C": st.integers(1, 3),
    "masked": st.booleans(),
})


def random_crf_inputs(seed, lengths, K, C, masked):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    edge = torch.randn(len(lengths), n - 1, K, C, C, generator=gen, dtype=torch.float64) * 2
    if masked:
        edge = edge.masked_fill(torch.rand(edge.shape, generator=gen) < 0.3, -float("inf"))
    return edge, torch.tensor(lengths)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=15, deadline=None)
@given(case=cases)
def test_matches_brute_force(backend, case):
    edge, lengths = random_crf_inputs(**case)
    with use_backend(backend):
        crf = SemiMarkovCRF(edge, lengths)
        log_z, mu, best, argmax = crf.log_partition, crf.marginals, crf.max, crf.argmax
    for b, L in enumerate(lengths.tolist()):
        z, m, top, _, _ = brute_force(edge[b], L)
        torch.testing.assert_close(log_z[b], z)
        if z > -float("inf"):
            torch.testing.assert_close(mu[b], m)
            torch.testing.assert_close(best[b], top)
        else:
            assert mu[b].abs().sum() == 0 and best[b] == -float("inf") and (argmax[b] == -1).all()
    # score(argmax) = max, and log_prob(argmax) = max - log Z
    torch.testing.assert_close(crf.score(argmax), best)


@settings(max_examples=15, deadline=None)
@given(case=cases)
def test_batched_with_lengths_equals_unbatched(case):
    edge, lengths = random_crf_inputs(**case)
    crf = SemiMarkovCRF(edge, lengths)
    for b, L in enumerate(lengths.tolist()):
        one = SemiMarkovCRF(edge[b:b + 1, :L - 1], lengths[b:b + 1])
        torch.testing.assert_close(crf.log_partition[b:b + 1], one.log_partition)
        torch.testing.assert_close(crf.marginals[b:b + 1, :L - 1], one.marginals)
        assert crf.marginals[b, L - 1:].abs().sum() == 0
        assert torch.equal(crf.argmax[b, :L], one.argmax[0]) and (crf.argmax[b, L:] == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_marginals_are_the_gradient_of_log_z_and_differentiable(backend):
    edge, lengths = random_crf_inputs(3, [5, 3, 1], 3, 2, False)
    x = edge.clone().requires_grad_()
    with use_backend(backend):
        (grad,) = torch.autograd.grad(SemiMarkovCRF(x, lengths).log_partition.sum(), x)
        torch.testing.assert_close(SemiMarkovCRF(edge, lengths).marginals, grad)
        torch.autograd.gradcheck(lambda e: SemiMarkovCRF(e, lengths).marginals, (x,))
        torch.autograd.gradcheck(lambda e: SemiMarkovCRF(e, lengths).entropy, (x,))


def test_two_positions_per_segment_at_most_is_the_linear_chain():
    gen = torch.Generator().manual_seed(5)
    edge = torch.randn(3, 4, 2, 3, 3, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 1])
    semi, chain = SemiMarkovCRF(edge, lengths), LinearChainCRF(edge[:, :, 1], lengths)
    torch.testing.assert_close(semi.log_partition, chain.log_partition)
    torch.testing.assert_close(semi.marginals[:, :, 1], chain.edge_marginals)
    assert torch.equal(semi.argmax, chain.argmax)


def test_entropy_and_kl_match_brute_force():
    edge, lengths = random_crf_inputs(6, [5, 4], 3, 2, True)
    other, _ = random_crf_inputs(7, [5, 4], 3, 2, False)
    p, q = SemiMarkovCRF(edge, lengths), SemiMarkovCRF(other, lengths)
    for b, L in enumerate(lengths.tolist()):
        zp, _, _, sp, _ = brute_force(edge[b], L)
        zq, _, _, sq, _ = brute_force(other[b], L)
        prob = (sp - zp).exp()
        keep = prob > 0
        torch.testing.assert_close(p.entropy[b], -(prob[keep] * (sp - zp)[keep]).sum())
        torch.testing.assert_close(p.kl(q)[b], (prob[keep] * ((sp - zp) - (sq - zq))[keep]).sum())


def test_kbest_lists_the_best_structures_in_order():
    edge, lengths = random_crf_inputs(8, [5, 3, 1], 3, 2, True)
    scores, ys = SemiMarkovCRF(edge, lengths).kbest(40)
    for b, L in enumerate(lengths.tolist()):
        _, _, _, all_scores, all_ys = brute_force(edge[b], L)
        finite = all_scores > -float("inf")
        want = all_scores[finite].sort(descending=True).values
        k = min(40, len(want))
        torch.testing.assert_close(scores[b, :k], want[:k])
        assert (scores[b, k:] == -float("inf")).all() and (ys[b, k:] == -1).all()
        listed = {tuple(y) for y in ys[b, :k].tolist()}
        assert len(listed) == k and listed <= {tuple(y) for y in all_ys[finite].tolist()}
        got = SemiMarkovCRF(edge[b:b + 1].expand(k, -1, -1, -1, -1), lengths[b:b + 1].expand(k))
        torch.testing.assert_close(got.score(ys[b, :k]), scores[b, :k])


def test_samples_follow_the_distribution():
    edge, lengths = random_crf_inputs(9, [4, 3], 3, 2, True)
    crf = SemiMarkovCRF(edge, lengths)
    samples = crf.sample(4000, generator=torch.Generator().manual_seed(0))  # [S, B, n]
    assert samples.shape == (4000, 2, 4)
    for b, L in enumerate(lengths.tolist()):
        z, _, _, scores, ys = brute_force(edge[b], L)
        prob = (scores - z).exp()
        counts = (samples[:, b, None, :] == ys[None]).all(-1).double().mean(0)  # [S_all]
        assert counts.sum() == 1.0  # every sample is a structure of the CRF
        assert (counts[prob == 0] == 0).all()
        assert (counts - prob).abs().max() < 0.03


def test_masks_and_no_structure():
    edge = torch.zeros(2, 3, 2, 1, 1)
    edge[0, :, 1] = -float("inf")  # every segment masked: no structure
    crf = SemiMarkovCRF(edge, torch.tensor([4, 1]))
    assert crf.log_partition[0] == -float("inf") and crf.log_partition[1] == 0.0
    assert crf.feasible.tolist() == [False, True]
    assert (crf.argmax[0] == -1).all() and crf.argmax[1].tolist() == [0, -1, -1, -1]
    assert (crf.sample(2)[:, 0] == -1).all() and crf.entropy[0] == 0
    assert crf.marginals[0].abs().sum() == 0


def test_arguments_are_checked():
    edge = torch.randn(2, 3, 3, 2, 2)
    with pytest.raises(ValueError, match="NaN"):
        SemiMarkovCRF(edge.clone().index_put_((torch.tensor(0), torch.tensor(0), torch.tensor(1)),
                                              torch.tensor(float("nan"))))
    past = edge.clone()
    past[1, 1:] = float("nan")  # past the length of sequence 1 (and k = 0): ignored
    past[:, :, 0] = float("nan")
    assert torch.isfinite(SemiMarkovCRF(past, torch.tensor([4, 2])).log_partition).all()
    for bad, match in [(edge.numpy(), "torch.Tensor"), (edge[..., :1], r"\[B, n-1, K, C, C\]"),
                       (edge[:, :, :1], "K >= 2")]:
        with pytest.raises(ValueError, match=match):
            SemiMarkovCRF(bad)
    with pytest.raises(ValueError, match="lengths"):
        SemiMarkovCRF(edge, torch.tensor([5, 2]))
    crf = SemiMarkovCRF(edge)
    with pytest.raises(ValueError, match="outside -1..1"):
        crf.score(torch.tensor([[0, 2, -1, 0], [0, 0, 0, 0]]))
    # not a structure: position 0 unlabelled, a segment longer than K-1, the end unlabelled
    y = torch.tensor([[-1, 0, 0, 0], [0, -1, -1, 1]])
    assert crf.score(y).tolist() == [-float("inf"), -float("inf")]
    assert crf.log_prob(torch.tensor([[0, 0, 0, -1], [0, 0, 0, 0]]))[0] == -float("inf")


def test_equals_torch_struct_on_equal_lengths():
    torch_struct = pytest.importorskip("torch_struct")
    edge, _ = random_crf_inputs(10, [6, 6, 6], 4, 3, False)
    ours = SemiMarkovCRF(edge)
    with pytest.warns(UserWarning) if False else _quiet():
        theirs = torch_struct.SemiMarkovCRF(edge.transpose(-1, -2))
        torch.testing.assert_close(ours.log_partition, theirs.partition.detach())
        torch.testing.assert_close(ours.marginals, theirs.marginals.detach().transpose(-1, -2))
        torch.testing.assert_close(ours.max, theirs.max.detach())
        compact, _ = torch_struct.SemiMarkov.from_parts(theirs.argmax.detach())
    assert torch.equal(ours.argmax, compact)


def _quiet():
    import warnings

    manager = warnings.catch_warnings()
    manager.__enter__()
    warnings.simplefilter("ignore")

    class _Exit:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            manager.__exit__(*exc)

    return _Exit()


@pytest.mark.parametrize("backend", BACKENDS)
def test_third_derivative_matches_finite_differences(backend):
    from tests.helpers.derivatives import third_derivative_check

    with use_backend(backend):
        third_derivative_check(lambda x: SemiMarkovCRF(x).marginals, (1, 3, 3, 2, 2))
