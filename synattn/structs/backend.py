"""Which implementation a dynamic program runs: compiled CPU kernels (numba), GPU kernels (Triton)
or pure PyTorch.

Every dynamic program of :mod:`synattn.structs` has a pure-PyTorch implementation (vectorised over
the batch, one Python step per position or span width; the path for CUDA tensors) and, for CPU
tensors, a compiled one written with numba (one loop nest per sentence, sentences spread over
threads). On a CPU the Python-level loop of the first is bound by kernel launches, not
arithmetic, which is why the compiled kernels are several times faster there. Both give the same
numbers up to rounding (the tests check them against each other and against brute force).

For CUDA tensors the main structures (Eisner of first and second order, CKY, the linear chain and
the semi-Markov chain) also have Triton kernels (:mod:`synattn.structs.triton_kernels`): one
program per sentence with the loop over span widths or positions inside the kernel, so a call is a
handful of launches whatever the length, where the PyTorch path issues several launches per width.

Choose with the environment variable ``SYNATTN_STRUCTS_BACKEND`` (``auto``, ``torch``,
``numba``, ``triton`` or ``reference``) or, inside a program, with :func:`use_backend`::

    with use_backend("torch"):
        mu = DependencyCRF(scores, lengths).marginals

``auto`` (the default) takes the compiled kernels for CPU tensors when numba is installed, the
Triton kernels for CUDA tensors when ``triton`` imports, and PyTorch otherwise. Asking for
``numba`` or ``triton`` where it cannot run is an error, not a silent fallback. ``triton`` also
runs on CPU tensors when Triton's interpreter is on (``TRITON_INTERPRET=1`` in the environment
before the kernels are first imported): slowly, but the same kernels, so they can be checked
on a machine without a GPU (the tests do). ``reference`` runs the plain reference
implementations of ``log_partition`` and ``marginals`` (:mod:`synattn.structs.reference`, chosen
through :mod:`synattn.structs.registry`; slow, for tests and readers) and the PyTorch code for
everything else. Compiled kernels are cached on disk (numba's ``cache=True``), so a process
compiles a kernel only the first time it is ever used on a machine.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Iterator

import numpy as np
import torch

BACKENDS = ("auto", "torch", "numba", "triton", "reference")
ENV_VAR = "SYNATTN_STRUCTS_BACKEND"

_override: list[str] = []


def _check(name: str, where: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{where}: unknown structs backend {name!r}; choose one of {BACKENDS}")
    return name


def requested_backend() -> str:
    """The backend asked for: the innermost :func:`use_backend`, else the environment, else auto."""
    if _override:
        return _override[-1]
    return _check(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto", ENV_VAR)


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the block with the dynamic programs on backend ``name`` (``auto``/``torch``/``numba``/
    ``triton``/``reference``)."""
    _override.append(_check(name, "use_backend"))
    try:
        yield
    finally:
        _override.pop()


@functools.cache
def numba_available() -> bool:
    """True if numba imports (it is a dependency of synattn, but an optional one at run time)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def kernels(name: str):
    """The compiled-kernel module ``synattn.structs.<name>`` (e.g. ``"_eisner_kernels"``),
    imported on first use: ``import synattn`` never needs numba, and the kernels' modules are
    only loaded on the compiled path."""
    # lazy: the kernel modules import numba, which only the compiled path may need
    return importlib.import_module(f"{__package__}.{name}")


def use_numba(*tensors: torch.Tensor) -> bool:
    """Whether a dynamic program over ``tensors`` runs the compiled kernels.

    Raises:
        RuntimeError: ``numba`` was asked for but is not installed, or a tensor is not on the CPU.
    """
    backend = requested_backend()
    if backend in ("torch", "triton", "reference"):
        return False
    on_cpu = all(t.device.type == "cpu" for t in tensors)
    if backend == "numba":
        if not numba_available():
            raise RuntimeError(f"structs backend 'numba' requested ({ENV_VAR} or use_backend) but "
                               "numba is not installed: pip install numba")
        if not on_cpu:
            raise RuntimeError("structs backend 'numba' runs on CPU tensors only; "
                               "use 'auto' or 'torch' for CUDA tensors")
        return True
    return on_cpu and numba_available()


@functools.cache
def triton_available() -> bool:
    """True if ``triton`` imports (an optional dependency: ``pip install triton``)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def triton_interpreted() -> bool:
    """True if Triton's interpreter is on (``TRITON_INTERPRET=1``): kernels then run on CPU tensors."""
    if not triton_available():
        return False
    import triton

    knobs = getattr(triton, "knobs", None)  # (Triton >= 3.4; before, the environment decides)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def use_triton(*tensors: torch.Tensor) -> bool:
    """Whether a dynamic program over ``tensors`` runs the Triton kernels.

    ``auto``: for CUDA tensors when triton imports. ``triton``: always, and an error where it
    cannot run (triton missing; CPU tensors without the interpreter).

    Raises:
        RuntimeError: ``triton`` was asked for but cannot run on these tensors.
    """
    backend = requested_backend()
    if backend not in ("auto", "triton"):
        return False
    on_cuda = all(t.device.type == "cuda" for t in tensors)
    if backend == "auto":
        return on_cuda and triton_available()
    if not triton_available():
        raise RuntimeError(f"structs backend 'triton' requested ({ENV_VAR} or use_backend) but "
                           "triton is not installed: pip install triton")
    on_cpu = all(t.device.type == "cpu" for t in tensors)
    if on_cuda or (on_cpu and triton_interpreted()):
        return True
    raise RuntimeError("structs backend 'triton' runs on CUDA tensors, or on CPU tensors under "
                       "Triton's interpreter (TRITON_INTERPRET=1 set before the kernels are imported)")


def as_array(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy view of a CPU tensor (copied only if needed), detached from autograd."""
    return t.detach().contiguous().numpy()


def set_threads(work: int | None = None, serial_below: int = 0) -> int:
    """Set the threads of the next compiled kernel: PyTorch's intra-op count (at least 1), or one
    thread if ``work < serial_below``; returns the count.

    Small kernels take well under a millisecond, less than waking (and, on a busy machine,
    waiting for) a second thread. PyTorch's own thread count is left as it was: numba's OpenMP
    threading layer shares the OpenMP runtime with PyTorch, and starting its thread pool would
    otherwise reset PyTorch's count to the number of cores.
    """
    import numba

    torch_threads = torch.get_num_threads()
    # (numba.config sets its options at import time, unseen by its type information)
    count = max(1, min(torch_threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    if work is not None and work < serial_below:
        count = 1
    numba.set_num_threads(count)
    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    return count


SMALL_STEP = 1 << 18
"""Elements per step below which a dynamic program's loop runs with one CPU thread."""


@contextlib.contextmanager
def serial_if_small(step_elements: int, device: torch.device) -> Iterator[None]:
    """Run the block with one intra-op thread on CPU when its kernels are small.

    A dynamic program issues many kernels of ``step_elements`` elements each, one Python step
    after another; below :data:`SMALL_STEP` splitting them over threads costs more in
    synchronisation than it gains (measured on a 2-core machine, also under load). The thread
    count is restored afterwards.
    """
    with one_thread(device.type == "cpu" and step_elements < SMALL_STEP):
        yield


@contextlib.contextmanager
def one_thread(when: bool = True) -> Iterator[None]:
    """Run the block with one intra-op thread if ``when``; the thread count is restored afterwards."""
    threads = torch.get_num_threads()
    if not when or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)

