"""The reference implementations against brute force, and every registered acceleration against
the reference (values, gradients of ``log Z`` and of the marginals, float64)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import (
    DependencyCRF,
    LinearChainCRF,
    NonProjectiveDependencyCRF,
    TreeCRF,
    backend,
    reference,
    registry,
)
from synattn.structs.backend import numba_available, use_backend
from synattn.structs.chain.semimarkov import check_segment_scores
from synattn.structs.cky.crf import check_span_scores
from synattn.structs.dependency.arc_scores import check_arc_scores
from tests.helpers.chains import brute_force as chain_brute_force
from tests.helpers.spans import brute_force as cky_brute_force
from tests.helpers.trees import brute_force as tree_brute_force

STRUCTURES = ["linear_chain", "projective", "nonprojective", "cky", "semi_markov"]


def accelerations(structure: str) -> list[registry.Implementation]:
    return registry.implementations(structure)[1:]


CASES = [pytest.param(structure, impl.name, id=f"{structure}-{impl.name}",
                      marks=pytest.mark.skipif(impl.name == "numba" and not numba_available(),
                                               reason="numba is not installed"))
         for structure in STRUCTURES for impl in accelerations(structure) if impl.name != "triton"]
# The Triton kernels run in Triton's interpreter without a GPU (seconds a call): fixed cases.
TRITON_CASES = [pytest.param(structure, id=structure) for structure in STRUCTURES
                if "triton" in [impl.name for impl in accelerations(structure)]]


def implementation(structure: str, name: str) -> registry.Implementation:
    return next(i for i in registry.implementations(structure) if i.name == name)


def random_inputs(structure: str, seed: int, lengths: list[int], multiroot: bool,
                  scale: float) -> tuple:
    """Checked float64 inputs of ``structure`` (the arguments its implementations take)."""
    gen = torch.Generator().manual_seed(seed)
    N, B = max(lengths), len(lengths)
    lengths = torch.tensor(lengths)
    if structure == "linear_chain":
        C = 1 + seed % 3
        unary = torch.randn(B, N, C, generator=gen, dtype=torch.float64) * scale
        edge = torch.randn(B, N - 1, C, C, generator=gen, dtype=torch.float64) * scale
        return unary, edge, lengths
    if structure == "semi_markov":
        K, C = 2 + seed % 3, 1 + seed % 2
        edge = torch.randn(B, N - 1, K, C, C, generator=gen, dtype=torch.float64) * scale
        return check_segment_scores(edge, lengths)[:2]
    if structure == "cky":
        return check_span_scores(torch.randn(B, N, N, generator=gen, dtype=torch.float64) * scale,
                                 lengths)
    scores = torch.randn(B, N + 1, N + 1, generator=gen, dtype=torch.float64) * scale
    return (*check_arc_scores(scores, lengths), multiroot)


def everything(impl: registry.Implementation, args: tuple, g: torch.Tensor) -> list[torch.Tensor]:
    """``log Z``, marginals, ``d log Z`` and the marginals' vector-Jacobian product with ``g``."""
    x = args[0].detach().requires_grad_()
    log_z = impl.log_partition(x, *args[1:])
    (d_log_z,) = torch.autograd.grad(log_z.sum(), x)
    mu = impl.marginals(x, *args[1:])
    (vjp,) = torch.autograd.grad(mu, x, g)
    return [log_z.detach(), mu.detach(), d_log_z, vjp]


inputs = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "multiroot": st.booleans(),
    "scale": st.sampled_from([0.1, 1.0, 4.0]),
})


@pytest.mark.parametrize("structure, name", CASES)
@settings(max_examples=12, deadline=None)
@given(case=inputs)
def test_acceleration_equals_reference(structure, name, case):
    impl = implementation(structure, name)
    args = random_inputs(structure, **case)
    g = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(case["seed"] + 1),
                    dtype=torch.float64)
    expected = everything(registry.implementations(structure)[0], args, g)
    for what, got, want in zip(["log Z", "marginals", "grad log Z", "marginals vjp"],
                               everything(impl, args, g), expected):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=f"{structure}/{name}: {what}")


@pytest.mark.parametrize("structure", TRITON_CASES)
def test_triton_equals_reference(structure):
    """Values and gradients of the Triton kernels (interpreted on the CPU without a GPU)."""
    pytest.importorskip("triton")
    if not (torch.cuda.is_available() or backend.triton_interpreted()):
        pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
    impl = implementation(structure, "triton")
    for case in ({"seed": 5, "lengths": [4, 1, 3], "multiroot": False, "scale": 4.0},
                 {"seed": 6, "lengths": [2, 5], "multiroot": True, "scale": 1.0}):
        args = random_inputs(structure, **case)
        g = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        expected = everything(registry.implementations(structure)[0], args, g)
        if torch.cuda.is_available():  # (compiled kernels take CUDA tensors)
            args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
        for what, got, want in zip(["log Z", "marginals", "grad log Z", "marginals vjp"],
                                   everything(impl, args, g.to(args[0].device)), expected):
            torch.testing.assert_close(got.cpu(), want, rtol=1e-9, atol=1e-9, msg=f"{structure}/triton: {what}")


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("projective", [True, False])
def test_dependency_references_match_brute_force(projective, multiroot):
    log_partition = (reference.eisner_log_partition if projective
                     else reference.matrix_tree_log_partition)
    scores, lengths = check_arc_scores(*random_batch(0, [4, 1, 3, 2], arcs=True))
    log_z = log_partition(scores, lengths, multiroot)
    mu = reference.marginals_by_autograd(log_partition, scores, lengths, multiroot)
    for b, n in enumerate(lengths.tolist()):
        z, m, _ = tree_brute_force(scores[b, :n + 1, :n + 1], n, projective, multiroot)
        torch.testing.assert_close(log_z[b], z)
        torch.testing.assert_close(mu[b, :n + 1, :n + 1], m)
        assert mu[b, n + 1:].abs().sum() == 0 and mu[b, :, n + 1:].abs().sum() == 0


def test_cky_reference_matches_brute_force():
    scores, lengths = check_span_scores(*random_batch(1, [5, 1, 3, 2], arcs=False))
    log_z = reference.cky_log_partition(scores, lengths)
    mu = reference.marginals_by_autograd(reference.cky_log_partition, scores, lengths)
    for b, n in enumerate(lengths.tolist()):
        z, m, _, _ = cky_brute_force(scores[b], n)
        torch.testing.assert_close(log_z[b], z)
        torch.testing.assert_close(mu[b], m)


def test_linear_chain_reference_matches_brute_force():
    gen = torch.Generator().manual_seed(2)
    unary = torch.randn(3, 5, 3, generator=gen, dtype=torch.float64)
    edge = torch.randn(3, 4, 3, 3, generator=gen, dtype=torch.float64)
    unary[1, 2:] = float("nan")  # positions past a chain's end are ignored
    lengths = torch.tensor([5, 2, 1])
    log_z = reference.linear_chain_log_partition(unary, edge, lengths)
    mu = reference.marginals_by_autograd(reference.linear_chain_log_partition, unary, edge, lengths)
    for b, n in enumerate(lengths.tolist()):
        z, node, *_ = chain_brute_force(unary[b, :n], edge[b, :n - 1], n)
        torch.testing.assert_close(log_z[b], z)
        torch.testing.assert_close(mu[b, :n], node)
        assert mu[b, n:].abs().sum() == 0


def random_batch(seed: int, lengths: list[int], arcs: bool):
    gen = torch.Generator().manual_seed(seed)
    L = max(lengths) + (1 if arcs else 0)
    return torch.randn(len(lengths), L, L, generator=gen, dtype=torch.float64), torch.tensor(lengths)


def test_reference_marginals_are_differentiable_to_second_order():
    scores, lengths = check_arc_scores(*random_batch(3, [3, 2], arcs=True))
    x = scores.clone().requires_grad_()
    torch.autograd.gradcheck(lambda s: reference.marginals_by_autograd(
        reference.eisner_log_partition, s, lengths, False), (x,))


# ---------------------------------------------------------------------------------------------
# The choice.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("structure", STRUCTURES)
def test_choice_follows_the_backend(structure):
    args = random_inputs(structure, 0, [3, 2], True, 1.0)
    with use_backend("reference"):
        assert registry.choose(structure, *args).name == "reference"
    with use_backend("torch"):
        assert registry.choose(structure, *args).name == "torch"
    with use_backend("auto"):
        assert registry.choose(structure, *args).name == ("numba" if numba_available() else "torch")


def test_register_appends_or_replaces_by_name_and_unknown_structures_are_errors():
    saved = list(registry._structure("cky").accelerations)
    try:
        never = registry.Implementation("never", None, None, applies=lambda *a: False)
        registry.register("cky", never)
        assert [i.name for i in registry.implementations("cky")][-1] == "never"
        first = registry.Implementation("first", reference.cky_log_partition, None)
        registry._structure("cky").accelerations.insert(0, first)
        assert registry.choose("cky", *random_inputs("cky", 0, [2], True, 1.0)) is first
        registry.register("cky", registry.Implementation("never", None, None))
        assert sum(i.name == "never" for i in registry.implementations("cky")) == 1
    finally:
        registry._structure("cky").accelerations[:] = saved
    with pytest.raises(KeyError, match="unknown structure 'spanning'"):
        registry.choose("spanning")


def test_public_classes_run_the_reference_on_request():
    gen = torch.Generator().manual_seed(4)
    arcs = torch.randn(2, 5, 5, generator=gen, dtype=torch.float64)
    spans = torch.randn(2, 4, 4, generator=gen, dtype=torch.float64)
    unary = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([4, 2])
    crfs = [lambda: DependencyCRF(arcs, lengths, multiroot=False),
            lambda: NonProjectiveDependencyCRF(arcs, lengths),
            lambda: TreeCRF(spans, lengths),
            lambda: LinearChainCRF(unary=unary, transition=arcs[0, :3, :3], lengths=lengths)]
    for make in crfs:
        fast = make()
        with use_backend("reference"):
            ref = make()
            torch.testing.assert_close(ref.log_partition, fast.log_partition)
            torch.testing.assert_close(ref.marginals, fast.marginals)
