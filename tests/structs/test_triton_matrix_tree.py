"""The Matrix-Tree robust kernel (synattn.structs.triton_kernels.matrix_tree) under Triton's
interpreter: ``log Z``, marginals and their backward against autograd through the log-space
elimination of the CPU paths, at every scale, with masks, ragged lengths and length-1
sentences, and only in the programs whose flag is set."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from synattn.structs import backend  # noqa: E402
from synattn.structs.dependency.arc_scores import check_arc_scores  # noqa: E402
from synattn.structs.dependency.matrix_tree_device import robust_marginals, robust_tangent  # noqa: E402
from synattn.structs.dependency.matrix_tree_log import (  # noqa: E402
    _has_tree,
    _log_space_marginals,
    _log_space_marginals_tangent,
)
from synattn.structs.triton_kernels import matrix_tree as kernel  # noqa: E402

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or backend.triton_interpreted()),
                                reason="no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
ON = "cuda" if torch.cuda.is_available() else "cpu"
"""Where the kernel runs (the expected values are computed on the CPU)."""


def batch(seed: int, scale: float):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 1, 4, 2, 6])
    scores = torch.randn(5, 8, 8, generator=gen, dtype=torch.float64) * scale
    scores[0, 2, 1] = scores[0, 0, 5] = float("-inf")  # masked arcs
    scores[2, :, 3] = float("-inf")
    scores[2, 1, 3] = 0.0  # word 3 must hang from word 1
    scores[4, :, 1:3] = float("-inf")
    scores[4, 1, 2] = scores[4, 2, 1] = 1.0  # words 1, 2 only head each other: no tree
    return check_arc_scores(scores, lengths)[:2]


@pytest.mark.parametrize("multiroot", [True, False])
@pytest.mark.parametrize("scale", [1.0, 30.0, 1000.0])
def test_equals_autograd_through_the_log_space_elimination(scale, multiroot):
    scores, lengths = batch(int(scale), scale)
    todo = torch.tensor([True, True, True, False, True])
    log_z, mu = (x.cpu() for x in robust_marginals(scores.to(ON), lengths.to(ON), multiroot, ~todo.to(ON), True))
    want_z, want_mu = _log_space_marginals(scores, lengths, multiroot, True)
    none = ~_has_tree(scores, lengths, multiroot)
    assert none.tolist() == [False, False, False, False, True]
    want_z, want_mu = want_z.masked_fill(none, -2e9), want_mu.masked_fill(none[:, None, None], 0.0)
    torch.testing.assert_close(log_z[todo], want_z[todo], rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(mu[todo], want_mu[todo], rtol=0, atol=1e-10)
    direction = torch.randn(scores.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    hv = robust_tangent(scores.to(ON), lengths.to(ON), multiroot, ~todo.to(ON), direction.to(ON)).cpu()
    want = _log_space_marginals_tangent(scores, lengths, multiroot, direction).masked_fill(none[:, None, None], 0.0)
    torch.testing.assert_close(hv[todo], want[todo], rtol=0, atol=1e-9 * max(1.0, float(want.abs().max())))
    assert float(hv[todo].abs().max()) > 1e-3 or scale > 100  # (not all zero)


@pytest.mark.parametrize("multiroot", [True, False])
def test_programs_of_certified_sentences_write_nothing(multiroot):
    """The kernel launched by hand on outputs filled with 7: only sentence 1's change."""
    scores, lengths = batch(2, 1.0)
    B, L, _ = scores.shape
    ok = torch.tensor([True, False, True, True, True])
    f64 = {"dtype": torch.float64, "device": ON}
    scratch = [torch.full((B, L, L - 1), 7.0, **f64) for _ in range(4)]
    piv, log_z = torch.full((B, L - 1), 7.0, **f64), torch.full((B,), 7.0, **f64)
    out = torch.full((B, L, L), 7.0, **f64)
    w, m, g, mu = scratch
    x, n = scores.to(ON), lengths.to(ON)
    kernel._robust[(B,)](x, x, ok.to(ON), n, w, w, m, m, g, g, piv, piv, mu, mu, out, out, log_z,
                         L, L - 1, L, NEG=-1e9, SINGLE=int(not multiroot), MARGINALS=True, DUAL=False,
                         BR=16, BC=16)
    scratch, piv, log_z, out = [t.cpu() for t in scratch], piv.cpu(), log_z.cpu(), out.cpu()
    for x in (*scratch, piv, log_z, out):
        assert bool((x[ok] == 7.0).all()) and not bool((x[1] == 7.0).all())
    want_z, want_mu = _log_space_marginals(scores, lengths, multiroot, True)
    torch.testing.assert_close(log_z[1], want_z[1])
    torch.testing.assert_close(out[1], want_mu[1], rtol=0, atol=1e-12)


def test_sentences_wider_than_a_tile():
    """34 words, single root: rows and columns in two tiles of 32 (the loops over tiles, masked
    tails)."""
    gen = torch.Generator().manual_seed(40)
    multiroot = False
    scores = torch.randn(2, 35, 35, generator=gen, dtype=torch.float64) * 50
    scores, lengths = check_arc_scores(scores, torch.tensor([34, 31]))[:2]
    ok = torch.tensor([False, False])
    log_z, mu = (x.cpu() for x in robust_marginals(scores.to(ON), lengths.to(ON), multiroot, ok.to(ON), True))
    want_z, want_mu = _log_space_marginals(scores, lengths, multiroot, True)
    torch.testing.assert_close(log_z, want_z, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(mu, want_mu, rtol=0, atol=1e-10)
    direction = torch.randn(scores.shape, generator=gen, dtype=torch.float64)
    hv = robust_tangent(scores.to(ON), lengths.to(ON), multiroot, ok.to(ON), direction.to(ON)).cpu()
    want = _log_space_marginals_tangent(scores, lengths, multiroot, direction)
    torch.testing.assert_close(hv, want, rtol=0, atol=1e-9 * max(1.0, float(want.abs().max())))
