"""Float32 precision of the linear chain's PyTorch path with large scores.

The forward and backward log-vectors of a long chain reach ``n × |score|``; marginals computed by
subtracting such values from one another (``alpha + beta - log Z``) keep only the bits of
``ulp(|log Z|)`` (``6e-5`` at 1000). The PyTorch path shifts every vector to a maximum of 0 and
normalises each position locally, so its float32 marginals stay within a few ``1e-7`` of the
float64 ones; torch-struct 0.5 (the gradient of its log-space scan) was at ``1e-5``–``1e-4`` on
these inputs, the code before the shifts at ``4e-5``–``5e-4``.
"""

from __future__ import annotations

import pytest
import torch

from synattn.structs import LinearChainCRF
from synattn.structs.backend import use_backend

SIZES = [(4, 20, 4), (4, 50, 2), (8, 50, 8), (4, 100, 16)]
"""``(B, n, C)``: the scan schedule (``C <= 4``) and the sequential one."""


def _chain(B: int, n: int, C: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n * 100 + C)
    edge = scale * torch.randn(B, n - 1, C, C, generator=gen)
    lengths = torch.randint(n // 2, n + 1, (B,), generator=gen)
    lengths[0] = n
    return edge, lengths


@pytest.mark.parametrize("scan", [None, True, False])
@pytest.mark.parametrize("size", SIZES)
def test_float32_marginals_at_scale_10(size, scan):
    edge, lengths = _chain(*size, scale=10.0)
    exact = LinearChainCRF(edge.double(), lengths)
    with use_backend("torch"):
        crf = LinearChainCRF(edge, lengths, scan=scan)
        edge_error = (crf.edge_marginals.double() - exact.edge_marginals).abs().max().item()
        node_error = (crf.marginals.double() - exact.marginals).abs().max().item()
    assert edge_error < 4e-6, edge_error
    assert node_error < 4e-6, node_error


@pytest.mark.parametrize("size", SIZES[:2])
def test_float32_marginals_gradient_at_scale_10(size):
    # the edge marginals under autograd (their backward: second derivatives of log Z) still agree
    edge, lengths = _chain(*size, scale=10.0)
    direction = torch.randn(edge.shape, generator=torch.Generator().manual_seed(3))
    grads = []
    for dtype in (torch.float64, torch.float32):
        x = edge.to(dtype).requires_grad_()
        with use_backend("torch"):
            (LinearChainCRF(x, lengths).edge_marginals * direction.to(dtype)).sum().backward()
        grads.append(x.grad.double())
    assert (grads[0] - grads[1]).abs().max().item() < 1e-3 * grads[0].abs().max().item()


def test_log_partition_unchanged_by_the_shifts():
    # the shifts are added back: log Z of the marginals' forward pass is the true one
    edge, lengths = _chain(4, 50, 8, scale=10.0)
    with use_backend("torch"):
        ours = LinearChainCRF(edge.double(), lengths).log_partition
    reference = LinearChainCRF(edge.double(), lengths)
    with use_backend("reference"):
        torch.testing.assert_close(ours, reference.log_partition, rtol=1e-12, atol=1e-9)
