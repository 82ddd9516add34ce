"""Hostile inputs to every public class of synattn.structs, one rule per test over all of them:
empty batches give empty results (both backends), misuse is a ValueError/TypeError naming the
class (never an internal error), finfo.min masks are -inf masks, and sizes beyond the machine's
memory are refused up front."""

from __future__ import annotations

import pytest
import torch

import synattn.structs as structs
from synattn.structs import (
    AlignmentCRF,
    Autoregressive,
    ConstituencyLBP,
    ConstituencyMFVI,
    Dependency2oCRF,
    DependencyCRF,
    DependencyLBP,
    DependencyMFVI,
    LinearChainCRF,
    NonProjectiveDependencyCRF,
    SemanticDependencyLBP,
    SemanticDependencyMFVI,
    SemiMarkovCRF,
    SentCFG,
    TreeCRF,
)
from synattn.structs.semirings import EntropySemiring
from tests.helpers.backends import BACKENDS, on

N = 3
EMB = torch.randn(5, 5)


def _model(tokens, state):
    return EMB[tokens] + state[0].unsqueeze(1), state


CRFS = {
    "DependencyCRF": lambda B: DependencyCRF(torch.randn(B, N + 1, N + 1)),
    "NonProjectiveDependencyCRF": lambda B: NonProjectiveDependencyCRF(torch.randn(B, N + 1, N + 1)),
    "Dependency2oCRF": lambda B: Dependency2oCRF(torch.randn(B, N + 1, N + 1), torch.randn(B, N + 1, N + 1, N + 1)),
    "TreeCRF": lambda B: TreeCRF(torch.randn(B, N, N)),
    "LinearChainCRF": lambda B: LinearChainCRF(unary=torch.randn(B, N, 3)),
    "SemiMarkovCRF": lambda B: SemiMarkovCRF(torch.randn(B, N - 1, 3, 2, 2)),
    "AlignmentCRF": lambda B: AlignmentCRF(torch.randn(B, N, N + 1, 3)),
    "SentCFG": lambda B: SentCFG(torch.randn(B, N, 3), torch.randn(B, 2, 5, 5), torch.randn(B, 2)),
}
MODULES = {
    "DependencyMFVI": (DependencyMFVI, lambda B: (torch.randn(B, N + 1, N + 1), torch.randn(B, N + 1, N + 1, N + 1))),
    "DependencyLBP": (DependencyLBP, lambda B: (torch.randn(B, N + 1, N + 1), torch.randn(B, N + 1, N + 1, N + 1))),
    "ConstituencyMFVI": (ConstituencyMFVI, lambda B: (torch.randn(B, N, N), torch.randn(B, N, N, N))),
    "ConstituencyLBP": (ConstituencyLBP, lambda B: (torch.randn(B, N, N), torch.randn(B, N, N, N))),
    "SemanticDependencyMFVI": (SemanticDependencyMFVI,
                               lambda B: (torch.randn(B, N + 1, N + 1),
                                          *(torch.randn(B, N + 1, N + 1, N + 1) for _ in range(3)))),
    "SemanticDependencyLBP": (SemanticDependencyLBP,
                              lambda B: (torch.randn(B, N + 1, N + 1),
                                         *(torch.randn(B, N + 1, N + 1, N + 1) for _ in range(3)))),
}
# not distributions: autograd Functions of the chain and CKY, the two kernel semirings, a constant
NOT_DISTRIBUTIONS = {"ChainMarginals", "CKYMarginals", "LogSemiring", "MaxSemiring", "NEG"}
NO_PROGRAM = {"NonProjectiveDependencyCRF", "AlignmentCRF", "SentCFG"}  # (log and max semirings only)


def test_every_public_class_is_covered():
    covered = set(CRFS) | set(MODULES) | {"Autoregressive"} | NOT_DISTRIBUTIONS
    assert covered == set(structs.__all__)


def _batch_sizes(value) -> list[int]:
    """The batch dimension(s) of a member's result (tensors, or tuples of them)."""
    if isinstance(value, tuple):
        return [s for v in value for s in _batch_sizes(v)]
    assert isinstance(value, torch.Tensor), type(value)
    return [value.shape[0] if value.dim() else 0]


def _members(crf, name):
    members = {attr: (lambda a=attr: getattr(crf, a)) for attr in
               ("log_partition", "partition", "marginals", "max", "argmax", "mode", "entropy",
                "perplexity", "feasible", "edge_marginals")
               if hasattr(type(crf), attr)}
    members.update(kbest=lambda: crf.kbest(2), kmax=lambda: crf.kmax(2).T, topk=lambda: crf.topk(2),
                   sample=lambda: crf.sample(2), log_prob=lambda: crf.log_prob(crf.argmax),
                   score=lambda: crf.score(crf.argmax), kl=lambda: crf.kl(crf),
                   cross_entropy=lambda: crf.cross_entropy(crf))
    if name not in NO_PROGRAM:
        members.update(count=lambda: crf.count, run=lambda: crf.run(EntropySemiring),
                       semiring_marginals=lambda: crf.semiring_marginals(EntropySemiring),
                       gumbel_crf=lambda: crf.gumbel_crf())
    return members


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CRFS))
def test_empty_batch_gives_empty_results(name, backend):
    with on(backend):
        crf = CRFS[name](0)
        for member, call in _members(crf, name).items():
            value = call()
            if member in ("topk", "sample"):  # [k, B, ...]
                value = value.transpose(0, 1) if isinstance(value, torch.Tensor) else value[0].transpose(0, 1)
            assert set(_batch_sizes(value)) == {0}, member
        one = CRFS[name](1)  # the same members work on a batch of one (the test can fail)
        assert one.log_partition.shape == (1,)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODULES))
def test_empty_batch_for_approximate_modules(name, backend):
    cls, make = MODULES[name]
    with on(backend):
        assert cls()(make(0)).shape[0] == 0
        assert cls()(make(2)).shape[0] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_batch_for_autoregressive(backend):
    with on(backend):
        dist = Autoregressive(_model, (torch.randn(0, 5),), n_classes=5, n_length=N)
        assert dist.beam_search(3)[1].shape == (0, 3, N)
        assert dist.sample(2).shape == (2, 0, N)
        assert dist.sample_without_replacement(2).shape == (2, 0, N)
        assert dist.greedy()[1].shape == (0, N) and dist.argmax.shape == (0, N)
        assert dist.topk(2).shape == (2, 0, N)
        assert dist.log_prob(torch.zeros(0, N, dtype=torch.long)).shape == (0,)


@pytest.mark.parametrize("name", list(MODULES))
def test_approximate_modules_refuse_distribution_members(name):
    module = MODULES[name][0]()
    for member in ("log_partition", "argmax", "sample", "entropy", "kbest"):
        with pytest.raises(TypeError, match=f"{name} has no {member}"):
            getattr(module, member)
        assert not hasattr(module, member)
    with pytest.raises(AttributeError):  # other names: the usual error
        module.no_such_member  # noqa: B018
    assert module.max_iter == 3


@pytest.mark.parametrize("cls", [DependencyMFVI, DependencyLBP])
def test_head_targets_out_of_range(cls):
    scores = (torch.randn(2, N + 1, N + 1), torch.randn(2, N + 1, N + 1, N + 1))
    for bad in (N + 1, -2, 100):
        with pytest.raises(ValueError, match=f"{cls.__name__}: target heads of words must be in 0..{N}"):
            cls()(scores, None, torch.full((2, N), bad))
    with pytest.raises(TypeError, match="integer tensor"):
        cls()(scores, None, torch.zeros(2, N))
    with pytest.raises(ValueError, match="target must be"):
        cls()(scores, None, [[0] * N] * 2)
    target = torch.tensor([[0, 1, 1], [2, 0, -1]])
    loss, _ = cls()(scores, torch.tensor([3, 2]), target)  # -1 past a length is padding
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", [n for n in MODULES if "Dependency" not in n or "Semantic" in n])
def test_binary_targets_out_of_range(name):
    cls, make = MODULES[name]
    scores = make(2)
    for bad in (2.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=f"{name}: target must hold values in"):
            cls()(scores, None, torch.full_like(scores[0], bad))
    loss, _ = cls()(scores, None, torch.ones_like(scores[0]))
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", list(CRFS))
def test_score_and_semiring_misuse(name):
    crf, other = CRFS[name](2), CRFS[name](3)
    structure = other.argmax
    for method in (crf.score, crf.log_prob):
        with pytest.raises(ValueError):
            method(structure)
    for semiring in ("semi_log", "log", 3):
        with pytest.raises(TypeError, match=f"{name}.run: the semiring must be a Semiring class"):
            crf.run(semiring)
    if name in NO_PROGRAM:
        with pytest.raises(TypeError, match="no dynamic program"):
            crf.run(EntropySemiring)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_alignment_finfo_min_masks_are_inf_masks(backend, dtype):
    with on(backend):
        for seed, p, local in ((0, 0.3, False), (1, 0.6, True), (2, 1.0, False), (3, 0.4, True)):
            gen = torch.Generator().manual_seed(seed)
            s = torch.randn(2, 4, 5, 3, generator=gen, dtype=dtype)
            drop = torch.rand(2, 4, 5, 3, generator=gen) < p
            a = AlignmentCRF(s.masked_fill(drop, -float("inf")), local=local)
            b = AlignmentCRF(s.masked_fill(drop, torch.finfo(dtype).min), local=local)
            for member in ("log_partition", "marginals", "max", "argmax", "entropy"):
                x, y = getattr(a, member), getattr(b, member)
                assert not y.isnan().any() and torch.equal(x, y), member
            assert torch.equal(a.kbest(3)[0], b.kbest(3)[0])
            sample = b.sample(2, generator=torch.Generator().manual_seed(seed))
            assert torch.equal(a.score(sample[0]), b.score(sample[0]))


def test_sizes_beyond_memory_are_refused_up_front():
    huge = torch.zeros(1, 1, 1, 3).expand(1, 200_000, 200_000, 3)  # (nothing allocated)
    with pytest.raises(ValueError, match=r"AlignmentCRF: log_potentials \[B, N, M, 3\]=.*too large"):
        AlignmentCRF(huge)
    dist = Autoregressive(_model, (torch.randn(2, 5),), n_classes=5, n_length=40)
    with pytest.raises(ValueError, match=r"Autoregressive.beam_search: k=10+ is too large: a beam"):
        dist.beam_search(10**12)
    with pytest.raises(ValueError, match=r"sample_without_replacement: count=10+ is too large"):
        dist.sample_without_replacement(10**12)
    assert dist.beam_search(4)[1].shape == (2, 4, 40)  # (a beam that fits runs)
