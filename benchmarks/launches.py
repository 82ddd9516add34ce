"""``bench_structs.py --launches``: device operations per call, a cost that does not depend on
the machine's speed or load.

For each structure and operation at growing lengths ``N``: what :func:`device.device_ops` counts
for one call of synattn on each of its backends (``torch``: the PyTorch path; ``numba``: the
compiled CPU kernels; ``triton`` where ``synattn.structs.backend`` offers it) and of each peer.
On CUDA these are the kernels, copies and memsets the profiler records on the device; on the CPU
the aten operators that would be launches on CUDA (views, reshapes and allocations not counted;
see :func:`device.device_ops`), one per numba call and one per Triton launch (the kernels run under
Triton's interpreter on the CPU: ``TRITON_INTERPRET=1`` is set for this table). A ``*`` marks a
backend none of whose own kernels ran for that call (the count is that of the code it fell back
to); ``n/a`` a backend that cannot run here (e.g. numba on CUDA); ``fail`` a call that raised.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import torch

from device import device_info, device_ops
from structs_cases import chain_fns, semi_markov_fns, span_fns, tree_fns

BACKENDS = ("torch", "numba", "triton")
PEERS = ("torch-struct", "supar")
LAUNCH_SIZES = {"cpu": (10, 20, 40), "cuda": (10, 20, 40, 80, 160)}
SMALL_LAUNCH_SIZES = (8, 16)
"""Lengths ``N`` of the table (batch 4) by device (on the CPU Triton's interpreter makes the
longer ones slow), and with ``--small``."""
BATCH = 4


def _cases(n: int, device: torch.device):
    """``(name, builder)`` per structure at length ``n``: ``builder(lib)`` gives its functions
    (one per operation) and the names of the operations."""
    gen = torch.Generator().manual_seed(n)
    lengths = torch.randint(max(1, n // 2), n + 1, (BATCH,), generator=gen)
    lengths[0] = n
    arcs = torch.randn(BATCH, n + 1, n + 1, generator=gen)
    spans = torch.randn(BATCH, n, n, generator=gen)
    tree_ops = ("log Z", "marginals", "marginals+backward")
    put = {name: t.to(device) for name, t in (("lengths", lengths), ("arcs", arcs), ("spans", spans))}
    cases = [(f"Eisner {op}", lambda lib, i=i: tree_fns(lib, "eisner", put["arcs"], put["lengths"])[i])
             for i, op in enumerate(tree_ops)]
    cases += [(f"Matrix-Tree {op}", lambda lib, i=i: tree_fns(lib, "matrix_tree", put["arcs"], put["lengths"])[i])
              for i, op in enumerate(tree_ops)]
    cases += [(f"CKY {op}", lambda lib, i=i: span_fns(lib, put["spans"], put["lengths"])[i])
              for i, op in enumerate(tree_ops[:2])]
    for C in (2, 16):
        unary = torch.randn(BATCH, n, C, generator=gen).to(device)
        trans = torch.randn(C, C, generator=gen).to(device)
        cases += [(f"chain C={C} {op}", lambda lib, i=i, u=unary, t=trans: chain_fns(lib, u, t, put["lengths"])[i])
                  for i, op in enumerate(tree_ops[:2])]
    edge = torch.randn(BATCH, n - 1, 4, 4, 4, generator=gen).to(device)
    full = torch.full((BATCH,), n, device=device)
    cases += [(f"semi-Markov K=4 C=4 {op}", lambda lib, i=i: semi_markov_fns(lib, edge, full)[i])
              for i, op in enumerate(tree_ops[:2])]
    return cases


def _refused(backend: str) -> str | None:
    """Why ``use_backend(backend)`` refuses the name (None when it takes it)."""
    from synattn.structs.backend import use_backend
    try:
        with use_backend(backend):
            return None
    except ValueError as error:
        return str(error)


def _cell(fn: Callable[[], object], device: torch.device, backend: str | None = None) -> str:
    """The count of one call, ``n/a`` where the backend cannot run it, ``fail`` where it raises."""
    from synattn.structs.backend import use_backend
    context = use_backend(backend) if backend else contextlib.nullcontext()
    try:
        with context:
            ops = device_ops(fn, device)
    except RuntimeError as error:
        if backend and "backend" in str(error):
            return "n/a"
        return "fail"
    except NotImplementedError:
        return "-"
    except Exception:  # noqa: BLE001  # a peer's failure is a cell of the table
        return "fail"
    own = backend in ("numba", "triton") and ops[backend] == 0
    return f"{ops['total']}{'*' if own else ''}"


def launch_table(device: torch.device, small: bool) -> None:
    """Prints the table (see the module docstring)."""
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # (read when the kernels are first imported)
    backends = []
    for backend in BACKENDS:
        why = _refused(backend)
        if why is None:
            backends.append(backend)
        else:
            print(f"# backend {backend!r} skipped: use_backend refuses it ({why})")
    peers = []
    for lib, module in (("torch-struct", "torch_struct"), ("supar", "supar.structs")):
        try:
            __import__(module)
            peers.append(lib)
        except ImportError:
            print(f"# {lib} not installed: its column is empty")
    counted = ("kernels, copies and memsets on the device" if device.type == "cuda" else
               "aten operators that would be launches on CUDA, + numba calls and Triton launches")
    print(f"# device operations per call ({counted}); device {device_info(device)}; float32, B={BATCH}, "
          "ragged lengths; * = none of the backend's own kernels ran (its fallback's count)")
    columns = [*backends, *PEERS]
    print(f"{'case':<36} | {'N':>4} | " + " | ".join(f"{c:>12}" for c in columns), flush=True)
    sizes = SMALL_LAUNCH_SIZES if small else LAUNCH_SIZES["cuda" if device.type == "cuda" else "cpu"]
    by_case: dict[str, list[tuple[int, Callable]]] = {}
    for n in sizes:
        for name, build in _cases(n, device):
            by_case.setdefault(name, []).append((n, build))
    for name, builds in by_case.items():
        for n, build in builds:
            cells = [_cell(build("synattn"), device, backend) for backend in backends]
            for lib in PEERS:
                if lib not in peers:
                    cells.append("-")
                    continue
                try:
                    fn = build(lib)
                except NotImplementedError:
                    cells.append("-")
                    continue
                cells.append(_cell(fn, device))
            print(f"{name:<36} | {n:>4} | " + " | ".join(f"{c:>12}" for c in cells), flush=True)
