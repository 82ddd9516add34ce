"""Count Triton kernel launches (compiled or interpreted) in a block: ``with launches() as n: ...``
then ``n[0]`` is the number of launches; :func:`launches_and_ops` also counts the PyTorch operators
around them that would launch a device kernel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def launches() -> Iterator[list[int]]:
    pytest.importorskip("triton")
    from triton.runtime import interpreter, jit

    count = [0]
    patched = [(cls, cls.run) for cls in (jit.JITFunction, interpreter.InterpretedFunction)]
    for cls, run in patched:
        def counted(self, *args, _run=run, **kwargs):
            count[0] += 1
            return _run(self, *args, **kwargs)

        cls.run = counted
    try:
        yield count
    finally:
        for cls, run in patched:
            cls.run = run


FREE = {"empty", "empty_like", "empty_strided", "view", "_unsafe_view", "as_strided", "t", "detach", "alias",
        "expand", "permute", "unsqueeze", "squeeze", "select", "slice", "transpose", "lift_fresh", "_to_copy_noop",
        "is_nonzero", "item", "_local_scalar_dense", "size", "stride"}
"""Operators that launch no device kernel (allocation, views, metadata, reads of a scalar)."""


@contextlib.contextmanager
def launches_and_ops() -> Iterator[dict[str, int]]:
    """``{"triton": kernel launches, "torch": PyTorch operators that would launch a device kernel}``
    in the block, as a GPU would run them (the interpreter's own tensor work inside a launch is the
    kernel's, not counted)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"triton": 0, "torch": 0}

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not in_kernel[0] and func.overloadpacket.__name__ not in FREE:
                counts["torch"] += 1
            return func(*args, **(kwargs or {}))

    in_kernel = [0]
    with launches() as n, _inside_kernels(in_kernel), Ops():
        yield counts
        counts["triton"] = n[0]
    counts["triton"] = n[0]


@contextlib.contextmanager
def _inside_kernels(flag: list[int]) -> Iterator[None]:
    """Raise ``flag[0]`` while a Triton kernel runs."""
    from triton.runtime import interpreter, jit

    patched = [(cls, cls.run) for cls in (jit.JITFunction, interpreter.InterpretedFunction)]
    for cls, run in patched:
        def flagged(self, *args, _run=run, **kwargs):
            flag[0] += 1
            try:
                return _run(self, *args, **kwargs)
            finally:
                flag[0] -= 1

        cls.run = flagged
    try:
        yield
    finally:
        for cls, run in patched:
            cls.run = run

