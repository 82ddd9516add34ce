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


def machine_info() -> str:
    """CPU, usable cores, load, and the versions and thread settings that change timings."""
    import numpy as np

    try:
        import torch

        torch_info = f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        torch_info = "torch not installed"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_name()}; {cores} usable cores, load average {os.getloadavg()[0]:.1f}; "
            f"python {platform.python_version()}; numpy {np.__version__}; {torch_info}; "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
