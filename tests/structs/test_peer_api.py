"""The peers' conventions on synattn's CRFs: torch-struct's and supar's names (partition, topk,
kmax, mode), the chain's start/end scores and HMM parameterisation, and the
``torch.distributions.Distribution`` adapter."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from synattn.structs import (
    Dependency2oCRF,
    DependencyCRF,
    LinearChainCRF,
    NonProjectiveDependencyCRF,
    SemiMarkovCRF,
    TreeCRF,
)
from synattn.structs.torch_distribution import StructuredDistribution


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


LENGTHS = torch.tensor([4, 2])
CRFS = {
    "chain": lambda: LinearChainCRF(unary=randn(2, 4, 2), transition=randn(2, 2, seed=1),
                                    lengths=LENGTHS),
    "projective": lambda: DependencyCRF(randn(2, 5, 5), LENGTHS),
    "nonprojective": lambda: NonProjectiveDependencyCRF(randn(2, 5, 5), LENGTHS, multiroot=False),
    "cky": lambda: TreeCRF(randn(2, 4, 4), LENGTHS),
    "semi_markov": lambda: SemiMarkovCRF(randn(2, 3, 3, 2, 2), LENGTHS),
    "projective2o": lambda: Dependency2oCRF(randn(2, 5, 5), randn(2, 5, 5, 5, seed=2), LENGTHS),
}


@pytest.mark.parametrize("name", CRFS)
def test_peer_names_are_the_same_members(name):
    crf = CRFS[name]()
    assert torch.equal(crf.partition, crf.log_partition) and torch.equal(crf.mode, crf.argmax)
    scores, structures = crf.kbest(3)
    assert torch.equal(crf.kmax(3), scores.transpose(0, 1))  # [k, B], torch-struct's layout
    assert torch.equal(crf.topk(3), structures.transpose(0, 1))


def brute_force_chain(unary, transition, start, end, n):
    """log Z of supar's chain score start[y_0] + Σ unary + Σ transition + end[y_last]."""
    C = unary.shape[-1]
    totals = []
    for y in itertools.product(range(C), repeat=n):
        s = start[y[0]] + end[y[-1]] + sum(unary[i, c] for i, c in enumerate(y))
        totals.append(s + sum(transition[a, b] for a, b in zip(y, y[1:])))
    return torch.logsumexp(torch.stack(totals), 0)


def test_chain_start_and_end_scores():
    unary, transition = randn(2, 4, 3), randn(3, 3, seed=1)
    start, end = randn(3, seed=2), randn(2, 3, seed=3)  # end per sentence
    start[1] = -float("inf")  # no chain starts with label 1
    crf = LinearChainCRF(unary=unary, transition=transition, lengths=LENGTHS, start=start, end=end)
    for b, n in enumerate(LENGTHS.tolist()):
        torch.testing.assert_close(crf.log_partition[b],
                                   brute_force_chain(unary[b], transition, start, end[b], n))
    assert (crf.marginals[:, 0, 1] == 0).all() and (crf.argmax[:, 0] != 1).all()
    with pytest.raises(ValueError, match="start must be"):
        LinearChainCRF(unary=unary, start=randn(4))


def test_chain_start_and_end_equal_supar():
    structs = pytest.importorskip("supar.structs")
    scores, trans = randn(2, 4, 3), randn(4, 4, seed=1)
    theirs = structs.LinearChainCRF(scores.clone().requires_grad_(), trans, LENGTHS)
    ours = LinearChainCRF(unary=scores, transition=trans[:3, :3], lengths=LENGTHS,
                          start=trans[3, :3], end=trans[:3, 3])
    torch.testing.assert_close(ours.log_partition, theirs.log_partition.detach())
    torch.testing.assert_close(ours.marginals, theirs.marginals.detach())


def test_hmm_log_partition_is_the_likelihood_of_the_observations():
    C, V = 3, 4
    transition = randn(C, C).log_softmax(-1)
    emission = randn(V, C, seed=1).log_softmax(0)
    init = randn(C, seed=2).log_softmax(0)
    obs = torch.tensor([[0, 3, 1, 2], [2, 2, 0, 0]])
    crf = LinearChainCRF.hmm(transition, emission, init, obs, LENGTHS)
    for b, n in enumerate(LENGTHS.tolist()):
        # p(x) = Σ_z p(z_0) Π p(z_i+1 | z_i) Π p(x_i | z_i)
        want = brute_force_chain(emission[obs[b]], transition, init, torch.zeros(C), n)
        torch.testing.assert_close(crf.log_partition[b], want)
    # normalised: the likelihoods of every observation sequence of length 2 sum to 1
    every = torch.tensor(list(itertools.product(range(V), repeat=2)))
    total = LinearChainCRF.hmm(transition, emission, init, every).log_partition.exp().sum()
    torch.testing.assert_close(total, torch.tensor(1.0, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"observations\[0, 1\] = 4 is outside 0..3"):
        LinearChainCRF.hmm(transition, emission, init, torch.tensor([[0, 4]]))
    torch_struct = pytest.importorskip("torch_struct")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_struct.HMM(transition.t(), emission, init, obs).partition.detach()
    torch.testing.assert_close(LinearChainCRF.hmm(transition, emission, init, obs).log_partition,
                               theirs)


# ---------------------------------------------------------------------------------------------
# The torch.distributions adapter.
# ---------------------------------------------------------------------------------------------

EQUAL = {  # tiny CRFs whose batch elements have the same number of structures
    "chain": lambda: LinearChainCRF(unary=randn(2, 3, 2), transition=randn(2, 2, seed=1)),
    "projective": lambda: DependencyCRF(randn(2, 4, 4)),
    "nonprojective": lambda: NonProjectiveDependencyCRF(randn(2, 4, 4)),
    "cky": lambda: TreeCRF(randn(2, 4, 4)),
    "semi_markov": lambda: SemiMarkovCRF(randn(2, 3, 3, 2, 2)),
}


@pytest.mark.parametrize("name", EQUAL)
def test_distribution_adapter(name):
    crf = EQUAL[name]()
    dist = StructuredDistribution(crf)
    assert isinstance(dist, torch.distributions.Distribution) and dist.batch_shape == (2,)
    support = dist.enumerate_support()  # [S, B, *event]
    assert support.shape[1:] == dist.batch_shape + dist.event_shape
    log_p = dist.log_prob(support)  # [S, B]
    torch.testing.assert_close(log_p.exp().sum(0), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(dist.entropy(), -(log_p.exp() * log_p).sum(0))
    samples = dist.sample((3, 2), generator=torch.Generator().manual_seed(0))
    assert samples.shape == (3, 2) + dist.batch_shape + dist.event_shape
    assert (dist.log_prob(samples) > -float("inf")).all() and torch.equal(dist.mode, crf.argmax)
    other = StructuredDistribution(EQUAL[name]().__class__(*_same_args(name)))
    torch.testing.assert_close(torch.distributions.kl_divergence(dist, other), crf.kl(other.crf))


def _same_args(name):
    if name == "chain":
        return (randn(2, 2, 2, 2, seed=5),)
    if name == "semi_markov":
        return (randn(2, 3, 3, 2, 2, seed=5),)
    return (randn(2, 4, 4, seed=5),)


def test_enumerate_support_refuses_what_it_cannot_list():
    ragged = StructuredDistribution(CRFS["chain"]())  # lengths 4 and 2: 16 and 4 labellings
    with pytest.raises(ValueError, match=r"different numbers of structures \(\[16, 4\]\)"):
        ragged.enumerate_support()
    with pytest.raises(ValueError, match="expand=False"):
        ragged.enumerate_support(expand=False)
    with pytest.raises(ValueError, match="sample_shape"):
        ragged.log_prob(torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("name", CRFS)
def test_perplexity_is_the_exponential_of_the_entropy(name):
    crf = CRFS[name]()
    torch.testing.assert_close(crf.perplexity, crf.entropy.exp())
    assert bool((crf.perplexity >= 1).all())


def test_perplexity_equals_supars():
    """supar 1.1.4's ``perplexity()`` is ``torch.distributions``' ``exp(self.entropy())``, which
    raises there (its ``entropy`` is a tensor, not a method): its value is ``exp`` of its entropy."""
    structs = pytest.importorskip("supar.structs")
    from synattn.structs import convert

    spans = randn(2, 5, 5, seed=3)
    theirs = structs.ConstituencyCRF(convert.spans_to_supar(spans).requires_grad_(), LENGTHS)
    ours = TreeCRF(spans, LENGTHS)
    torch.testing.assert_close(ours.perplexity, theirs.entropy.detach().exp())
    no_tree = TreeCRF(torch.full((1, 3, 3), -float("inf")))  # no structure: entropy 0
    assert no_tree.perplexity.item() == 1.0
