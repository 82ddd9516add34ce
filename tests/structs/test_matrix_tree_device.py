"""The GPU path of the Matrix-Tree theorem (synattn.structs.dependency.matrix_tree_device) on CPU
tensors: the same numbers as the other backends, its certificate's fallback, and what makes it a
GPU path: operators per call that do not grow with N, one read back to the host per forward (none in
the backward)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from synattn.structs import NonProjectiveDependencyCRF, registry
from synattn.structs.backend import use_backend
from synattn.structs.dependency.arc_scores import check_arc_scores

DEVICE = next(i for i in registry.implementations("nonprojective") if i.name == "device")
READS = {"_local_scalar_dense", "item", "is_nonzero", "nonzero", "equal"}  # a device→host read on CUDA
FREE = {"empty", "empty_strided", "view", "_unsafe_view", "as_strided", "t", "detach", "alias", "expand",
        "permute", "unsqueeze", "squeeze", "select", "slice", "transpose", "diagonal", "lift_fresh"}


def inputs(seed: int, lengths: list[int], scale: float):
    gen = torch.Generator().manual_seed(seed)
    L = max(lengths) + 1
    scores = torch.randn(len(lengths), L, L, generator=gen, dtype=torch.float64) * scale
    scores[0, 2, 1] = float("-inf")  # a masked arc
    return check_arc_scores(scores, torch.tensor(lengths))[:2]


def everything(impl, scores, lengths, multiroot):
    x = scores.clone().requires_grad_()
    log_z = impl.log_partition(x, lengths, multiroot)
    (grad,) = torch.autograd.grad(log_z.sum(), x)
    mu = impl.marginals(x, lengths, multiroot)
    g = torch.linspace(-1, 1, mu.numel(), dtype=mu.dtype).view_as(mu)
    (hv,) = torch.autograd.grad(mu, x, g)
    return [log_z.detach(), mu.detach(), grad, hv]


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("scale", [1.0, 4.0, 30.0, 300.0])
def test_equals_the_cpu_paths(scale, multiroot):
    """Scales 30 and 300 fail the certificate in some sentences: those take the robust path."""
    scores, lengths = inputs(0, [6, 1, 4, 2], scale)
    torch_path = next(i for i in registry.implementations("nonprojective") if i.name == "torch")
    for what, a, b in zip(["log Z", "marginals", "grad", "Hessian-vector"],
                          everything(DEVICE, scores, lengths, multiroot),
                          everything(torch_path, scores, lengths, multiroot)):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8, msg=what)


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops, self.reads = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.reads += name in READS
        self.ops += name not in FREE
        return func(*args, **(kwargs or {}))


def counted(impl, n: int) -> tuple[int, int]:
    scores, lengths = inputs(1, [n, n - 1], 1.0)
    x = scores.clone().requires_grad_()
    with Count() as count:
        mu = impl.marginals(x, lengths, False)
        torch.autograd.grad(mu, x, torch.ones_like(mu))
    return count.ops, count.reads


def test_a_fixed_number_of_operators_and_one_read_back_per_forward_and_backward():
    """Marginals and their backward: the same operators at N = 6 and N = 40 (the CPU-oriented
    PyTorch path grows with N), one read back in the forward and none in the backward (it reuses
    the forward's)."""
    small, large = counted(DEVICE, 6), counted(DEVICE, 40)
    assert small == large and small[1] == 1, (small, large)
    torch_path = next(i for i in registry.implementations("nonprojective") if i.name == "torch")
    assert counted(torch_path, 40)[0] > 2 * counted(torch_path, 6)[0] > 2 * small[0]


def test_chosen_for_cuda_tensors_only():
    scores, lengths = inputs(2, [3], 1.0)
    assert registry.choose("nonprojective", scores, lengths, False).name != "device"
    with use_backend("torch"):
        assert registry.choose("nonprojective", scores, lengths, False).name == "torch"
    crf = NonProjectiveDependencyCRF(scores, lengths)
    torch.testing.assert_close(crf.marginals.sum(1)[:, 1:4], torch.ones(1, 3, dtype=torch.float64))


def test_a_third_derivative_matches_the_cpu_path():
    scores, lengths = inputs(3, [4, 2], 1.0)
    torch_path = next(i for i in registry.implementations("nonprojective") if i.name == "torch")
    outs = []
    for impl in (DEVICE, torch_path):
        x = scores.clone().requires_grad_()
        mu = impl.marginals(x, lengths, False)
        (g,) = torch.autograd.grad((mu ** 2).sum(), x, create_graph=True)
        outs.append(torch.autograd.grad(g.sum(), x)[0])
    torch.testing.assert_close(*outs, rtol=1e-8, atol=1e-8)
