"""The Triton kernels of second-order Eisner (synattn.structs.triton_kernels.eisner2o) against the
PyTorch path, the numba kernels, the plain reference and brute force: log Z, arc and sibling
marginals, their gradients and backward, the best tree; ragged lengths, masks, length-1 and
length-2 sentences, one root or several; launches per call. Without a GPU they run in Triton's
interpreter on CPU tensors (tests/conftest.py turns it on)."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import Dependency2oCRF, backend
from synattn.structs.backend import use_backend
from tests.helpers.second_order import brute_force
from tests.helpers.triton_launches import launches_and_ops

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or backend.triton_interpreted()),
                                reason="no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = ["log Z", "marginals", "sibling marginals", "vjp scores", "vjp siblings", "argmax", "max"]


def batch(seed: int, lengths: list[int], dtype=torch.float64, scale: float = 1.5):
    gen = torch.Generator().manual_seed(seed)
    B, L = len(lengths), max(lengths) + 1
    scores = torch.randn(B, L, L, generator=gen, dtype=dtype) * scale
    siblings = torch.randn(B, L, L, L, generator=gen, dtype=dtype) * scale
    return scores.to(DEVICE), siblings.to(DEVICE), torch.tensor(lengths, device=DEVICE)


def results(scores, siblings, lengths, multiroot, name, best=True):
    """log Z, both marginals and their vector-Jacobian product in a fixed direction (the
    marginals' backward), the best tree and its score."""
    x, y = scores.detach().clone().requires_grad_(), siblings.detach().clone().requires_grad_()
    with use_backend(name):
        crf = Dependency2oCRF(x, y, lengths, multiroot=multiroot)
        mu, mu_sib = crf.marginals, crf.sibling_marginals
        with torch.no_grad():  # (after the marginals: the PyTorch path caches them with log Z)
            log_z = crf.log_partition.detach()  # (its gradients: test_brute_force_and_no_tree_left)
        direction = [torch.linspace(-1, 1, t.numel(), dtype=t.dtype, device=t.device).view_as(t).cos()
                     for t in (mu, mu_sib)]
        vjp = torch.autograd.grad((mu, mu_sib), (x, y), direction)
        return [log_z, mu.detach(), mu_sib.detach(), *vjp, *([crf.argmax, crf.max] if best else [])], crf


@pytest.mark.parametrize("multiroot", [True, False])
def test_float64_matches_torch_numba_and_reference(multiroot):
    """Ragged lengths with a length-1 and a length-2 sentence, to 1e-9; the best tree's score is
    ``max`` and equals every other backend's."""
    scores, siblings, lengths = batch(0, [4, 1, 2])
    got, crf = results(scores, siblings, lengths, multiroot, "triton")
    others = ["torch", "reference"] + (["numba"] if DEVICE == "cpu" else [])
    for other in others:
        want, _ = results(scores, siblings, lengths, multiroot, other)
        for what, a, b in zip(NAMES, got, want):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"{what} vs {other}")
    torch.testing.assert_close(crf.score(got[-2]), got[-1], rtol=1e-12, atol=1e-12)
    assert (got[-2][1, 1:] == -1).all() and (got[-2][2, 2:] == -1).all()


def test_float32_with_masks_matches_torch():
    """float32 to 1e-4 with masked arcs and sibling pairs (``-inf``, as users give them)."""
    scores, siblings, lengths = batch(1, [4, 3, 1], torch.float32)
    scores[0, 2, 3] = scores[0, 0, 4] = float("-inf")
    siblings[0, 1, 2, 3] = siblings[0, 4, 3, 1] = float("-inf")
    scores[1, :, 2] = float("-inf")
    scores[1, 3, 2] = 0.5  # word 2's only head is word 3
    got, _ = results(scores, siblings, lengths, True, "triton", best=False)
    want, _ = results(scores, siblings, lengths, True, "torch", best=False)
    for what, a, b in zip(NAMES, got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=what)
    mu, mu_sib = got[1], got[2]
    assert mu[0, 2, 3] == 0 and mu[0, 0, 4] == 0 and mu_sib[0, 1, 2, 3] == 0 and mu_sib[0, 4, 3, 1] == 0
    assert mu[1, 3, 2] == pytest.approx(1.0)


def test_brute_force_and_no_tree_left():
    """One root: brute force on one sentence; a sentence whose masks leave no tree gives -inf,
    zero marginals, -1 heads and zero (not NaN) gradients; the gradients of log Z and of the
    marginals equal the PyTorch path's."""
    scores, siblings, lengths = batch(2, [4, 3])
    scores[1, :, 2] = float("-inf")  # word 2 has no head
    grads = []
    for name in ("torch", "triton"):
        x, y = scores.clone().requires_grad_(), siblings.clone().requires_grad_()
        with use_backend(name):
            crf = Dependency2oCRF(x, y, lengths, multiroot=False)
            log_z, mu, mu_sib = crf.log_partition, crf.marginals, crf.sibling_marginals
            loss = (log_z[0] + (mu * scores.cos().nan_to_num()).sum() + (mu_sib * siblings.sin()).sum())
            grads.append(torch.autograd.grad(loss, (x, y)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    gx, gy = grads[1]
    with use_backend("triton"):
        heads, best = crf.argmax, crf.max
    z, m, ms, tree_scores, _ = brute_force(crf.scores[0].detach().cpu(), crf.siblings[0].detach().cpu(), 4, False)
    torch.testing.assert_close(log_z[0].detach().cpu(), z)
    torch.testing.assert_close(mu[0].detach().cpu(), m)
    torch.testing.assert_close(mu_sib[0].detach().cpu(), ms)
    torch.testing.assert_close(best[0].cpu(), tree_scores.max())
    assert log_z[1] == -float("inf") and best[1] == -float("inf") and heads[1].tolist() == [-1] * 4
    assert mu[1].abs().sum() == 0 and mu_sib[1].abs().sum() == 0
    assert gx.isfinite().all() and gy.isfinite().all() and gx[1].abs().sum() == 0


def test_ties_pick_the_same_tree_as_numba_and_torch():
    """Integer scores (exact ties everywhere): every backend routes each item to its first best
    term, the nearest dependent before the inner siblings."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 2, (3, 6, 6), generator=gen).double().to(DEVICE)
    siblings = torch.randint(0, 2, (3, 6, 6, 6), generator=gen).double().to(DEVICE)
    lengths = torch.tensor([5, 5, 4], device=DEVICE)
    with use_backend("triton"):
        crf = Dependency2oCRF(scores, siblings, lengths)
        heads = crf.argmax
    for other in ["torch"] + (["numba"] if DEVICE == "cpu" else []):
        with use_backend(other):
            assert heads.tolist() == Dependency2oCRF(scores, siblings, lengths).argmax.tolist(), other
    torch.testing.assert_close(crf.score(heads), crf.max)


def test_third_derivative_falls_back_to_torch():
    """create_graph through the marginals' backward (autograd of the PyTorch path) matches it."""
    scores, siblings, lengths = batch(4, [3, 2])
    outs = []
    for name in ("torch", "triton"):
        x, y = scores.clone().requires_grad_(), siblings.clone().requires_grad_()
        with use_backend(name):
            crf = Dependency2oCRF(x, y, lengths)
            loss = (crf.marginals ** 2).sum() + (crf.sibling_marginals ** 2).sum()
            gx, gy = torch.autograd.grad(loss, (x, y), create_graph=True)
            outs.append(torch.autograd.grad(gx.sum() + gy.sum(), (x, y)))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b)


def test_second_order_attention_trains_through_the_kernels():
    """The ``projective2o`` syntactic attention: the same output and parameter gradients (arc and
    sibling scorers) as on the PyTorch path."""
    from synattn.attention.core import MultiheadAttention
    from synattn.methods.syntactic import SyntacticAttention

    torch.manual_seed(5)
    feature = SyntacticAttention(8, head=1, tree="projective2o", arc_dim=4)
    attn = MultiheadAttention(8, 2, features=[feature]).double().to(DEVICE)
    with torch.no_grad():
        feature.scorer.bilinear.normal_()
        feature.siblings.weight.normal_()
    x = torch.randn(2, 4, 8, dtype=torch.float64, device=DEVICE)
    pad = torch.tensor([[False] * 4, [False, False, False, True]], device=DEVICE)
    grads = []
    for name in ("torch", "triton"):
        attn.zero_grad()
        with use_backend(name):
            out, _ = attn(x, key_padding_mask=pad)
            (out * torch.linspace(-1, 1, out.numel(), device=DEVICE).view_as(out)).sum().backward()
        grads.append([p.grad.clone() for p in (feature.scorer.bilinear, feature.siblings.weight)])
    assert grads[1][1].abs().sum() > 0  # the sibling scorer learns
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_routing():
    """``auto`` keeps CPU tensors off Triton; ``triton`` without the interpreter refuses them."""
    scores, siblings, lengths = batch(6, [2])
    with use_backend("auto"):
        assert Dependency2oCRF(scores.cpu(), siblings.cpu(), lengths.cpu())._triton is None
    with use_backend("triton"):
        assert Dependency2oCRF(scores, siblings, lengths)._triton is not None
    with pytest.MonkeyPatch.context() as patch, use_backend("triton"):
        patch.setattr(backend, "triton_interpreted", lambda: False)
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            Dependency2oCRF(scores.cpu(), siblings.cpu(), lengths.cpu()).log_partition


@pytest.mark.parametrize("n", [2, 5])
def test_a_fixed_number_of_launches(n):
    """Both marginals in 2 kernel launches and the best tree in 2, whatever N (the PyTorch path
    takes several launches per span width)."""
    from synattn.structs.triton_kernels import eisner2o

    scores, siblings, lengths = batch(7, [n, 1], torch.float32)
    with launches_and_ops() as counts:
        eisner2o.marginals(scores, siblings, lengths, False)
    assert counts["triton"] == 2 and counts["torch"] <= 4, counts
    if n > 2:
        with launches_and_ops() as counts:
            eisner2o.best(scores, siblings, lengths, True)
        assert counts["triton"] == 2 and counts["torch"] <= 4, counts
