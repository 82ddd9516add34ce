"""The GPU path of the Matrix-Tree theorem (synattn.structs.dependency.matrix_tree_device) on CPU
tensors: the same numbers as the other backends, its certificate's fallback (the Triton kernel of
synattn.structs.triton_kernels.matrix_tree, gated on the device, under Triton's interpreter here;
or, with the ``torch`` backend, the CPU paths after one read back), and what makes it a GPU path:
operators per call that do not grow with N, no read back to the host (one per forward without
Triton)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from synattn.structs import NonProjectiveDependencyCRF, registry
from synattn.structs.backend import triton_interpreted, use_backend
from synattn.structs.dependency.arc_scores import check_arc_scores
from synattn.structs.dependency.matrix_tree_device import device_marginals
from tests.helpers.triton_launches import _inside_kernels, launches

DEVICE = next(i for i in registry.implementations("nonprojective") if i.name == "device")
READS = {"_local_scalar_dense", "item", "is_nonzero", "nonzero", "equal"}  # a device→host read on CUDA
FREE = {"empty", "empty_like", "new_empty", "empty_strided", "view", "_unsafe_view", "as_strided", "t", "detach",
        "alias", "expand", "permute", "unsqueeze", "squeeze", "select", "slice", "transpose", "diagonal", "lift_fresh"}


ON = "cuda" if torch.cuda.is_available() else "cpu"
"""Where the tests run the path: the GPU when there is one."""


def inputs(seed: int, lengths: list[int], scale: float):
    gen = torch.Generator().manual_seed(seed)
    L = max(lengths) + 1
    scores = torch.randn(len(lengths), L, L, generator=gen, dtype=torch.float64) * scale
    scores[0, 2, 1] = float("-inf")  # a masked arc
    return check_arc_scores(scores.to(ON), torch.tensor(lengths, device=ON))[:2]


def everything(impl, scores, lengths, multiroot):
    x = scores.clone().requires_grad_()
    log_z = impl.log_partition(x, lengths, multiroot)
    (grad,) = torch.autograd.grad(log_z.sum(), x)
    mu = impl.marginals(x, lengths, multiroot)
    g = torch.linspace(-1, 1, mu.numel(), dtype=mu.dtype).view_as(mu)
    (hv,) = torch.autograd.grad(mu, x, g)
    return [log_z.detach(), mu.detach(), grad, hv]


GATES = ["triton", "torch"]
"""How the rows that fail the certificate are found: on the device (the Triton kernel runs for
every row, doing nothing for certified ones) or by one read back (``use_backend("torch")``)."""


def gate(name: str):
    if name == "triton":
        pytest.importorskip("triton")
        if ON == "cpu" and not triton_interpreted():
            pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
    return use_backend(name) if name == "torch" else use_backend("auto")


@pytest.mark.parametrize("gated", GATES)
@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("scale", [1.0, 4.0, 30.0, 300.0])
def test_equals_the_cpu_paths(scale, multiroot, gated):
    """Scales 30 and 300 fail the certificate in some sentences: those take the robust path."""
    scores, lengths = inputs(0, [6, 1, 4, 2], scale)
    torch_path = next(i for i in registry.implementations("nonprojective") if i.name == "torch")
    ok = device_marginals(scores, lengths, multiroot, True)[2]
    assert bool(ok.all()) == (scale < 30), ok  # (both ways are exercised)
    with gate(gated):
        mine = everything(DEVICE, scores, lengths, multiroot)
        alone = DEVICE.log_partition(scores, lengths, multiroot)  # (no gradient: log Z only)
    for what, a, b in zip(["log Z", "marginals", "grad", "Hessian-vector"], mine,
                          everything(torch_path, scores, lengths, multiroot)):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8, msg=what)
    torch.testing.assert_close(alone, mine[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gated", GATES)
@pytest.mark.parametrize("multiroot", [True, False])
def test_masks_that_leave_no_tree(multiroot, gated):
    """In sentence 1, words 1 and 2 may only head each other: no tree, which LU cannot certify;
    ``log Z`` is ``2·NEG``, the marginals and their backward 0 there, as on the CPU paths. In
    sentence 2 one tree is left."""
    scores, lengths = inputs(4, [5, 4, 3], 2.0)
    scores[1, :, 1:3] = float("-inf")
    scores[1, 1, 2] = scores[1, 2, 1] = 1.0
    scores[2, :, 1:] = float("-inf")
    scores[2, 0, 1] = scores[2, 1, 2] = scores[2, 2, 3] = 0.5
    scores, lengths = check_arc_scores(scores.to(ON), lengths)[:2]
    assert device_marginals(scores, lengths, multiroot, True)[2].tolist() == [True, False, True]
    torch_path = next(i for i in registry.implementations("nonprojective") if i.name == "torch")
    with gate(gated):
        mine = everything(DEVICE, scores, lengths, multiroot)
    assert mine[0][1] < -1.5e9 and mine[1][1].abs().max() == 0 and mine[3][1].abs().max() == 0
    torch.testing.assert_close(mine[0][2], torch.tensor(1.5, dtype=torch.float64))
    for what, a, b in zip(["log Z", "marginals", "grad", "Hessian-vector"], mine,
                          everything(torch_path, scores, lengths, multiroot)):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8, msg=what)


class Count(TorchDispatchMode):
    """PyTorch operators outside Triton's kernels (which its interpreter runs with PyTorch
    operators too) and, among them, reads back to the host."""

    def __init__(self):
        super().__init__()
        self.ops, self.reads, self.in_kernel = 0, 0, [0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.in_kernel[0]:
            name = func.overloadpacket.__name__
            self.reads += name in READS
            self.ops += name not in FREE
        return func(*args, **(kwargs or {}))


def counted(impl, n: int, scale: float = 1.0) -> tuple[int, int, int]:
    """Operators, reads back and Triton launches of marginals + backward at length ``n``."""
    scores, lengths = inputs(1, [n, n - 1], scale)
    x = scores.clone().requires_grad_()
    count = Count()
    with launches() as n_launches, _inside_kernels(count.in_kernel), count:
        mu = impl.marginals(x, lengths, False)
        torch.autograd.grad(mu, x, torch.ones_like(mu))
    return count.ops, count.reads, n_launches[0]


def test_a_fixed_number_of_operators_and_no_read_back():
    """Marginals and their backward: the same operators at N = 6 and N = 40 (the CPU-oriented
    PyTorch path grows with N), whether sentences fail the certificate (scale 300) or not, one
    launch of the robust kernel each way, and no read back to the host. (N = 160 counts the same,
    as does N = 40 at scale 300: left out for the interpreter's time.)"""
    with gate("triton"):
        pass
    assert not bool(device_marginals(*inputs(1, [6, 5], 300.0), False, True)[2].any())  # (all via the kernel)
    counts = {(n, scale): counted(DEVICE, n, scale) for n, scale in ((6, 1.0), (40, 1.0), (6, 300.0))}
    assert len(set(counts.values())) == 1, counts
    ops, reads, n_launches = counts[6, 1.0]
    assert reads == 0 and n_launches == 2, counts
    torch_path = next(i for i in registry.implementations("nonprojective") if i.name == "torch")
    assert counted(torch_path, 40)[0] > 2 * counted(torch_path, 6)[0] > 2 * ops


def test_without_triton_one_read_back_per_forward_and_none_in_the_backward():
    """The ``torch`` backend keeps to PyTorch: the forward reads one boolean back ("is every
    sentence certified?"), the backward reuses it."""
    with use_backend("torch"):
        small, large = counted(DEVICE, 6), counted(DEVICE, 40)
    assert small == large and small[1] == 1 and small[2] == 0, (small, large)


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
