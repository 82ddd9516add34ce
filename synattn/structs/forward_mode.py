"""The one forward-mode helper: the derivative of a function along a direction by dual numbers,
which for the marginals is a Hessian-vector product of ``log Z``."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as fwAD


def forward_derivative(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                       direction: torch.Tensor) -> torch.Tensor:
    """The derivative of ``fn`` at ``x`` in ``direction`` by forward-mode AD (dual numbers): for
    ``fn`` = the marginals (the gradient of ``log Z``) it is the Hessian of ``log Z`` times
    ``direction``, which by the Hessian's symmetry is also the marginals' vector-Jacobian
    product, the backward that Eisner, Matrix-Tree and CKY use on the PyTorch path."""
    with fwAD.dual_level(), warnings.catch_warnings():
        # (torch's first use of forward AD loads decompositions through torch.jit.script)
        warnings.simplefilter("ignore", DeprecationWarning)
        out = fn(fwAD.make_dual(x, direction.to(x.dtype)))
        tangent = fwAD.unpack_dual(out).tangent
        # (no tangent: ``fn`` does not depend on ``x`` here, e.g. one-word CKY marginals)
        return torch.zeros_like(out) if tangent is None else tangent
