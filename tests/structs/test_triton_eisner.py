"""The Triton kernels of Eisner's algorithm (synattn.structs.triton_kernels.eisner) against the
other backends and brute force: log Z, marginals, gradients, the marginals' backward, the best
tree; ragged lengths, masks, length-1 sentences; launches per call. Without a GPU they run in
Triton's interpreter on CPU tensors (tests/conftest.py turns it on)."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import DependencyCRF, backend
from synattn.structs.backend import use_backend
from tests.helpers.trees import brute_force
from tests.helpers.triton_launches import launches_and_ops

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or backend.triton_interpreted()),
                                reason="no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def batch(seed: int, lengths: list[int], dtype=torch.float64, scale: float = 2.0):
    gen = torch.Generator().manual_seed(seed)
    L = max(lengths) + 1
    scores = torch.randn(len(lengths), L, L, generator=gen, dtype=dtype) * scale
    return scores.to(DEVICE), torch.tensor(lengths, device=DEVICE)


def results(scores, lengths, multiroot, name):
    """log Z, marginals, their gradients (a fixed direction), the best tree and its score."""
    x = scores.detach().clone().requires_grad_()
    with use_backend(name):
        crf = DependencyCRF(x, lengths, multiroot=multiroot)
        log_z, mu = crf.log_partition, crf.marginals
        (grad,) = torch.autograd.grad(log_z.sum(), x, retain_graph=True)
        direction = torch.linspace(-1, 1, mu.numel(), dtype=mu.dtype, device=mu.device).view_as(mu)
        (vjp,) = torch.autograd.grad(mu, x, direction)
        return [log_z.detach(), mu.detach(), grad, vjp, crf.argmax, crf.max]


@pytest.mark.parametrize("multiroot", [True, False])
def test_float32_matches_numba_and_torch(multiroot):
    scores, lengths = batch(0, [7, 1, 4, 2], torch.float32)
    got = results(scores, lengths, multiroot, "triton")
    for other in ("torch", "numba") if DEVICE == "cpu" else ("torch",):
        want = results(scores, lengths, multiroot, other)
        for what, a, b in zip(["log Z", "marginals", "grad", "marginals vjp", "argmax", "max"], got, want):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=f"{what} vs {other}")


def test_equals_brute_force_with_masks():
    """Masked arcs (``-inf``) as users give them; a sentence whose masks leave one tree."""
    scores, lengths = batch(1, [4, 3, 1])
    scores[0, 2, 3] = scores[0, 0, 1] = float("-inf")
    scores[1, :, 2] = float("-inf")
    scores[1, 3, 2] = 0.5  # word 2's only head is word 3
    with use_backend("triton"):
        crf = DependencyCRF(scores, lengths, multiroot=False)
        log_z, mu = crf.log_partition, crf.marginals
    for b, n in enumerate(lengths.tolist()):
        finite = torch.where(scores[b].isinf(), torch.full_like(scores[b], -1e9), scores[b])
        z, m, _ = brute_force(finite[:n + 1, :n + 1].cpu(), n, True, False)
        torch.testing.assert_close(log_z[b].cpu(), z)
        torch.testing.assert_close(mu[b, :n + 1, :n + 1].cpu(), m)
        assert mu[b, n + 1:].abs().sum() == 0 and mu[b, :, n + 1:].abs().sum() == 0
    assert mu[0, 2, 3] == 0 and mu[1, 3, 2] == pytest.approx(1.0)


def test_no_tree_left_and_ties():
    """Masks that leave no tree give -inf and -1 heads; all-equal scores give one valid tree."""
    scores, lengths = batch(2, [3, 3])
    scores[0, :, 2] = float("-inf")  # word 2 has no head
    scores[1] = 0.0
    with use_backend("triton"):
        crf = DependencyCRF(scores, lengths, multiroot=False)
        assert crf.log_partition[0] == -float("inf") and crf.max[0] == -float("inf")
        assert crf.argmax[0].tolist() == [-1, -1, -1]
        heads = crf.argmax[1].tolist()
        with use_backend("torch"):
            assert heads == DependencyCRF(scores, lengths, multiroot=False).argmax[1].tolist()
    assert sorted(heads).count(0) == 1  # one root


def test_double_backward_matches_torch():
    """A third derivative (create_graph through the marginals' backward) stays differentiable."""
    scores, lengths = batch(3, [3, 2])
    outs = []
    for name in ("torch", "triton"):
        x = scores.clone().requires_grad_()
        with use_backend(name):
            mu = DependencyCRF(x, lengths).marginals
            (g,) = torch.autograd.grad((mu ** 2).sum(), x, create_graph=True)
            (h,) = torch.autograd.grad(g.sum(), x)
        outs.append(h)
    torch.testing.assert_close(*outs)


def test_auto_keeps_cpu_tensors_off_triton():
    scores, lengths = batch(4, [3])
    with use_backend("auto"):
        assert not backend.use_triton(scores.cpu())
    with use_backend("triton"):
        assert backend.use_triton(scores)


def test_triton_on_cpu_without_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(backend, "triton_interpreted", lambda: False)
    with use_backend("triton"), pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        DependencyCRF(torch.randn(1, 3, 3), torch.tensor([2])).log_partition


@pytest.mark.parametrize("n", [3, 9])
def test_marginals_take_a_fixed_number_of_launches(n):
    """Eisner marginals in at most 10 launches whatever N (the PyTorch path grows with N)."""
    from synattn.structs.triton_kernels import eisner

    scores, lengths = batch(5, [n, 2], torch.float32)
    with launches_and_ops() as counts:
        eisner.marginals(scores, lengths, False)
    assert counts["triton"] == 2
    assert counts["triton"] + counts["torch"] <= 10, counts
