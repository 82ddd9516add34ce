"""Every class of synattn.structs refuses fractional lengths by name (a ValueError; they were
truncated silently), takes whole-number floats, and refuses booleans (a TypeError), on each backend."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import (
    AlignmentCRF,
    Dependency2oCRF,
    DependencyCRF,
    DependencyLBP,
    DependencyMFVI,
    LinearChainCRF,
    NonProjectiveDependencyCRF,
    SemiMarkovCRF,
    SentCFG,
    TreeCRF,
)
from synattn.structs.arguments import length_tensor
from tests.helpers.backends import BACKENDS, on

B, N = 2, 4
MAKERS = {
    "DependencyCRF": lambda n: DependencyCRF(torch.randn(B, N + 1, N + 1), n).log_partition,
    "NonProjectiveDependencyCRF": lambda n: NonProjectiveDependencyCRF(torch.randn(B, N + 1, N + 1), n).log_partition,
    "Dependency2oCRF": lambda n: Dependency2oCRF(torch.randn(B, N + 1, N + 1), torch.randn(B, N + 1, N + 1, N + 1),
                                                 n).log_partition,
    "DependencyMFVI": lambda n: DependencyMFVI()((torch.randn(B, N + 1, N + 1), torch.randn(B, N + 1, N + 1, N + 1)),
                                                 n),
    "DependencyLBP": lambda n: DependencyLBP()((torch.randn(B, N + 1, N + 1), torch.randn(B, N + 1, N + 1, N + 1)), n),
    "TreeCRF": lambda n: TreeCRF(torch.randn(B, N, N), n).log_partition,
    "LinearChainCRF": lambda n: LinearChainCRF(unary=torch.randn(B, N, 3), lengths=n).log_partition,
    "SemiMarkovCRF": lambda n: SemiMarkovCRF(torch.randn(B, N - 1, 3, 2, 2), n).log_partition,
    "AlignmentCRF": lambda n: AlignmentCRF(torch.randn(B, N, N, 3), n, n).log_partition,
    "SentCFG": lambda n: SentCFG(torch.randn(B, N, 3), torch.randn(B, 2, 5, 5), torch.randn(B, 2), n).log_partition,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MAKERS))
def test_fractional_lengths_are_refused(name, backend):
    with on(backend):
        with pytest.raises(ValueError, match="whole numbers"):
            MAKERS[name](torch.tensor([3.5, 2.0]))
        MAKERS[name](torch.tensor([3.0, 2.0]))  # whole numbers as floats are lengths


def test_length_tensor():
    assert length_tensor([3, 2], torch.device("cpu")).dtype == torch.long
    assert length_tensor(torch.tensor([3.0]), torch.device("cpu")).tolist() == [3]
    for bad in (torch.tensor([float("nan")]), torch.tensor([float("inf")]), [2.5]):
        with pytest.raises(ValueError, match="whole numbers"):
            length_tensor(bad, torch.device("cpu"))
    with pytest.raises(TypeError, match="integers"):
        length_tensor(torch.tensor([True]), torch.device("cpu"))
    with pytest.raises(TypeError, match="integers"):
        length_tensor("three", torch.device("cpu"))
