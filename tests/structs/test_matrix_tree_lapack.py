"""The compiled Matrix-Tree path from ``LAPACK_FROM`` words: LAPACK's LU, certified per sentence,
the GTH kernel for the sentences the certificate refuses, the closed-form backward by BLAS.

Checked against brute-force enumeration (short sentences padded to the LAPACK width), against
the GTH kernel and the PyTorch path at every scale, and for its certificate against the
PyTorch path's. Skipped without numba.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from synattn.structs import NonProjectiveDependencyCRF
from synattn.structs.backend import use_backend
from synattn.structs.dependency.arc_scores import check_arc_scores
from tests.helpers.trees import brute_force as tree_brute_force, dirty_scores

pytest.importorskip("numba")

from synattn.structs.dependency import matrix_tree_lapack as lapack  # noqa: E402
from synattn.structs.dependency.matrix_tree_gth import _compiled_marginals, _lapack_inverse  # noqa: E402
from synattn.structs.dependency.matrix_tree_log import _wide_columns  # noqa: E402

WIDTH = lapack.LAPACK_FROM + 1  # padded words: [B, WIDTH + 1, WIDTH + 1] takes the LAPACK path


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls of the certified LAPACK path and the sentences it hands to the GTH kernel."""
    calls = {"gth": 0, "certified": 0, "inside": 0}

    def gth(scores, lengths, *args, **kwargs):
        calls["gth"] += len(lengths) * calls["inside"]
        return _compiled_marginals(scores, lengths, *args, **kwargs)

    certified = lapack.certified_marginals

    def counted(*args, **kwargs):
        calls["certified"] += 1
        calls["inside"] = 1
        try:
            return certified(*args, **kwargs)
        finally:
            calls["inside"] = 0

    monkeypatch.setattr(lapack, "_compiled_marginals", gth)
    monkeypatch.setattr(lapack, "certified_marginals", counted)
    with use_backend("numba"):
        yield calls


def padded_batch(seed: int, lengths: list[int], scale: float, width: int = WIDTH):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(len(lengths), width + 1, width + 1, generator=gen, dtype=torch.float64) * scale
    return scores, torch.tensor(lengths)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), lengths=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       scale=st.sampled_from([0.1, 1.0, 3.0]), multiroot=st.booleans())
def test_matches_brute_force(spy, seed, lengths, scale, multiroot):
    """log Z, marginals and the marginals' backward (the Hessian of the brute-force log Z) of
    short sentences padded past ``LAPACK_FROM`` (dirty padding), all certified."""
    scores, n = padded_batch(seed, lengths, scale)
    spy.update(gth=0, certified=0)
    x = dirty_scores(scores, n).requires_grad_()
    crf = NonProjectiveDependencyCRF(x, n, multiroot)
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed % 1000))
    (hessian,) = torch.autograd.grad(crf.marginals, x, g)
    assert spy["certified"] >= 1 and spy["gth"] == 0
    for b, length in enumerate(lengths):
        y = scores[b].clone().requires_grad_()
        log_z, marginals, _ = tree_brute_force(y, length, False, multiroot)
        (mu,) = torch.autograd.grad(log_z, y, create_graph=True)
        (expected,) = torch.autograd.grad(mu, y, g[b])
        torch.testing.assert_close(crf.log_partition[b], log_z.detach(), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(crf.marginals[b, :length + 1, :length + 1],
                                   marginals[:length + 1, :length + 1].detach(), rtol=1e-8, atol=1e-9)
        assert crf.marginals[b, length + 1:].abs().sum() == 0 and crf.marginals[b, :, length + 1:].abs().sum() == 0
        torch.testing.assert_close(hessian[b], expected, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("scale", [1.0, 20.0, 60.0, 300.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_certificate_and_fallback(spy, multiroot, scale, dtype):
    """The certificate refuses exactly the sentences the PyTorch path's refuses (besides the wide
    columns that go to log space), and every result equals the GTH kernel's: within rounding
    where LAPACK was kept, exactly where the GTH kernel recomputed."""
    scores, n = padded_batch(int(scale) + multiroot, [33, 1, 2, 17, 33, 30, 9, 33] * 3, scale, 33)
    scores, n = check_arc_scores(scores.to(dtype), n)
    redone_in_all = 0
    for need in (False, True):
        spy.update(gth=0)
        ours = lapack.certified_marginals(scores, n, multiroot, need, inverse=True)
        refused = ~(_lapack_inverse(scores, n, multiroot, need)[2] | _wide_columns(scores, n))
        assert spy["gth"] == int(refused.sum())
        gth = _compiled_marginals(scores, n, multiroot, need, inverse=True)
        assert torch.equal(ours[0].isnan(), gth[0].isnan())
        kept = ~ours[0].isnan()
        torch.testing.assert_close(ours[0][kept], gth[0][kept], rtol=1e-10, atol=1e-9)
        if need:
            torch.testing.assert_close(ours[1][kept], gth[1][kept], rtol=0, atol=1e-8)
        redone = (refused & kept).nonzero().squeeze(1)
        assert torch.equal(ours[0][redone], gth[0][redone])
        redone_in_all += spy["gth"]
    if scale == 60.0:
        assert redone_in_all > 0  # (the fallback is exercised; at 300 the columns are wide)


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("scale", [0.5, 10.0, 100.0])
def test_equals_the_torch_path(multiroot, scale):
    """Ragged sentences up to ``WIDTH`` words, backward included (batched BLAS), against the
    PyTorch path."""
    scores, n = padded_batch(3, [WIDTH, 1, 23, WIDTH, 35, 8], scale)
    g = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    out = []
    for name in ("torch", "numba"):
        with use_backend(name):
            x = scores.clone().requires_grad_()
            crf = NonProjectiveDependencyCRF(x, n, multiroot)
            (grad,) = torch.autograd.grad(crf.marginals, x, g)
            out.append((crf.log_partition.detach(), crf.marginals.detach(), grad))
    (z0, m0, g0), (z1, m1, g1) = out
    torch.testing.assert_close(z1, z0, rtol=1e-9, atol=1e-8)
    torch.testing.assert_close(m1, m0, rtol=0, atol=1e-8)
    torch.testing.assert_close(g1, g0, rtol=1e-6, atol=1e-7 * max(1.0, scale))
    assert torch.isfinite(g1).all()


def test_long_lapack_calls_run_on_one_thread(monkeypatch):
    """From ``LAPACK_MAX_N`` words the LU and the solve run with one thread (batched LU with two
    threads fails in oneMKL on some CPU builds), and the thread count comes back."""
    seen = []
    factor, solve = torch.linalg.lu_factor_ex, torch.linalg.lu_solve
    monkeypatch.setattr(torch.linalg, "lu_factor_ex",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or factor(*a, **k))
    monkeypatch.setattr(torch.linalg, "lu_solve",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or solve(*a, **k))
    torch.set_num_threads(2)  # (the suite's fixture restores the thread count)
    for width, expected in ((lapack.LAPACK_MAX_N, 1), (lapack.LAPACK_FROM, 2)):
        seen.clear()
        scores, n = padded_batch(5, [width, width // 2], 1.0, width)
        lapack.certified_marginals(scores, n, True, True)
        assert seen == [expected, expected]
        assert torch.get_num_threads() == 2


@pytest.mark.parametrize("multiroot", [True, False])
def test_masked_arcs_and_the_clamp(spy, multiroot):
    """Masked arcs (``-inf``) weigh 0 on the LAPACK path (their exponents are clamped before
    ``exp``), and an arc ``699.5`` below its column's largest still counts (above the clamp)."""
    scores, n = padded_batch(11, [5, 4, 3], 1.0)
    gen = torch.Generator().manual_seed(12)
    masked = (torch.rand(scores.shape, generator=gen) < 0.25) & (torch.arange(WIDTH + 1) > 0)[:, None]
    scores = scores.masked_fill(masked, -float("inf"))
    scores[2, 0, 1], scores[2, 2, 1], scores[2, 3, 1] = 700.0, 0.5, -float("inf")  # spread 699.5
    crf = NonProjectiveDependencyCRF(scores, n, multiroot)
    crf.marginals
    assert spy["certified"] >= 1 and spy["gth"] == 0
    for b, length in enumerate(n.tolist()):
        log_z, marginals, _ = tree_brute_force(scores[b], length, False, multiroot)
        torch.testing.assert_close(crf.log_partition[b], log_z, rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(crf.marginals[b, :length + 1, :length + 1],
                                   marginals[:length + 1, :length + 1], rtol=1e-8, atol=1e-12)
    assert crf.marginals[2, 2, 1] > 0  # (e^-699.5 relative to the root arc, but needed by some trees)


def test_the_path_follows_the_work(spy):
    """LAPACK from ``LAPACK_FROM`` words; ``log Z`` alone only when the sentences fill the padded
    batch (else the GTH kernel, at each sentence's own length); the marginals at any fill."""
    full, n_full = padded_batch(1, [WIDTH] * 3, 1.0)
    ragged, n_ragged = padded_batch(2, [WIDTH, 5, 9], 1.0)
    short, n_short = padded_batch(3, [lapack.LAPACK_FROM - 1] * 3, 1.0, lapack.LAPACK_FROM - 1)
    for scores, n, what, expected in ((full, n_full, "log_partition", 1), (ragged, n_ragged, "log_partition", 0),
                                      (ragged, n_ragged, "marginals", 1), (short, n_short, "marginals", 0)):
        spy.update(certified=0)
        getattr(NonProjectiveDependencyCRF(scores, n), what)
        assert spy["certified"] == expected, (what, n.tolist())
