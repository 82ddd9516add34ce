"""Long chains in float32: the PyTorch path's numbers equal the compiled kernels' (numba).

A float32 forward vector of a chain of ``n`` positions reaches ``n × |score|``; summed without
rescaling, every step rounds at ``ulp(n × |score|)`` and ``log Z`` drifts (at 50,000 positions and
8 labels the sequential recursion was off by 1e-5 of ``log Z``, at 200,000 by 7e-5). The
recursions shift their vectors back to 0 and sum the shifts in float64. The sizes here take a few
seconds; ``SYNATTN_LONG_TESTS=1`` also runs the full sizes (200,000 positions for the chain and the
HMM, 20,000 for the semi-Markov CRF: minutes on the PyTorch path).
"""

from __future__ import annotations

import os

import pytest
import torch

from synattn.structs import LinearChainCRF, SemiMarkovCRF
from synattn.structs.backend import use_backend

pytest.importorskip("numba")

LONG = pytest.mark.skipif(not os.environ.get("SYNATTN_LONG_TESTS"),
                          reason="minutes on the PyTorch path; set SYNATTN_LONG_TESTS=1")


def _both(make):
    """``log Z`` and marginals by the numba kernels and by the PyTorch path."""
    out = {}
    for backend in ("numba", "torch"):
        with use_backend(backend):
            crf = make()
            out[backend] = (crf.log_partition, crf.marginals)
    return out["numba"], out["torch"]


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs() / b.double().abs()).max().item()


def _chain_case(n: int, C: int):
    gen = torch.Generator().manual_seed(n + C)
    unary = 3 * torch.randn(2, n, C, generator=gen)
    transition = torch.randn(C, C, generator=gen)
    lengths = torch.tensor([n, n // 2 + 1])
    return lambda: LinearChainCRF(unary=unary, transition=transition, lengths=lengths)


@pytest.mark.parametrize("n, C", [
    (50_000, 2),  # the scan schedule (C <= 4)
    (20_000, 8),  # the sequential one
    pytest.param(200_000, 2, marks=LONG), pytest.param(200_000, 8, marks=LONG),
    pytest.param(200_000, 16, marks=LONG)])
def test_long_chain_equals_numba(n, C):
    (z_numba, mu_numba), (z_torch, mu_torch) = _both(_chain_case(n, C))
    assert _relative(z_torch, z_numba) < 2e-7  # float32 rounding of log Z itself (~6e-8)
    assert (mu_torch - mu_numba).abs().max().item() < 1e-5


def test_long_chain_log_partition_is_float64_accurate():
    """Against the float64 answer: the float32 sum is exact to its own rounding (the drift of the
    unshifted recursion at these sizes, 1e-6 to 1e-5, fails this)."""
    make = _chain_case(20_000, 8)
    crf = make()
    with use_backend("numba"):
        exact = LinearChainCRF(unary=crf.unary.double(), transition=crf.edge[0, 0].double(),
                               lengths=crf.lengths).log_partition
    with use_backend("torch"):
        assert _relative(make().log_partition, exact) < 2e-7


@pytest.mark.parametrize("n", [50_000, pytest.param(200_000, marks=LONG)])
def test_long_hmm_equals_numba(n):
    gen = torch.Generator().manual_seed(n)
    C, V = 2, 50
    transition = torch.randn(C, C, generator=gen).log_softmax(-1)
    emission = torch.randn(V, C, generator=gen).log_softmax(0)
    init = torch.randn(C, generator=gen).log_softmax(0)
    observations = torch.randint(0, V, (2, n), generator=gen)
    lengths = torch.tensor([n, n // 3])
    (z_numba, mu_numba), (z_torch, mu_torch) = _both(
        lambda: LinearChainCRF.hmm(transition, emission, init, observations, lengths))
    assert _relative(z_torch, z_numba) < 2e-7
    assert (mu_torch - mu_numba).abs().max().item() < 1e-5


@pytest.mark.parametrize("n, K, C", [(2_000, 4, 2), pytest.param(20_000, 4, 2, marks=LONG)])
def test_long_semimarkov_equals_numba(n, K, C):
    gen = torch.Generator().manual_seed(n + K)
    scores = torch.randn(2, n, K, C, C, generator=gen)
    lengths = torch.tensor([n + 1, n // 2])
    (z_numba, mu_numba), (z_torch, mu_torch) = _both(lambda: SemiMarkovCRF(scores, lengths))
    assert _relative(z_torch, z_numba) < 2e-7
    assert (mu_torch - mu_numba).abs().max().item() < 1e-5
