"""The device a benchmark runs on, and wall-clock timing that waits for it (imported by the
scripts of this folder).

CUDA runs asynchronously: ``time.perf_counter()`` around a call measures the launches, not the
work. :func:`seconds` synchronises the device before starting the clock and again before
stopping it, so every timing covers the work queued by the call; on the CPU it is a plain
``perf_counter`` difference.
"""

from __future__ import annotations

import argparse
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
