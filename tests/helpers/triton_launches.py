"""Count Triton kernel launches (compiled or interpreted) in a block: ``with launches() as n: ...``
then ``n[0]`` is the number of launches."""

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
