"""Derivatives of every order against finite differences."""

from __future__ import annotations

import pytest
import torch


def third_derivative_check(make, shape, seed=0):
    """d/dx of <w, H(x) v> (the gradient of a Hessian-vector product of the marginals) in a
    random direction, against central finite differences."""
    gen = torch.Generator().manual_seed(seed)
    x0, v, w, d = (torch.randn(*shape, generator=gen, dtype=torch.float64) for _ in range(4))

    def f(x):
        (hv,) = torch.autograd.grad((make(x) * v).sum(), x, create_graph=True)
        return (hv * w).sum()

    x = x0.clone().requires_grad_()
    (grad,) = torch.autograd.grad(f(x), x)
    eps = 1e-4
    fd = (f((x0 + eps * d).requires_grad_()) - f((x0 - eps * d).requires_grad_())) / (2 * eps)
    assert abs(fd.item()) > 1e-4  # a zero would hide a disconnected graph
    assert (grad * d).sum().item() == pytest.approx(fd.item(), rel=1e-5, abs=1e-8)
