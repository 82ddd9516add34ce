"""The second-order (sibling) projective dependency CRF against brute-force enumeration of the
projective trees, and against supar's ``Dependency2oCRF``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import Dependency2oCRF
from synattn.structs.backend import use_backend
from synattn.structs.convert import arcs_from_supar, arcs_to_supar, siblings_from_supar, siblings_to_supar
from tests.helpers.second_order import brute_force, sibling_pairs


def random_inputs(seed, lengths, scale):
    gen = torch.Generator().manual_seed(seed)
    B, n = len(lengths), max(lengths)
    scores = torch.randn(B, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    siblings = torch.randn(B, n + 1, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    return scores, siblings, torch.tensor(lengths)


cases = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 5), min_size=1, max_size=3),
    "scale": st.sampled_from([0.5, 2.0]),
    "multiroot": st.booleans(),
})


@pytest.mark.parametrize("backend", ["numba", "torch", "reference"])
@settings(max_examples=10, deadline=None)
@given(case=cases)
def test_matches_brute_force(backend, case):
    scores, siblings, lengths = random_inputs(case["seed"], case["lengths"], case["scale"])
    with use_backend(backend):
        crf = Dependency2oCRF(scores, siblings, lengths, case["multiroot"])
        log_z, mu, mu_sib = crf.log_partition, crf.marginals, crf.sibling_marginals
        best, argmax = crf.max, crf.argmax
    for b, n in enumerate(lengths.tolist()):
        z, arcs, sibs, tree_scores, trees = brute_force(scores[b], siblings[b], n, case["multiroot"])
        assert torch.allclose(log_z[b], z, atol=1e-9)
        assert torch.allclose(mu[b], arcs, atol=1e-9)
        assert torch.allclose(mu_sib[b], sibs, atol=1e-9)
        assert torch.allclose(best[b], tree_scores.max(), atol=1e-9)
        # the argmax is a tree of the enumeration with the best score
        index = [t.tolist() for t in torch.from_numpy(trees)].index(argmax[b, :n].tolist())
        assert torch.allclose(tree_scores[index], tree_scores.max(), atol=1e-9)
        # score() of every tree equals the enumeration's sum
        T = len(trees)
        heads = torch.full((T, scores.shape[-1] - 1), -1, dtype=torch.long)
        heads[:, :n] = torch.from_numpy(trees)
        batch = Dependency2oCRF(scores[b].expand(T, -1, -1), siblings[b].expand(T, -1, -1, -1),
                                torch.full((T,), n), case["multiroot"])
        assert torch.allclose(batch.score(heads), tree_scores, atol=1e-9)


def test_padding_and_unused_siblings_do_not_matter():
    scores, siblings, lengths = random_inputs(3, [4, 2], 1.0)
    crf = Dependency2oCRF(scores, siblings, lengths)
    dirty = siblings.clone()
    dirty[1, 3:] = float("nan")  # past the second sentence
    dirty[:, 2, 3, 1] = float("inf")  # s not between h and m: no tree uses it
    dirty[:, 1, 1, 2] = float("nan")
    other = Dependency2oCRF(scores, dirty, lengths)
    assert torch.allclose(crf.log_partition, other.log_partition)
    assert torch.allclose(crf.sibling_marginals, other.sibling_marginals)


def test_zero_siblings_are_the_first_order_crf():
    from synattn.structs import DependencyCRF
    scores, siblings, lengths = random_inputs(5, [5, 3], 1.0)
    for multiroot in (True, False):
        crf = Dependency2oCRF(scores, torch.zeros_like(siblings), lengths, multiroot)
        first = DependencyCRF(scores, lengths, multiroot)
        assert torch.allclose(crf.log_partition, first.log_partition)
        assert torch.allclose(crf.marginals, first.marginals)
        assert torch.equal(crf.argmax, first.argmax)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_marginals_are_differentiable(backend):
    scores, siblings, lengths = random_inputs(7, [3, 2], 1.0)
    x, y = scores.clone().requires_grad_(), siblings.clone().requires_grad_()

    def mu(x, y):
        crf = Dependency2oCRF(x, y, lengths, False)
        return crf.marginals, crf.sibling_marginals

    def log_z(x, y):
        return Dependency2oCRF(x, y, lengths, True).log_partition

    with use_backend(backend):
        assert torch.autograd.gradcheck(mu, (x, y))
        assert torch.autograd.gradgradcheck(log_z, (x, y))


@settings(max_examples=10, deadline=None)
@given(case=cases)
def test_compiled_equals_torch_path(case):
    scores, siblings, lengths = random_inputs(case["seed"], case["lengths"], case["scale"] * 3)
    out = {}
    for backend in ("numba", "torch"):
        with use_backend(backend):
            crf = Dependency2oCRF(scores, siblings, lengths, case["multiroot"])
            out[backend] = [crf.log_partition, crf.marginals, crf.sibling_marginals, crf.max, crf.argmax]
    for a, b in zip(out["numba"], out["torch"]):
        assert torch.allclose(a, b, atol=1e-9) if a.is_floating_point() else torch.equal(a, b)


def test_distribution_api_against_enumeration():
    scores, siblings, lengths = random_inputs(11, [4], 1.0)
    crf = Dependency2oCRF(scores, siblings, lengths, True)
    log_z, _, _, tree_scores, trees = brute_force(scores[0], siblings[0], 4, True)
    prob = (tree_scores - log_z).exp()
    heads = torch.from_numpy(trees)
    log_probs = torch.stack([crf.log_prob(h[None])[0] for h in heads])
    assert torch.allclose(log_probs.exp().sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.allclose(crf.entropy[0], -(prob * prob.log()).sum(), atol=1e-9)
    best, structures = crf.kbest(5)
    assert torch.allclose(best[0], tree_scores.sort(descending=True).values[:5], atol=1e-9)
    listed = [tuple(t) for t in trees.tolist()]
    found = torch.stack([tree_scores[listed.index(tuple(y))] for y in structures[0].tolist()])
    assert torch.allclose(found, best[0], atol=1e-9)
    crossing = torch.tensor([[3, 4, 0, 2]])  # arcs 3->1 and 4->2 cross
    assert crf.log_prob(crossing)[0] == -float("inf")
    known = torch.tensor([[2, -1, -1, -1]])
    constrained = crf.constrain(heads=known)
    keep = heads[:, 0] == 2
    assert torch.allclose(constrained.log_partition[0], torch.logsumexp(tree_scores[keep], 0))


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("multiroot", [True, False])
def test_samples_follow_the_distribution(backend, multiroot):
    # the top-down sampler (a walk down the compiled inside chart; the sampled gradient of the
    # PyTorch inside pass): every draw a tree, frequencies its enumerated probability, a
    # sentence whose masks leave no tree all -1
    scores, siblings, lengths = random_inputs(13, [4, 3, 2], 1.0)
    scores[2, 1:, 1:] = scores[2, 0] = -float("inf")  # (no head for any word of sentence 3)
    draws = 3000
    with use_backend(backend):
        crf = Dependency2oCRF(scores, siblings, lengths, multiroot)
        samples = crf.sample(draws, generator=torch.Generator().manual_seed(0))  # [draws, 3, 4]
    assert samples.shape == (draws, 3, 4) and (samples[:, 2] == -1).all()
    for b, n in ((0, 4), (1, 3)):
        log_z, _, _, tree_scores, trees = brute_force(scores[b], siblings[b], n, multiroot)
        assert (samples[:, b, n:] == -1).all()
        listed = [tuple(t) for t in trees.tolist()]
        counts = torch.zeros(len(listed), dtype=torch.float64)
        for s in samples[:, b, :n].tolist():
            counts[listed.index(tuple(s))] += 1
        assert (counts / draws - (tree_scores - log_z).exp()).abs().max() < 0.035


def test_masks_forbid_arcs_and_sibling_pairs():
    scores, siblings, lengths = random_inputs(17, [3], 1.0)
    siblings[0, 0, 1, 2] = -float("inf")  # words 1 and 2 may not both be ROOT's adjacent children
    crf = Dependency2oCRF(scores, siblings, lengths, True)
    assert crf.score(torch.tensor([[0, 0, 2]]))[0] == -float("inf")
    assert crf.sibling_marginals[0, 0, 1, 2] == 0
    finite = siblings.clone()
    finite[0, 0, 1, 2] = 0.0
    _, _, _, tree_scores, trees = brute_force(scores[0], finite[0], 3, True)
    allowed = [(0, 1, 2) not in sibling_pairs(tuple(t)) for t in trees.tolist()]
    assert torch.allclose(crf.log_partition[0], torch.logsumexp(tree_scores[allowed], 0))


@pytest.mark.parametrize("multiroot", [True, False])
def test_matches_supar(multiroot):
    supar = pytest.importorskip("supar.structs")
    scores, siblings, lengths = random_inputs(19, [6, 3, 5], 1.5)
    ours = Dependency2oCRF(scores, siblings, lengths, multiroot)
    theirs = supar.Dependency2oCRF((arcs_to_supar(scores).requires_grad_(),
                                    siblings_to_supar(siblings).requires_grad_()), lengths,
                                   multiroot=multiroot)
    assert torch.allclose(ours.log_partition, theirs.log_partition.detach(), atol=1e-10)
    assert torch.allclose(ours.marginals, arcs_from_supar(theirs.marginals.detach()), atol=1e-10)
    assert torch.allclose(ours.max, theirs.max.detach(), atol=1e-10)
    assert torch.equal(ours.argmax.clamp_min(0), theirs.argmax[:, 1:])
    assert siblings_from_supar(siblings_to_supar(siblings)).equal(siblings)


def test_bad_siblings_are_rejected():
    scores, siblings, lengths = random_inputs(23, [3], 1.0)
    with pytest.raises(ValueError, match="siblings must be"):
        Dependency2oCRF(scores, siblings[:, :3], lengths)
    with pytest.raises(ValueError, match="siblings must be a floating-point"):
        Dependency2oCRF(scores, siblings.long(), lengths)
    bad = siblings.clone()
    bad[0, 0, 1, 2] = float("nan")  # a pair some tree uses
    with pytest.raises(ValueError, match="NaN"):
        Dependency2oCRF(scores, bad, lengths)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_no_tree_and_one_word(backend):
    scores, siblings, lengths = random_inputs(29, [3, 1], 1.0)
    scores[0, :, 1] = -float("inf")  # word 1 of sentence 0 has no possible head
    with use_backend(backend):
        crf = Dependency2oCRF(scores, siblings, lengths, False)
        assert crf.log_partition[0] == -float("inf") and torch.isfinite(crf.log_partition[1])
        assert crf.marginals[0].abs().sum() == 0 and crf.marginals[1, 0, 1] == 1
        assert crf.argmax.tolist() == [[-1, -1, -1], [0, -1, -1]]
