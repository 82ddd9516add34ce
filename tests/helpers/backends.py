"""The two backends of the dynamic programs (pure PyTorch, compiled numba) and a block run on one."""

from __future__ import annotations

import contextlib

import pytest

from synattn.structs.backend import use_backend

BACKENDS = ["torch", "numba"]


@contextlib.contextmanager
def on(backend: str):
    """Run the block on ``backend``; the compiled one is skipped where numba is not installed."""
    if backend == "numba":
        pytest.importorskip("numba")
    with use_backend(backend):
        yield
