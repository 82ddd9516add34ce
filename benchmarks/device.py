"""The device a benchmark runs on, and wall-clock timing that waits for it (imported by the
scripts of this folder).

CUDA runs asynchronously: ``time.perf_counter()`` around a call measures the launches, not the
work. :func:`seconds` synchronises the device before starting the clock and again before
stopping it, so every timing covers the work queued by the call; on the CPU it is a plain
``perf_counter`` difference.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

import torch


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device cpu|cuda`` (default cpu)."""
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the timed work runs (cuda: timings synchronise the device)")


def check_device(parser: argparse.ArgumentParser, device: str) -> torch.device:
    """``device`` as a ``torch.device``; a parser error (exit status 2) when CUDA is asked for
    and torch sees no GPU."""
    if device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda: torch {torch.__version__} sees no CUDA GPU "
                     f"(torch.cuda.is_available() is False)")
    return torch.device(device)


def synchronize(device: torch.device | str) -> None:
    """Waits for the work queued on ``device`` (nothing to wait for on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn: Callable[[], object], device: torch.device | str) -> float:
    """Wall-clock seconds of ``fn()``, the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def device_info(device: torch.device | str) -> str:
    """The GPU's name and memory, or ``cpu``."""
    device = torch.device(device)
    if device.type != "cuda":
        return "cpu"
    props = torch.cuda.get_device_properties(device)
    return (f"{props.name} ({props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}, "
            f"TF32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}")


# ---------------------------------------------------------------------------------------------
# Device operations per call (a cost figure that does not depend on the machine's speed).
# ---------------------------------------------------------------------------------------------

NO_WORK = frozenset((
    "alias", "as_strided", "broadcast_tensors", "chunk", "conj", "_conj", "contiguous", "detach",
    "detach_", "diagonal", "dim", "empty", "empty_like", "empty_strided", "expand", "expand_as",
    "flatten", "imag", "is_floating_point", "lift", "lift_fresh", "movedim", "narrow", "new_empty",
    "new_empty_strided", "numel", "permute", "real", "requires_grad_", "reshape", "_reshape_alias",
    "resize_", "resolve_conj", "resolve_neg", "result_type", "select", "set_", "size", "slice",
    "split", "split_with_sizes", "squeeze", "squeeze_", "stride", "t", "to", "transpose",
    "type_as", "unbind", "unflatten", "unfold", "unsqueeze", "unsqueeze_", "_unsafe_view", "view",
    "view_as",
))
"""aten operators that only make views, change metadata or allocate: no kernel on CUDA."""

TRITON_LAUNCH = "triton::launch"
NUMBA_CALL = "numba::call"


def _cpu_count(event, tally: dict[str, int]) -> int:
    """Device operations under one profiler event on the CPU (see :func:`device_ops`)."""
    name = event.name
    for label, kind in ((TRITON_LAUNCH, "triton"), (NUMBA_CALL, "numba")):
        if name.startswith(label):
            tally[kind] += 1
            return 1  # (whatever the interpreter or the compiled code does inside)
    below = sum(_cpu_count(child, tally) for child in event.cpu_children)
    if name.startswith("aten::") and below == 0 and name[6:].split(".")[0] not in NO_WORK:
        return 1
    return below


def _kernel_entry_points() -> list[tuple[type, str, str]]:
    """``(class, method, label)`` of the Python entry points of Triton launches (compiled and
    interpreted) and of numba's compiled functions, where installed."""
    points = []
    try:
        from triton.runtime.jit import JITFunction
        points.append((JITFunction, "run", TRITON_LAUNCH))
        from triton.runtime.interpreter import InterpretedFunction
        points.append((InterpretedFunction, "run", TRITON_LAUNCH))
    except ImportError:
        pass
    try:
        from numba.core.dispatcher import Dispatcher
        points.append((Dispatcher, "__call__", NUMBA_CALL))
    except ImportError:
        pass
    return points


def _marked(call: Callable, label: str) -> Callable:
    """``call`` (an unbound method) inside a profiler range named ``label``."""
    from torch.profiler import record_function

    def marked(self, *args, **kwargs):
        with record_function(label):
            return call(self, *args, **kwargs)
    return marked


@contextlib.contextmanager
def _marked_kernel_calls():
    """Marks every Triton launch and every call of a numba function from Python as one profiler
    range (the methods are restored afterwards)."""
    points = _kernel_entry_points()
    saved = [(cls, method, cls.__dict__.get(method)) for cls, method, _ in points]
    for cls, method, label in points:
        setattr(cls, method, _marked(getattr(cls, method), label))
    try:
        yield
    finally:
        for cls, method, original in saved:
            if original is None:
                delattr(cls, method)  # (inherited, e.g. from numba's C base class)
            else:
                setattr(cls, method, original)


def device_ops(fn: Callable[[], object], device: torch.device | str = "cpu") -> dict[str, int]:
    """Device operations dispatched by one call of ``fn`` (after one warm-up call), from
    ``torch.profiler``: ``{"total": ..., "triton": ..., "numba": ...}``, the last two the Triton
    launches and numba calls among them.

    On CUDA, ``total`` is the kernels, memory copies and memsets the profiler records on the
    device (Triton kernels included). On the CPU it is the operations that would be launches on
    CUDA: the aten operators at the lowest level of dispatch that do work (an operator counts
    when none of the operators it calls does work and it is not a view, reshape, metadata or
    allocation operator, :data:`NO_WORK`: ``torch.logsumexp`` counts as the operators it runs,
    ``x.t().contiguous()`` as one copy, ``.item()`` as one (a copy to the host on CUDA)), plus
    one per Triton kernel launch (under the interpreter) and one per call of a compiled numba
    function from Python; the operators inside those are not counted.
    """
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    fn()
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with _marked_kernel_calls(), profile(activities=activities) as prof:
        fn()
        synchronize(device)
    events = prof.events()
    tally = {"total": 0, "triton": 0, "numba": 0}
    cpu_total = sum(_cpu_count(e, tally) for e in events if e.cpu_parent is None)
    if device.type == "cuda":
        from torch.autograd import DeviceType
        tally["total"] = sum(1 for e in events if e.device_type == DeviceType.CUDA)
    else:
        tally["total"] = cpu_total
    return tally


def count_launches(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """``device_ops(fn, device)["total"]``: the device operations of one call of ``fn``."""
    return device_ops(fn, device)["total"]
