"""Dependency CRFs (Eisner and Matrix-Tree) against brute-force enumeration of trees."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import DependencyCRF, NonProjectiveDependencyCRF
from synattn.structs.dependency.arc_scores import check_arc_scores
from synattn.structs.dependency.eisner import eisner_inside, eisner_outside, from_width_major, to_width_major
from synattn.structs.dependency.matrix_tree import _gth_marginals, _lapack_marginals, best_tree
from tests.helpers.trees import all_trees, brute_force, check_log_z_bounds, dirty_scores, random_batch

CRFS = {"projective": DependencyCRF, "nonprojective": NonProjectiveDependencyCRF}


# ---------------------------------------------------------------------------------------------
# Brute force.
# ---------------------------------------------------------------------------------------------


batches = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "scale": st.sampled_from([0.1, 1.0, 3.0]),
    "multiroot": st.booleans(),
})


# ---------------------------------------------------------------------------------------------
# Exactness.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
@settings(max_examples=40, deadline=None)
@given(case=batches)
def test_matches_brute_force(kind, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], case["scale"])
    crf = CRFS[kind](scores, lengths, multiroot=case["multiroot"])
    heads = crf.argmax
    for b, n in enumerate(case["lengths"]):
        log_z, marginals, best = brute_force(scores[b], n, kind == "projective", case["multiroot"])
        torch.testing.assert_close(crf.log_partition[b], log_z, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(crf.marginals[b, :n + 1, :n + 1], marginals[:n + 1, :n + 1],
                                   rtol=1e-8, atol=1e-9)
        assert crf.marginals[b, n + 1:].abs().sum() == 0 and crf.marginals[b, :, n + 1:].abs().sum() == 0
        torch.testing.assert_close(crf.score(heads)[b], best)
        torch.testing.assert_close(crf.max[b], best)
        assert (heads[b, n:] == -1).all()
        tree = tuple(heads[b, :n].tolist())
        assert tree in set(map(tuple, all_trees(n, kind == "projective", case["multiroot"])))


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
@settings(max_examples=15, deadline=None)
@given(case=batches)
def test_float32_within_1e_5(kind, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], 1.0)
    crf = CRFS[kind](scores.float(), lengths, multiroot=case["multiroot"])
    for b, n in enumerate(case["lengths"]):
        log_z, marginals, _ = brute_force(scores[b], n, kind == "projective", case["multiroot"])
        assert crf.marginals.dtype == torch.float32
        assert abs(crf.log_partition[b].item() - log_z.item()) < 1e-5 * max(1.0, abs(log_z.item()))
        assert (crf.marginals[b].double() - marginals).abs().max() < 1e-5


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
@settings(max_examples=15, deadline=None)
@given(case=batches)
def test_batched_ragged_equals_one_by_one(kind, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], case["scale"])
    crf = CRFS[kind](scores, lengths, multiroot=case["multiroot"])
    for b, n in enumerate(case["lengths"]):
        one = CRFS[kind](scores[b:b + 1, :n + 1, :n + 1], multiroot=case["multiroot"])
        torch.testing.assert_close(crf.log_partition[b:b + 1], one.log_partition)
        torch.testing.assert_close(crf.marginals[b:b + 1, :n + 1, :n + 1], one.marginals)
        assert crf.argmax[b, :n].tolist() == one.argmax[0].tolist()


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
def test_padding_and_ignored_entries_do_not_matter(kind):
    scores, lengths = random_batch(0, [4, 2, 5], 1.0)
    dirty = dirty_scores(scores, lengths)
    clean, noisy = CRFS[kind](scores, lengths), CRFS[kind](dirty, lengths)
    torch.testing.assert_close(clean.log_partition, noisy.log_partition)
    torch.testing.assert_close(clean.marginals, noisy.marginals)
    assert torch.equal(clean.argmax, noisy.argmax)


# ---------------------------------------------------------------------------------------------
# Gradients.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("multiroot", [True, False])
def test_eisner_explicit_outside_equals_autograd(multiroot):
    scores, lengths = random_batch(3, [6, 3, 1, 5], 2.0)
    sd = to_width_major(scores).requires_grad_()
    log_z, K, sums = eisner_inside(sd, lengths, multiroot)
    (auto,) = torch.autograd.grad(log_z.sum(), sd)
    explicit = eisner_outside(sd.detach(), lengths, multiroot, K.detach(), [x.detach() for x in sums])
    torch.testing.assert_close(explicit, auto, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(from_width_major(to_width_major(scores)).triu(1),
                               scores.triu(1))


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
@pytest.mark.parametrize("multiroot", [True, False])
def test_marginals_are_differentiable(kind, multiroot):
    scores, lengths = random_batch(5, [4, 2, 1], 1.0)
    scores.requires_grad_()

    def marginals(x):
        return CRFS[kind](x, lengths, multiroot).marginals

    torch.autograd.gradcheck(marginals, (scores,))
    # the marginals' backward equals autograd's double backward of the log-partition
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (ours,) = torch.autograd.grad(marginals(scores), scores, g)
    log_z = CRFS[kind](scores, lengths, multiroot).log_partition
    (mu,) = torch.autograd.grad(log_z.sum(), scores, create_graph=True)
    (double,) = torch.autograd.grad(mu, scores, g)
    torch.testing.assert_close(ours, double)


def test_eisner_log_partition_gradgrad():
    scores, lengths = random_batch(6, [3, 2], 1.0)
    scores.requires_grad_()
    torch.autograd.gradgradcheck(lambda x: DependencyCRF(x, lengths, False).log_partition, (scores,))


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
def test_marginals_under_no_grad_equal_gradient(kind):
    scores, lengths = random_batch(7, [5, 3], 1.0)
    with torch.no_grad():
        inference = CRFS[kind](scores, lengths).marginals
    x = scores.clone().requires_grad_()
    (grad,) = torch.autograd.grad(CRFS[kind](x, lengths).log_partition.sum(), x)
    torch.testing.assert_close(inference, grad)


# ---------------------------------------------------------------------------------------------
# Numerics, precision, long sentences.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
@pytest.mark.parametrize("multiroot", [True, False])
def test_scores_times_100_stay_finite(kind, multiroot):
    scores, lengths = random_batch(8, [30, 12, 1, 25], 100.0, torch.float32)
    crf = CRFS[kind](scores, lengths, multiroot)
    log_z, marginals, best = crf.log_partition, crf.marginals, crf.max
    assert torch.isfinite(log_z).all() and torch.isfinite(marginals).all()
    check_log_z_bounds(log_z, best, lengths)
    words = torch.arange(1, scores.shape[-1]) <= lengths[:, None]
    # Eisner: float32 log-scores of ~1e4 carry rounding errors ~1e-3; Matrix-Tree is float64 inside
    atol = 5e-3 if kind == "projective" else 1e-5
    torch.testing.assert_close(marginals.sum(1)[:, 1:][words], torch.ones(int(words.sum())),
                               atol=atol, rtol=0)
    assert marginals.min() >= -atol and marginals.max() <= 1 + atol


@pytest.mark.parametrize("multiroot", [True, False])
def test_matrix_tree_lapack_and_gth_paths_agree(multiroot):
    """The certified LAPACK path equals the GTH path; large scales are sent to GTH."""
    for scale, some_rejected in ((1.0, False), (3.0, False), (100.0, True)):
        scores, lengths = check_arc_scores(*random_batch(12, [30, 12, 1, 25, 30, 30], scale))
        log_z, marginals, trusted = _lapack_marginals(scores, lengths, multiroot, True)
        gth_log_z, gth_marginals = _gth_marginals(scores, lengths, multiroot)
        assert bool((~trusted).any()) == some_rejected
        torch.testing.assert_close(log_z[trusted], gth_log_z[trusted], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(marginals[trusted], gth_marginals[trusted], rtol=0, atol=1e-9)
        crf = NonProjectiveDependencyCRF(scores, lengths, multiroot)
        torch.testing.assert_close(crf.log_partition, gth_log_z, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(crf.marginals, gth_marginals, rtol=0, atol=1e-9)


def test_matrix_tree_long_sentences():
    """N = 160 (where batched LAPACK LU/inverse can fail on some CPU builds) and scores ×100."""
    scores, lengths = random_batch(9, [160, 150, 97, 160], 1.0, torch.float32)
    for scale in (1.0, 100.0):
        crf = NonProjectiveDependencyCRF(scores * scale, lengths)
        marginals = crf.marginals
        assert torch.isfinite(crf.log_partition).all() and torch.isfinite(marginals).all()
        words = torch.arange(1, 161) <= lengths[:, None]
        torch.testing.assert_close(marginals.sum(1)[:, 1:][words], torch.ones(int(words.sum())),
                                   atol=1e-4, rtol=0)
    # the float64 result agrees with float32 input on ordinary scores
    reference = NonProjectiveDependencyCRF(scores.double(), lengths).log_partition
    torch.testing.assert_close(NonProjectiveDependencyCRF(scores, lengths).log_partition.double(),
                               reference, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
def test_half_inputs_and_autocast_run_in_float32(kind):
    scores, lengths = random_batch(10, [6, 4], 1.0, torch.float32)
    reference = CRFS[kind](scores.bfloat16().float(), lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        crf = CRFS[kind](scores.bfloat16(), lengths)
        log_z, marginals = crf.log_partition, crf.marginals
    assert log_z.dtype == torch.float32 and marginals.dtype == torch.float32
    torch.testing.assert_close(log_z, reference.log_partition)
    torch.testing.assert_close(marginals, reference.marginals)


def test_single_root_argmax_has_one_root():
    scores, lengths = random_batch(11, [12, 7], 1.0)
    scores[:, 0, 1:] += 5.0  # the unconstrained best tree has many root arcs
    for crf_type in CRFS.values():
        heads = crf_type(scores, lengths, multiroot=False).argmax
        for b, n in enumerate(lengths.tolist()):
            assert (heads[b, :n] == 0).sum() == 1
        assert (crf_type(scores, lengths, multiroot=True).argmax == 0).sum() > 2


def test_chu_liu_edmonds_contracts_cycles():
    scores = np.full((4, 4), -10.0)
    scores[1, 2] = scores[2, 1] = 5.0  # a 2-cycle 1 <-> 2 is the greedy choice
    scores[2, 3] = 4.0
    scores[0, 1], scores[0, 2] = 1.0, 0.5
    assert best_tree(scores, multiroot=True).tolist() == [0, 1, 2]


@pytest.mark.parametrize("kind", ["projective", "nonprojective"])
def test_bad_lengths_are_rejected(kind):
    with pytest.raises(ValueError, match="lengths"):
        CRFS[kind](torch.zeros(2, 4, 4), torch.tensor([3, 0]))
    with pytest.raises(ValueError, match="lengths"):
        CRFS[kind](torch.zeros(2, 4, 4), torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="scores"):
        CRFS[kind](torch.zeros(2, 4, 5))


# ---------------------------------------------------------------------------------------------
# log_prob of head sequences that are not trees of the distribution.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("structure", sorted(CRFS))
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_log_prob_is_minus_inf_exactly_off_the_trees(structure, multiroot, n):
    """Every head sequence over n words (n+1 choices each, padded to 5 words): those the brute
    force enumerates get log p summing to 0 over them; every other sequence gets -inf."""
    projective = structure == "projective"
    trees = {tuple(t) for t in all_trees(n, projective, multiroot).tolist()}
    candidates = list(itertools.product(range(n + 1), repeat=n))
    scores, _ = random_batch(n, [5], 1.0)
    crf = CRFS[structure](scores.expand(len(candidates), 6, 6), torch.full((len(candidates),), n), multiroot)
    heads = torch.full((len(candidates), 5), -1, dtype=torch.long)
    heads[:, :n] = torch.tensor(candidates)
    expected = torch.tensor([c in trees for c in candidates])
    assert torch.equal(crf.is_tree(heads), expected)
    lp = crf.log_prob(heads)
    assert bool(torch.isfinite(lp[expected]).all()) and bool((lp[~expected] == -float("inf")).all())
    torch.testing.assert_close(torch.logsumexp(lp[expected], 0), torch.zeros((), dtype=lp.dtype))


@pytest.mark.parametrize("heads, message", [
    ([[2, 0, 2, -1, -1]], r"heads\[0, 3\] = -1: the head of word 4 of sentence 0 must be in 0..4"),
    ([[2, 0, 9, 2, -1]], r"heads\[0, 2\] = 9"),
    ([[2, 0, 2]], r"heads must be an integer tensor \[1, 5\]"),
    ([[2.0, 0.0, 2.0, 2.0, -1.0]], "must be an integer tensor"),
])
def test_log_prob_of_malformed_heads_is_an_error(heads, message):
    crf = DependencyCRF(torch.randn(1, 6, 6), torch.tensor([4]))
    with pytest.raises(ValueError, match=message):
        crf.log_prob(torch.tensor(heads))


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_sample_count_must_be_a_whole_number(count):
    crf = DependencyCRF(torch.randn(1, 4, 4), torch.tensor([3]))
    with pytest.raises(ValueError, match="count must be a whole number >= 1"):
        crf.sample(count)
