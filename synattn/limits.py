"""Upper bounds of size options, derived from the memory of the machine.

A size option (a model width, a label clipping distance, a number of k-best structures, the
length of a sentence whose word pairs are all labelled) decides how much memory a computation
takes. Each place that turns such an option into an allocation states what it would need, in
bytes, and :func:`check_memory` refuses a value whose need exceeds the machine's physical memory
before anything is allocated: one line naming the option, instead of an allocator's traceback,
an out-of-memory kill or minutes of swapping. The bound is a property of the machine (not of
what other processes hold at the moment), so the same command is refused or accepted alike on
every run.

The limits of a line of input text (:data:`MAX_LINE_CHARS`, :func:`control_cause`) are here too:
every reader of sentences applies them before a parser or a tokenizer sees the line
(:func:`synattn.data.text.line_problem`, the CoNLL-U reader).
"""

from __future__ import annotations

import functools
import os
import re

from synattn.errors import UsageError, brief


@functools.cache
def memory_bytes() -> int:
    """The machine's physical memory in bytes (1 TiB where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 1 << 40


def format_bytes(n: float) -> str:
    """``n`` bytes as ``12.3 GB`` (decimal units, up to exabytes, then powers of ten)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if abs(n) < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n * 1e18:.2e} B"


def check_memory(option: str, value: object, need: float, what: str) -> None:
    """Refuse ``option=value`` when what it makes (``what``) needs more than the machine's memory.

    Args:
        option: the option's name as the user wrote it (``model.d_model``, ``--max-distance``,
            ``kbest: k``).
        value: its value (shown briefly, :func:`synattn.errors.brief`).
        need: the bytes the computation would allocate (a lower bound of them is enough).
        what: what the bytes are for, e.g. ``"the [N+2, N+2] relation label tables"``.

    Raises:
        UsageError: (a ``ValueError``) one line naming the option, the need and the memory.
    """
    have = memory_bytes()
    if need > have:
        raise UsageError(f"{option}={brief(value)} is too large: {what} would need about "
                         f"{format_bytes(need)} of memory, more than this machine's "
                         f"{format_bytes(have)}")


MAX_LINE_CHARS = 100_000
"""The most characters a line of text may have (after whitespace is normalised): spaCy needs about
1 GB of memory per 100,000 characters it parses, and no sentence is this long."""
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
"""The control characters (Unicode category Cc) that are not white space."""


def control_cause(text: str) -> str | None:
    """Where ``text`` holds a control character that is not white space (a NUL byte, an escape,
    DEL, a C1 control), as the cause of an error, or None."""
    control = _CONTROL.search(text)
    if control is None:
        return None
    return f"line holds the control character {ascii(control.group())[1:-1]} at column {control.start() + 1}"
