"""Structured attention on the Triton backend: syntactic (projective, and non-projective on its
device path), segmentation and span-segmentation attention give the same outputs and gradients
(inputs and parameters) as on the PyTorch path. Without a GPU the kernels run in Triton's
interpreter on CPU tensors (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import backend
from synattn.structs.backend import use_backend
from tests.helpers.structured import SRC_PAD, D, second_order_layer, seg_layer, span_layer, syn_layer
from tests.helpers.triton_launches import launches

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or backend.triton_interpreted()),
                                reason="no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

LAYERS = {
    "syntactic-projective": lambda: syn_layer("projective", False, children_head=0)[0],
    "syntactic-projective-multiroot": lambda: syn_layer("projective", True)[0],
    "segmentation": lambda: seg_layer()[0],
    "span-segmentation": lambda: span_layer(2)[0],
    "second-order": lambda: second_order_layer(False)[0],
}


def run(attn, name: str):
    """Output, attention probabilities and gradients of the input and every parameter."""
    torch.manual_seed(1)
    x = torch.randn(3, 4, D, dtype=torch.float64, device=DEVICE, requires_grad=True)
    with use_backend(name):
        out, extras = attn(x, key_padding_mask=SRC_PAD.to(DEVICE), need_weights=True)
        params = [p for p in attn.parameters() if p.requires_grad]
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.shape[-1], device=DEVICE)).sum(), [x, *params])
    return [out.detach(), extras.probs.detach(), *grads]


@pytest.mark.parametrize("kind", list(LAYERS))
def test_triton_equals_the_pytorch_path(kind):
    attn = LAYERS[kind]().to(DEVICE)
    with launches() as count:
        on_triton = run(attn, "triton")
    assert count[0] >= 2, "the layer did not run Triton kernels"
    for a, b in zip(on_triton, run(attn, "torch")):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
