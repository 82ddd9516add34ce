"""What the rows of ``bench_structs.py`` share: the device, paired timings, the first call of
each library (a peer that raises is noted, not fatal), value differences and the table's line.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from harness import Timed, format_spread, paired_ms, progress, ratio_spread

DEVICE = torch.device("cpu")
"""Where the inputs live and the timed work runs (``--device``; set by ``bench_structs.main``)."""
# (torch-struct's distributions do not declare arg_constraints: one warning per instance)
warnings.filterwarnings("ignore", message=".*does not define `arg_constraints`")

ROUNDS, QUICK_ROUNDS = 20, 8
"""Paired rounds per row (``--rounds``), and with ``--quick``."""


def median_ms(fns: dict[str, Callable[[], object]], reps: int,
              budget_s: float = 120.0) -> dict[str, Timed]:
    """Median milliseconds per function over ``reps`` paired rounds (``harness.paired_ms``: each
    function once per round, shuffled; at least 3 rounds, fewer than ``reps`` only past
    ``budget_s`` seconds); every value carries its rounds, for the speed-up's spread."""
    return paired_ms(fns, reps, DEVICE, budget_s, progress=progress)


def error_text(error: BaseException) -> str:
    """One line: the exception's type and message."""
    return f"{type(error).__name__}: {error}".replace("\n", " ")


def probe(fns: dict[str, tuple], notes: dict[str, str]) -> dict[str, tuple]:
    """One call of each function of each library (the values compared): a peer whose call raises
    is taken out of ``fns`` and noted as ``fail: <error>`` (``n/a: <error>`` for a
    NotImplementedError: it lacks the operation); synattn's own errors propagate."""
    values = {}
    for lib in list(fns):
        progress(f"{lib} (first call)")
        try:
            values[lib] = tuple(fn() for fn in fns[lib])
        except Exception as error:
            if lib in ("synattn", "torch path"):
                raise
            lacks = isinstance(error, NotImplementedError)
            notes[lib] = f"{'n/a' if lacks else 'fail'}: {error_text(error)}"
            del fns[lib]
    return values


def max_diff(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return float("nan")
    return (a.double() - b.double()).abs().max().item()


def available_peers() -> list[str]:
    peers = []
    for lib, module in (("torch-struct", "torch_struct"), ("supar", "supar.structs")):
        try:
            __import__(module)
            peers.append(lib)
        except ImportError as error:
            print(f"# {lib} not available ({error}); its columns are empty")
    return peers


def row(name, ours, others, diffs):
    """One line of the table; a library shown as text (``fail: ...``, ``hang: ...``, ``n/a``)
    gets its first word in its column and the whole text on a line below."""
    cols = [f"{name:<40}", f"{ours:9.2f}"]
    explained = []
    for lib in ("torch path", "torch-struct", "supar"):
        value = others.get(lib)
        if isinstance(value, float):
            cols.append(f"{value:12.2f}")
            continue
        word = str(value or "-").split(":")[0]
        cols.append(f"{word:>12}")
        if value and word != value:
            explained.append(f"#   {lib}: {value}")
    cols.append(f"{format_spread(ratio_spread(ours, others)):>22}")
    cols.append("  ".join(f"{lib}: {d:.1e}" for lib, d in diffs.items()))
    print(" | ".join(cols), flush=True)
    for line in explained:
        print(line, flush=True)
