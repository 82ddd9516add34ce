"""The Triton kernels of the linear-chain and semi-Markov CRFs (synattn.structs.triton_kernels.chain
and .semimarkov) against the other backends and the reference: log Z, node, pair and segment
marginals, gradients, the marginals' backward, the best labelling; ragged lengths, masks,
length-1 sequences, large float32 scores; launches per call. Without a GPU they run in Triton's
interpreter on CPU tensors (tests/conftest.py turns it on)."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import LinearChainCRF, SemiMarkovCRF, backend, reference, registry
from synattn.structs.backend import use_backend
from tests.helpers.chains import brute_force

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or backend.triton_interpreted()),
                                reason="no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}


def direction(x: torch.Tensor) -> torch.Tensor:
    return torch.linspace(-1, 1, x.numel(), dtype=x.dtype, device=x.device).view_as(x)


def chain_batch(seed: int, lengths: list[int], C: int, dtype=torch.float64, masks: bool = True):
    gen = torch.Generator().manual_seed(seed)
    unary = torch.randn(len(lengths), max(lengths), C, generator=gen, dtype=dtype) * 2
    transition = torch.randn(C, C, generator=gen, dtype=dtype)
    if masks:
        unary[0, 2, 1] = transition[0, 2] = float("-inf")
    return unary.to(DEVICE), transition.to(DEVICE), torch.tensor(lengths, device=DEVICE)


def chain_results(unary, transition, lengths, name):
    """log Z, node and pair marginals, the gradients of log Z and the marginals' vector-Jacobian
    product (unary and transition), the best labelling, its score and the max."""
    u, t = unary.clone().requires_grad_(), transition.clone().requires_grad_()
    with use_backend(name):
        crf = LinearChainCRF(unary=u, transition=t, lengths=lengths)
        log_z, mu, xi = crf.log_partition, crf.marginals, crf.edge_marginals
        grads = torch.autograd.grad(log_z.sum(), (u, t), retain_graph=True)
        vjp = torch.autograd.grad((mu * direction(mu)).sum() + (xi * direction(xi)).sum(), (u, t))
        best = crf.argmax
        return [log_z.detach(), mu.detach(), xi.detach(), *grads, *vjp, best, crf.max, crf.score(best)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_chain_matches_torch_and_reference(dtype):
    """Ragged lengths, a length-1 chain, a masked label and a masked transition (``-inf``)."""
    args = chain_batch(0, [5, 1, 3], 3, dtype)
    got = chain_results(*args, "triton")
    names = ["log Z", "marginals", "edge marginals", "grad unary", "grad transition", "vjp unary",
             "vjp transition", "argmax", "max", "score(argmax)"]
    for other in ("torch", "reference"):
        for what, a, b in zip(names, got, chain_results(*args, other)):
            torch.testing.assert_close(a, b, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype],
                                       msg=f"{what} vs {other}")
    torch.testing.assert_close(got[-1], got[-2])  # score(argmax) == max
    assert got[1][0, 2, 1] == 0 and got[2][0, :, 0, 2].abs().sum() == 0  # the masked parts


def test_chain_equals_brute_force_and_feasibility():
    """Against enumeration; a chain whose masks leave no labelling: -inf, zero marginals, -1."""
    unary, transition, lengths = chain_batch(1, [4, 2, 1], 2, masks=False)
    unary[1, 0] = float("-inf")  # chain 1: no label at position 0
    with use_backend("triton"):
        crf = LinearChainCRF(unary=unary, transition=transition, lengths=lengths)
        log_z, mu, xi, best, top = crf.log_partition, crf.marginals, crf.edge_marginals, crf.argmax, crf.max
    for b in (0, 2):
        n = int(lengths[b])
        z, node, pair, score, labels = brute_force(unary[b, :n].cpu(), transition.expand(max(n - 1, 0), 2, 2).cpu(), n)
        torch.testing.assert_close(log_z[b].cpu(), z)
        torch.testing.assert_close(mu[b, :n].cpu(), node)
        torch.testing.assert_close(xi[b, :n - 1].cpu(), pair)
        torch.testing.assert_close(top[b].cpu(), score)
        assert best[b, :n].tolist() == labels.tolist() and (best[b, n:] == -1).all()
        assert mu[b, n:].abs().sum() == 0 and xi[b, n - 1:].abs().sum() == 0
    assert log_z[1] == -float("inf") and top[1] == -float("inf")
    assert mu[1].abs().sum() == 0 and xi[1].abs().sum() == 0 and (best[1] == -1).all()


def test_chain_float32_keeps_its_precision_on_long_chains():
    """log Z near 1000 (40 positions of scores near 20) leaves the float32 marginals within a few
    rounding steps of the scores themselves: the kernels never subtract log Z from a forward
    score (the plain float32 forward-backward of the reference is off by ~5e-5 here)."""
    gen = torch.Generator().manual_seed(2)
    unary = (torch.randn(2, 40, 3, generator=gen) * 2 + 20).to(DEVICE)
    transition = torch.randn(3, 3, generator=gen).to(DEVICE)
    lengths = torch.tensor([40, 33], device=DEVICE)
    with use_backend("reference"):  # (in float64, from the same float32 values)
        want = LinearChainCRF(unary=unary.double(), transition=transition.double(), lengths=lengths).marginals
    with use_backend("triton"):
        crf = LinearChainCRF(unary=unary, transition=transition, lengths=lengths)
        got = crf.marginals
    assert crf.log_partition.min() > 600
    torch.testing.assert_close(got.double(), want, rtol=0, atol=5e-6)


def semi_markov_results(edge, lengths, name):
    x = edge.clone().requires_grad_()
    with use_backend(name):
        crf = SemiMarkovCRF(x, lengths)
        log_z, mu = crf.log_partition, crf.marginals
        (grad,) = torch.autograd.grad(log_z.sum(), x, retain_graph=True)
        (vjp,) = torch.autograd.grad(mu, x, direction(mu))
        best = crf.argmax
        return [log_z.detach(), mu.detach(), grad, vjp, best, crf.max, crf.score(best)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_semi_markov_matches_torch_and_reference(dtype):
    """Ragged lengths, a length-1 sequence, masked segments (``-inf``)."""
    gen = torch.Generator().manual_seed(3)
    edge = torch.randn(3, 5, 3, 2, 2, generator=gen, dtype=dtype) * 2
    edge[0, 1, 2, :, 1] = edge[2, 0, 1, 1] = float("-inf")
    edge, lengths = edge.to(DEVICE), torch.tensor([6, 1, 4], device=DEVICE)
    got = semi_markov_results(edge, lengths, "triton")
    names = ["log Z", "marginals", "grad", "marginals vjp", "argmax", "max", "score(argmax)"]
    for other in ("torch", "reference"):
        for what, a, b in zip(names, got, semi_markov_results(edge, lengths, other)):
            torch.testing.assert_close(a, b, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype],
                                       msg=f"{what} vs {other}")
    torch.testing.assert_close(got[-1], got[-2])
    # every position 1..n-1 lies in exactly one segment
    covered = torch.zeros(3, 6, dtype=dtype, device=DEVICE)
    for k in range(1, 3):
        for offset in range(1, k + 1):
            covered[:, offset:offset + 5] += got[1][:, :, k].sum((-1, -2))[:, :6 - offset]
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(covered[b, 1:n], torch.ones(n - 1, dtype=dtype, device=DEVICE))


def test_semi_markov_with_initial_scores_and_k_best():
    """Scores of position 0's label (``init``, as k-best's restrictions set them) at the registry
    level, and the k best structures (constrained argmaxes with ``init``) as on the PyTorch path."""
    gen = torch.Generator().manual_seed(4)
    edge = torch.randn(2, 4, 3, 2, 2, generator=gen, dtype=torch.float64).to(DEVICE)
    init = torch.tensor([[0.5, -1e9], [-0.3, 0.7]], dtype=torch.float64, device=DEVICE)
    lengths = torch.tensor([5, 3], device=DEVICE)
    with use_backend("triton"):
        impl = registry.choose("semi_markov", edge, lengths, init)
        assert impl.name == "triton"
        torch.testing.assert_close(impl.log_partition(edge, lengths, init),
                                   reference.semi_markov_log_partition(edge, lengths, init))
        got = SemiMarkovCRF(edge, lengths).kbest(3)
    with use_backend("torch"):
        want = SemiMarkovCRF(edge, lengths).kbest(3)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])


def test_length_one_only():
    """``n = 1`` for every sequence: no transitions or segments at all (empty tensors)."""
    unary = torch.randn(2, 1, 3, dtype=torch.float64, device=DEVICE).requires_grad_()
    edge = torch.randn(2, 0, 3, 2, 2, dtype=torch.float64, device=DEVICE)
    with use_backend("triton"):
        crf = LinearChainCRF(unary=unary, lengths=torch.tensor([1, 1], device=DEVICE))
        (grad,) = torch.autograd.grad(crf.log_partition.sum(), unary)
        torch.testing.assert_close(crf.log_partition, unary.detach().logsumexp(-1)[:, 0])
        torch.testing.assert_close(grad, unary.detach().softmax(-1))
        assert crf.edge_marginals.shape == (2, 0, 3, 3)
        assert crf.argmax[:, 0].tolist() == unary.detach()[:, 0].argmax(-1).tolist()
        semi = SemiMarkovCRF(edge, torch.tensor([1, 1], device=DEVICE))
        torch.testing.assert_close(semi.log_partition, torch.full((2,), 2.0, dtype=torch.float64,
                                                                  device=DEVICE).log())
        assert semi.marginals.shape == edge.shape and semi.argmax.tolist() == [[0], [0]]


@pytest.mark.parametrize("structure", ["chain", "semi_markov"])
def test_double_backward_matches_torch(structure):
    """A third derivative (create_graph through the marginals' backward) stays differentiable."""
    gen = torch.Generator().manual_seed(5)
    shape = (2, 3, 2) if structure == "chain" else (2, 2, 3, 2, 2)
    x0 = torch.randn(*shape, generator=gen, dtype=torch.float64).to(DEVICE)
    lengths = torch.tensor([3, 2], device=DEVICE)
    outs = []
    for name in ("torch", "triton"):
        x = x0.clone().requires_grad_()
        with use_backend(name):
            crf = LinearChainCRF(unary=x, lengths=lengths) if structure == "chain" else SemiMarkovCRF(x, lengths)
            (g,) = torch.autograd.grad((crf.marginals ** 2).sum(), x, create_graph=True)
            (h,) = torch.autograd.grad(g.sum(), x)
        outs.append(h)
    torch.testing.assert_close(*outs)


def test_auto_keeps_cpu_tensors_off_triton():
    unary, transition, lengths = chain_batch(6, [3], 2, masks=False)
    edge = unary.new_zeros(1, 2, 3, 2, 2)
    with use_backend("auto"):
        assert registry.choose("linear_chain", unary.cpu(), unary.new_zeros(1, 2, 2, 2).cpu(),
                               lengths.cpu()).name != "triton"
        assert registry.choose("semi_markov", edge.cpu(), lengths.cpu()).name != "triton"
    with use_backend("triton"):
        assert registry.choose("semi_markov", edge, lengths).name == "triton"


@pytest.mark.parametrize("structure", ["chain", "semimarkov"])
def test_marginals_take_two_launches(structure, monkeypatch):
    """Marginals are one forward and one adjoint launch whatever the length."""
    import importlib

    module = importlib.import_module(f"synattn.structs.triton_kernels.{structure}")
    launches = []

    class Counted:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launches.append(grid)
            return self.kernel[grid]

    for name in ("_forward", "_adjoint"):
        monkeypatch.setattr(module, name, Counted(getattr(module, name)))
    lengths = torch.tensor([7, 2], device=DEVICE)
    if structure == "chain":
        module.marginals(torch.randn(2, 7, 2, device=DEVICE), torch.randn(2, 6, 2, 2, device=DEVICE), lengths)
    else:
        module.marginals(torch.randn(2, 6, 3, 2, 2, device=DEVICE), lengths)
    assert launches == [(2,), (2,)]


def test_label_sets_wider_than_a_tile():
    """``C`` above the tile edge (32): the labels in several chunks, with a chunk's running max."""
    gen = torch.Generator().manual_seed(7)
    unary = torch.randn(2, 3, 37, generator=gen, dtype=torch.float64).to(DEVICE)
    transition = torch.randn(37, 37, generator=gen, dtype=torch.float64).to(DEVICE)
    edge = torch.randn(2, 2, 2, 35, 35, generator=gen, dtype=torch.float64).to(DEVICE)
    lengths = torch.tensor([3, 2], device=DEVICE)
    got, want = [], []
    for name, out in (("triton", got), ("torch", want)):
        x, s = unary.clone().requires_grad_(), edge.clone().requires_grad_()
        with use_backend(name):
            chain = LinearChainCRF(unary=x, transition=transition, lengths=lengths)
            semi = SemiMarkovCRF(s, lengths)
            mu, nu = chain.marginals, semi.marginals
            vjp = torch.autograd.grad((mu * direction(mu)).sum() + (nu * direction(nu)).sum(), (x, s))
            out += [chain.log_partition, mu, semi.log_partition, nu, *vjp, chain.argmax, semi.argmax]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
