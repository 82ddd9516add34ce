"""Machine information printed by every benchmark (imported by the scripts of this folder)."""

from __future__ import annotations

import os
import platform


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo when there is one."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """The system's load averages over 1, 5 and 15 minutes (``n/a`` where the OS has none)."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        return "n/a"
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min)"


def versions(*distributions: str) -> str:
    """``name version`` of each installed distribution (read from its metadata, without
    importing it), ``name not installed`` otherwise."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in distributions:
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} not installed")
    return ", ".join(out)


def machine_info() -> str:
    """CPU, usable cores, load, and the versions and thread settings that change timings."""
    import numpy as np

    try:
        import torch

        torch_info = (f"torch {torch.__version__} ({torch.get_num_threads()} threads, "
                      f"{torch.get_num_interop_threads()} inter-op)")
    except ImportError:
        torch_info = "torch not installed"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_name()}; {cores} usable cores, load average {load_average()}; "
            f"python {platform.python_version()}; numpy {np.__version__}; {torch_info}; "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
