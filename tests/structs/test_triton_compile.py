"""Every Triton kernel of synattn.structs compiles for a GPU (sm_90: H100/H200), on any machine:
Triton's compiler runs without a device down to the cubin, and catches what its interpreter (which
runs the kernels in the other tests) lets through — e.g. a Python global read inside a kernel."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
import synattn.structs.triton_kernels as package  # noqa: E402

MODULES = [m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "common"]


@pytest.mark.parametrize("module", MODULES)
def test_kernels_compile_for_a_gpu(module):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # (the default; set to keep Triton quiet)
    done = subprocess.run([sys.executable, "-m", "tests.helpers.triton_compile", module], env=env,
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok,") >= 1, done.stdout
