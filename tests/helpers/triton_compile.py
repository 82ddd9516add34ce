"""Compile every Triton kernel of synattn.structs for a GPU, without one: ``python -m
tests.helpers.triton_compile [module ...]`` prints one line per kernel variant and exits 1 if any
fails. Run without ``TRITON_INTERPRET`` (the interpreter replaces the kernels by Python functions)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

ARCHS = tuple(int(a) for a in os.environ.get("SYNATTN_TRITON_ARCHS", "90").split(","))
"""Compute capabilities compiled for (``SYNATTN_TRITON_ARCHS=90,80``: H100/H200 and A100)."""


def main(names: list[str]) -> int:
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import synattn.structs.triton_kernels as package

    names = names or [m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "common"]
    failed = 0
    for name in names:
        module = importlib.import_module(f"{package.__name__}.{name}")
        for kernel, signature, constexprs in getattr(module, "COMPILE_CHECKS", []):
            for arch in ARCHS:
                start = time.perf_counter()
                try:
                    compiled = triton.compile(ASTSource(kernel, signature, constexprs),
                                              target=GPUTarget("cuda", arch, 32))
                    note = f"ok, {len(compiled.asm['cubin'])} bytes of cubin"
                except Exception as error:  # noqa: BLE001 (reported, then the exit status says it)
                    failed += 1
                    note = "FAILED: " + " ".join(str(error).split())[:2000]
                print(f"{name}.{kernel.__name__} sm_{arch} {constexprs}: {note} "
                      f"({time.perf_counter() - start:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
