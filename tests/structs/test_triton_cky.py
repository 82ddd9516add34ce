"""The Triton kernels of CKY (synattn.structs.triton_kernels.cky) against the PyTorch path and the
reference: log Z, span marginals, the gradient of log Z, the marginals' backward (a Hessian-vector
product) and a third derivative, the best tree with ties; ragged lengths, ``-inf`` masks, length-1
sentences and sentences left without a tree; labelled span scores. Without a GPU the kernels run in
Triton's interpreter on CPU tensors (tests/conftest.py turns it on)."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import TreeCRF, backend, registry
from synattn.structs.backend import use_backend

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or backend.triton_interpreted()),
                                reason="no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INF = float("inf")


def batch(seed: int, lengths: list[int], dtype=torch.float64, scale: float = 2.0, N: int | None = None):
    gen = torch.Generator().manual_seed(seed)
    N = N or max(lengths)
    scores = torch.randn(len(lengths), N, N, generator=gen, dtype=dtype) * scale
    return scores.to(DEVICE), torch.tensor(lengths, device=DEVICE)


def results(scores, lengths, name):
    """log Z, span marginals, the gradient of log Z and the vector-Jacobian product of the
    marginals in a fixed direction, the best tree and its score, on backend ``name``."""
    x = scores.detach().clone().requires_grad_()
    with use_backend(name):
        crf = TreeCRF(x, lengths)
        log_z, mu = crf.log_partition, crf.marginals
        (grad,) = torch.autograd.grad(log_z.sum(), x, retain_graph=True)
        direction = torch.linspace(-1, 1, mu.numel(), dtype=mu.dtype, device=mu.device).view_as(mu)
        (vjp,) = torch.autograd.grad(mu, x, direction)
        return [log_z.detach(), mu.detach(), grad, vjp, crf.argmax, crf.max]


WHAT = ["log Z", "marginals", "grad log Z", "marginals vjp", "argmax", "max"]


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_matches_torch_and_reference(dtype, tol):
    """Ragged lengths, one of 1, a masked span and a sentence whose masks leave no tree; the
    reference's marginals backward is autograd's double backward of its log Z."""
    scores, lengths = batch(0, [6, 4, 1, 5], dtype)
    scores[0, 1, 3] = -INF  # a forbidden span
    scores[3, 2, 2] = -INF  # a forbidden word: sentence 3 has no tree
    got = results(scores, lengths, "triton")
    for other in ("torch", "reference"):
        want = results(scores, lengths, other)
        for what, a, b in zip(WHAT, got, want):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{what} vs {other}")
    log_z, mu, grad, vjp, argmax, best = got
    assert log_z[3] == -INF and best[3] == -INF
    assert not mu[3].any() and not grad[3].any() and not vjp[3].any() and not argmax[3].any()
    assert mu[0, 1, 3] == 0 and mu[2, 0, 0] == 1 and mu[0, 0, 5] == pytest.approx(1.0)
    assert mu[1, 4:].abs().sum() == 0 and mu[1, :, 4:].abs().sum() == 0  # past the length


def test_argmax_with_ties_equals_the_other_backends():
    """Scores in {0, 1} tie many trees: the first best split wins on every backend; the tree's
    score is the max and it has ``2n - 1`` spans."""
    gen = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 2, (3, 7, 7), generator=gen).double().to(DEVICE)
    scores[0, 0, 3] = -INF
    lengths = torch.tensor([7, 5, 2], device=DEVICE)
    with use_backend("triton"):
        crf = TreeCRF(scores, lengths)
        argmax, best = crf.argmax, crf.max
    torch.testing.assert_close(crf.score(argmax), best)
    assert argmax.sum((1, 2)).tolist() == [13, 9, 3]
    for other in ("torch", "numba") if DEVICE == "cpu" else ("torch",):
        with use_backend(other):
            crf = TreeCRF(scores, lengths)
            assert torch.equal(crf.argmax, argmax), other
            assert torch.equal(crf.max, best), other
    zeros = torch.zeros(1, 4, 4, device=DEVICE)  # all trees tie: first splits, 0 (1 (2 3))
    with use_backend("triton"):
        spans = torch.nonzero(TreeCRF(zeros).argmax[0]).tolist()
    assert spans == [[0, 0], [0, 3], [1, 1], [1, 3], [2, 2], [2, 3], [3, 3]]


def test_tiles_smaller_than_the_sentence():
    """Tiles of 4 spans × 4 split points over 9 words: several tiles per width and per row, as
    long sentences get on a GPU (ties between tiles go to the first best split too)."""
    from synattn.structs.triton_kernels import cky

    scores, lengths = batch(5, [9, 6])
    scores = TreeCRF(scores, lengths).scores
    direction = torch.linspace(-1, 1, scores.numel(), dtype=scores.dtype, device=DEVICE).view_as(scores)
    log_z, mu, d_mu = cky.marginals(scores, lengths, direction, block=4)
    x = scores.clone().requires_grad_()
    with use_backend("torch"):
        crf = TreeCRF(x, lengths)
        (want,) = torch.autograd.grad(crf.marginals, x, direction)
        torch.testing.assert_close(log_z, crf.log_partition.detach(), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(mu, crf.marginals.detach(), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(d_mu, want, rtol=1e-9, atol=1e-9)
        ties = torch.zeros_like(scores)
        ties[0, 0, 3] = ties[0, 5, 8] = 1.0  # (0, 8) splits best after 3 (1st tile) and 4 (2nd)
        best, tree = cky.best_tree(ties, lengths, block=4)
        crf = TreeCRF(ties, lengths)
        assert torch.equal(tree, crf.argmax) and torch.equal(best, crf.max)
    assert tree[0, 0, 3] == tree[0, 4, 8] == tree[0, 5, 8] == 1 and tree[0, 0, 4] == 0


def test_third_derivative_matches_reference():
    """create_graph through the marginals' backward stays a function of the scores."""
    scores, lengths = batch(2, [4, 3])
    weights = torch.linspace(-1, 2, scores.numel(), dtype=scores.dtype, device=DEVICE).view_as(scores)
    outs = []
    for name in ("triton", "reference"):
        x = scores.clone().requires_grad_()
        with use_backend(name):
            mu = TreeCRF(x, lengths).marginals
            (g,) = torch.autograd.grad((mu * weights).sum(), x, create_graph=True)
            (h,) = torch.autograd.grad((g * weights).sum(), x)
        outs.append(h)
    torch.testing.assert_close(*outs)
    assert outs[0].abs().max() > 1e-3  # (not a vacuous comparison)


def test_labelled_spans_run_the_kernels(monkeypatch):
    """Labelled span scores reduce to the unlabelled structure (log-sum-exp or max over the
    labels), which the kernels then run."""
    from synattn.structs.triton_kernels import cky

    calls = []
    for name in ("marginals", "best_tree"):
        original = getattr(cky, name)
        monkeypatch.setattr(cky, name, lambda *a, _f=original, _n=name, **k: calls.append(_n) or _f(*a, **k))
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 4, 4, 3, generator=gen, dtype=torch.float64).to(DEVICE)
    lengths = torch.tensor([4, 3], device=DEVICE)
    out = {}
    for name in ("triton", "torch"):
        x = scores.clone().requires_grad_()
        with use_backend(name):
            crf = TreeCRF(x, lengths)
            log_z = crf.log_partition
            (grad,) = torch.autograd.grad(log_z.sum(), x)
            out[name] = [log_z.detach(), crf.marginals.detach(), grad, crf.argmax, crf.max]
    for a, b in zip(out["triton"], out["torch"]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert "marginals" in calls and "best_tree" in calls


def test_auto_keeps_cpu_tensors_off_triton():
    scores, lengths = batch(4, [3])
    checked = TreeCRF(scores.cpu(), lengths.cpu()).scores
    with use_backend("auto"):
        assert registry.choose("cky", checked, lengths.cpu()).name != "triton"
    with use_backend("triton"):
        assert registry.choose("cky", scores, lengths).name == "triton"
