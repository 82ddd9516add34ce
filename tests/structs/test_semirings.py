"""The semiring API (synattn.structs.semirings.programs): every semiring on every dynamic program
against brute-force enumeration of the structures at tiny sizes, the sampling semirings'
frequencies against the marginals, and the values of torch-struct 0.5's semirings on the same
inputs."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import (
    Dependency2oCRF,
    DependencyCRF,
    LinearChainCRF,
    NonProjectiveDependencyCRF,
    SemiMarkovCRF,
    TreeCRF,
)
from synattn.structs.constants import NEG
from synattn.structs.semirings.generic import (
    CheckpointSemiring,
    CrossEntropySemiring,
    EntropySemiring,
    KLSemiring,
    KMaxSemiring,
    LogSemiring,
    MaxSemiring,
    Semiring,
    SparseMaxSemiring,
    sparsemax,
)
from synattn.structs.semirings.programs import run
from synattn.structs.semirings.sampling import GumbelCRFSemiring, MultiSampledSemiring, SampledSemiring
from tests.helpers.segments import structures as segmentations
from tests.helpers.spans import bracketings
from tests.helpers.trees import all_trees

STRUCTURES = ["chain", "semimarkov", "eisner", "eisner1", "eisner2o", "eisner2o1", "cky"]


def make(kind: str, seed: int, masked: bool = False, equal: bool = False, lengths=(4, 2)):
    """A CRF of two sentences of different lengths (``equal``: the same; ``lengths``: those of
    the dependency CRFs), float64, optionally with masked parts."""
    gen = torch.Generator().manual_seed(seed)
    N = max(lengths) + 1
    shape = {"chain": (2, 3, 2, 2), "semimarkov": (2, 4, 3, 2, 2), "eisner": (2, N, N),
             "eisner1": (2, N, N), "eisner2o": (2, N, N), "eisner2o1": (2, N, N), "cky": (2, 4, 4)}[kind]
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if masked:
        x = x.masked_fill(torch.rand(shape, generator=gen) < 0.15, -float("inf"))
    if kind.startswith("eisner2o"):
        sib = torch.randn(2, N, N, N, generator=gen, dtype=torch.float64)
        if masked:
            sib = sib.masked_fill(torch.rand(sib.shape, generator=gen) < 0.15, -float("inf"))
        return Dependency2oCRF(x, sib, torch.tensor(lengths), multiroot=kind == "eisner2o")
    if kind == "chain":
        return LinearChainCRF(x, torch.tensor([4, 2]))
    if kind == "semimarkov":
        return SemiMarkovCRF(x, torch.tensor([5, 5 if equal else 3]))
    if kind.startswith("eisner"):
        return DependencyCRF(x, torch.tensor(lengths), multiroot=kind == "eisner")
    return TreeCRF(x, torch.tensor([4, 3]))


def enumerate_parts(crf, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every structure of sentence ``b`` as 0/1 parts in the layout of ``crf.marginals``
    ``[T, ...]`` and its score ``[T]`` (``-inf`` with a masked part), by enumeration."""
    L = int(crf.lengths[b])
    if isinstance(crf, LinearChainCRF):
        n, C = crf.unary.shape[1:]
        ys = torch.tensor([list(y) + [-1] * (n - L) for y in itertools.product(range(C), repeat=L)])
        parts = torch.nn.functional.one_hot(ys.clamp_min(0), C) * (ys >= 0).unsqueeze(-1)
    elif isinstance(crf, SemiMarkovCRF):
        _, m, K, C, _ = crf.edge.shape
        ys = segmentations(L, K, C, m + 1)
        one = SemiMarkovCRF(crf.edge[b:b + 1].expand(len(ys), -1, -1, -1, -1),
                            torch.full((len(ys),), L))
        parts = one.parts(ys)
    elif isinstance(crf, (DependencyCRF, Dependency2oCRF)):
        N = crf.scores.shape[-1] - 1
        trees = torch.from_numpy(all_trees(L, True, crf.multiroot))
        ys = torch.cat((trees, torch.full((len(trees), N - L), -1)), 1)
        parts = torch.zeros(len(ys), N + 1, N + 1, dtype=torch.float64)
        for t, heads in enumerate(trees.tolist()):
            for d, h in enumerate(heads, 1):
                parts[t, h, d] = 1
    else:
        N = crf.scores.shape[-1]
        spans = bracketings(0, L - 1)
        ys = parts = torch.zeros(len(spans), N, N, dtype=torch.float64)
        for t, tree in enumerate(spans):
            for i, j in tree:
                parts[t, i, j] = 1
    single = _one(crf, b, len(ys))
    return parts.double(), single.score(ys).double()


def _one(crf, b: int, copies: int):
    """Sentence ``b`` of ``crf`` repeated ``copies`` times."""
    lengths = crf.lengths[b:b + 1].expand(copies)
    if isinstance(crf, LinearChainCRF):
        return LinearChainCRF(unary=crf.unary[b:b + 1].expand(copies, -1, -1),
                              transition=crf.edge[b:b + 1].expand(copies, -1, -1, -1)[:, 0]
                              if crf.edge.shape[1] == 0 else None, lengths=lengths) \
            if crf.edge.shape[1] == 0 else _chain_copies(crf, b, copies)
    if isinstance(crf, SemiMarkovCRF):
        return SemiMarkovCRF(crf.edge[b:b + 1].expand(copies, -1, -1, -1, -1), lengths)
    if isinstance(crf, DependencyCRF):
        return DependencyCRF(crf.scores[b:b + 1].expand(copies, -1, -1), lengths, crf.multiroot)
    if isinstance(crf, Dependency2oCRF):
        return Dependency2oCRF(crf.scores[b:b + 1].expand(copies, -1, -1),
                               crf.siblings[b:b + 1].expand(copies, -1, -1, -1), lengths, crf.multiroot)
    return TreeCRF(crf.scores[b:b + 1].expand(copies, -1, -1), lengths)


def _chain_copies(crf, b, copies):
    # (the edge form: the unaries of the class built from log_potentials are 0)
    return LinearChainCRF(crf.edge[b:b + 1].expand(copies, -1, -1, -1), crf.lengths[b:b + 1].expand(copies))


@pytest.mark.parametrize("kind", STRUCTURES)
@pytest.mark.parametrize("masked", [False, True])
def test_semirings_match_enumeration(kind, masked):
    check_against_enumeration(make(kind, 1, masked), make(kind, 2))


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), lengths=st.lists(st.integers(1, 4), min_size=2, max_size=2),
       multiroot=st.booleans(), masked=st.booleans())
def test_second_order_semirings_match_enumeration(seed, lengths, multiroot, masked):
    kind = "eisner2o" if multiroot else "eisner2o1"
    check_against_enumeration(make(kind, seed, masked, lengths=lengths), make(kind, seed + 1, lengths=lengths))


@pytest.mark.parametrize("kind", STRUCTURES)
def test_compiled_log_and_max_agree_with_the_generic_program(kind):
    crf = make(kind, 9, masked=True)
    for sr in (LogSemiring, MaxSemiring):
        assert torch.allclose(run(crf, sr), run(crf, sr, compiled=False), atol=1e-9)
    compiled, generic = (crf.semiring_marginals(LogSemiring, compiled=c) for c in (True, False))
    assert torch.allclose(compiled, generic, atol=1e-9)


def check_against_enumeration(p, q):
    """Every semiring's value and marginals on ``p`` (``q``: the second distribution of the
    cross-entropy and KL) against the enumeration of its structures."""
    generic = dict(compiled=False)
    values = {sr: run(p, sr, **generic) for sr in (LogSemiring, MaxSemiring, EntropySemiring)}
    kmax = run(p, KMaxSemiring(3))
    ce, kl = run(p, CrossEntropySemiring, q), run(p, KLSemiring, q)
    mu_log = p.semiring_marginals(LogSemiring, compiled=False)
    mu_max = p.semiring_marginals(MaxSemiring)
    mu_kmax = p.semiring_marginals(KMaxSemiring(2))
    for b in range(2):
        parts, scores = enumerate_parts(p, b)
        _, q_scores = enumerate_parts(q, b)
        ok = scores > -float("inf")
        if not ok.any():  # (a mask left no structure)
            assert values[LogSemiring][b] == -float("inf") and values[EntropySemiring][b] == 0
            continue
        log_p = scores - torch.logsumexp(scores, 0)
        log_q = q_scores - torch.logsumexp(q_scores, 0)
        prob = log_p.exp()
        assert values[LogSemiring][b].item() == pytest.approx(torch.logsumexp(scores, 0).item(), abs=1e-9)
        assert values[MaxSemiring][b].item() == pytest.approx(scores.max().item(), abs=1e-9)
        top = torch.sort(scores, descending=True).values[:3]
        top = torch.cat((top, top.new_full((3 - len(top),), -float("inf"))))
        assert torch.allclose(kmax[:, b], top, atol=1e-9)
        entropy = -(prob[ok] * log_p[ok]).sum()
        assert values[EntropySemiring][b].item() == pytest.approx(entropy.item(), abs=1e-9)
        assert ce[b].item() == pytest.approx(-(prob[ok] * log_q[ok]).sum().item(), abs=1e-9)
        assert kl[b].item() == pytest.approx((prob[ok] * (log_p[ok] - log_q[ok])).sum().item(), abs=1e-9)
        assert p.count[b].item() == int(ok.sum())
        expected = (prob[ok].view(-1, *[1] * (parts.dim() - 1)) * parts[ok]).sum(0)
        assert torch.allclose(mu_log[b].double(), expected, atol=1e-9)
        order = torch.argsort(scores, descending=True)
        assert torch.equal(mu_max[b].double(), parts[order[0]])
        for j in range(min(2, int(ok.sum()))):
            assert torch.equal(mu_kmax[j, b].double(), parts[order[j]])


@pytest.mark.parametrize("kind", STRUCTURES)
def test_sampled_semirings_draw_structures_with_their_probabilities(kind):
    crf = make(kind, 3)
    torch.manual_seed(0)
    one = [crf.semiring_marginals(SampledSemiring) for _ in range(64)]
    coded = [crf.semiring_marginals(MultiSampledSemiring) for _ in range(40)]
    many = [MultiSampledSemiring.to_discrete(c, j) for c in coded for j in range(16)]
    gumbel = [crf.gumbel_crf(0.5).detach() for _ in range(64)]
    for b in range(2):
        parts, scores = enumerate_parts(crf, b)
        flat = parts.flatten(1)
        for draws, tol in ((one, 0.2), (many, 0.08), (gumbel, 0.2)):
            # every draw is one of the structures (its parts exactly), the frequencies are
            # the marginals (tolerance: a few standard deviations at these sample sizes)
            drawn = torch.stack([d[b].double().flatten() for d in draws])
            assert ((drawn[:, None] == flat[None]).all(-1).sum(1) == 1).all()
            assert torch.allclose(drawn.mean(0), crf.marginals[b].double().flatten(), atol=tol)


def test_gumbel_crf_gradient_is_the_straight_through_softmax():
    crf_scores = torch.randn(1, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)
    sample = LinearChainCRF(crf_scores).gumbel_crf(0.7)
    (grad,) = torch.autograd.grad((sample * torch.randn_like(sample)).sum(), crf_scores)
    assert sample.requires_grad and torch.isfinite(grad).all() and grad.abs().sum() > 0


def rebuild(crf, x: torch.Tensor, scale: float = 1.0):
    """The same class, lengths and ``multiroot`` with first potential ``x`` (arc, span or edge
    scores) and the other potentials (sibling scores) times ``scale``."""
    args = {"multiroot": crf.multiroot} if hasattr(crf, "multiroot") else {}
    rest = [crf.siblings * scale] if isinstance(crf, Dependency2oCRF) else []
    return type(crf)(x, *rest, crf.lengths, **args)


@pytest.mark.parametrize("kind", STRUCTURES)
def test_sparsemax_marginals_are_sparse_convex_combinations(kind):
    crf = make(kind, 4)
    mu = crf.semiring_marginals(SparseMaxSemiring)
    assert (mu >= 0).all() and (mu <= 1 + 1e-12).all()
    if kind == "chain":  # one label per position
        assert torch.allclose(mu.sum(-1)[crf.mask], torch.ones(int(crf.lengths.sum()), dtype=mu.dtype))
    if kind.startswith("eisner"):  # one head per word
        assert torch.allclose(mu.sum(1)[0, 1:5], torch.ones(4, dtype=mu.dtype))
    # far apart scores: the sparse marginals are the best structure
    sharp = rebuild(crf, (crf.scores if hasattr(crf, "scores") else crf.edge) * 100, scale=100)
    assert torch.equal(sharp.semiring_marginals(SparseMaxSemiring), sharp.semiring_marginals(MaxSemiring))
    # the value's gradient is the sparse marginals (gradcheck), and sparsemax is the projection
    x = (crf.scores if hasattr(crf, "scores") else crf.edge).detach().clone().requires_grad_()

    def value(x):
        return run(rebuild(crf, x), SparseMaxSemiring)

    assert torch.autograd.gradcheck(value, (x,), eps=1e-7, atol=1e-5)
    w = sparsemax(torch.tensor([[0.5, 0.2, -3.0], [2.0, 0.0, 1.9]], dtype=torch.float64))
    assert torch.allclose(w, torch.tensor([[0.65, 0.35, 0.0], [0.55, 0.0, 0.45]], dtype=torch.float64))


@pytest.mark.parametrize("kind", STRUCTURES)
def test_checkpoint_semiring_gives_the_same_values_and_gradients(kind):
    crf = make(kind, 5)
    x = (crf.scores if hasattr(crf, "scores") else crf.edge).detach()
    out = []
    for sr in (LogSemiring, CheckpointSemiring(LogSemiring), CheckpointSemiring(EntropySemiring)):
        y = x.clone().requires_grad_()
        v = run(rebuild(crf, y), sr, compiled=False)
        out.append((v.detach(), torch.autograd.grad(v.sum(), y)[0]))
    assert torch.allclose(out[0][0], out[1][0]) and torch.allclose(out[0][1], out[1][1])
    assert torch.allclose(out[2][0], crf.entropy)


class Counting(Semiring):
    """The counting semiring of docs/structs.md: every allowed part counts 1."""

    zero, one = 0.0, 1.0

    @classmethod
    def convert(cls, potentials):
        return (potentials > NEG).double().unsqueeze(0)

    @classmethod
    def sum(cls, x, dim=-1):
        return x.sum(dim)

    @classmethod
    def mul(cls, a, b):
        return a * b


@pytest.mark.parametrize("kind", STRUCTURES)
def test_a_user_semiring_counts_the_structures(kind):
    crf = make(kind, 6, masked=True)
    assert torch.equal(crf.run(Counting), crf.count)


def test_matrix_tree_takes_log_and_max_only_and_bad_semirings_are_errors():
    crf = NonProjectiveDependencyCRF(torch.randn(1, 4, 4, dtype=torch.float64))
    assert torch.equal(crf.run(LogSemiring), crf.log_partition)
    assert crf.count.item() == 16  # (n+1)^(n-1) rooted trees of n = 3 words
    with pytest.raises(TypeError, match="no dynamic program written for any semiring"):
        crf.run(EntropySemiring)
    chain = make("chain", 0)
    with pytest.raises(TypeError, match="must be a Semiring"):
        chain.run("log")
    with pytest.raises(ValueError, match="needs other="):
        chain.run(KLSemiring)
    with pytest.raises(ValueError, match="same shapes"):
        chain.run(KLSemiring, make("chain", 1).__class__(torch.randn(2, 2, 2, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="k must be"):
        KMaxSemiring(0)
    with pytest.raises(ValueError, match="temperature"):
        GumbelCRFSemiring(0)


# ---------------------------------------------------------------------------------------------
# torch-struct 0.5's semirings on the same inputs.
# ---------------------------------------------------------------------------------------------

def _torch_struct(crf):
    ts = pytest.importorskip("torch_struct")
    from synattn.structs import convert
    if isinstance(crf, LinearChainCRF):
        return ts.LinearChainCRF(convert.chain_to_torch_struct(crf.edge).clone(), lengths=crf.lengths)
    if isinstance(crf, SemiMarkovCRF):
        return ts.SemiMarkovCRF(convert.semi_markov_to_torch_struct(crf.edge).clone(), lengths=crf.lengths)
    if isinstance(crf, DependencyCRF):
        return ts.DependencyCRF(convert.arcs_to_torch_struct(crf.scores).clone().requires_grad_(), lengths=crf.lengths,
                                multiroot=crf.multiroot)
    return ts.TreeCRF(convert.spans_to_torch_struct(crf.scores).clone(), lengths=crf.lengths)


@pytest.mark.parametrize("kind", [k for k in STRUCTURES if not k.startswith("eisner2o")])
def test_values_agree_with_torch_struct(kind):  # (torch-struct has no second-order CRF)
    # (torch-struct's semi-Markov log Z is wrong for ragged batches)
    p, q = make(kind, 7, equal=True), make(kind, 8, equal=True)
    # (a fresh torch-struct object per call: its programs set requires_grad on the potentials)
    tp, tq = (lambda: _torch_struct(p)), (lambda: _torch_struct(q))
    pairs = [(run(p, LogSemiring, compiled=False), tp().partition),
             (run(p, MaxSemiring, compiled=False), tp().max),
             (run(p, KMaxSemiring(3)), tp().kmax(3)),
             (run(p, EntropySemiring), tp().entropy)]
    if not kind.startswith("eisner"):  # (torch-struct's DependencyCRF.count fails in place)
        pairs.append((p.count, tp().count))
    if kind in ("chain", "cky"):  # (torch-struct's semi-Markov and dependency programs cannot
        # take the two potentials of its cross-entropy and KL semirings)
        pairs += [(run(p, CrossEntropySemiring, q), tp().cross_entropy(tq())),
                  (run(p, KLSemiring, q), tp().kl(tq()))]
    for ours, theirs in pairs:
        theirs = theirs.detach().double()  # (torch-struct's "no structure" is a finite -1e5 or so)
        theirs = torch.where(theirs < -1e4, -float("inf"), theirs)
        assert torch.allclose(ours.double(), theirs.double(), atol=1e-6), (ours, theirs)
