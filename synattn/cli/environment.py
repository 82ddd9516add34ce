"""The environment variables the ``synattn`` command reads, checked when it starts: a value it
cannot use is a one-line error (exit status 2) before any work, never a traceback later.

- ``SYNATTN_DEBUG``: tracebacks instead of one-line errors when ``1``, ``true``, ``yes`` or ``on``
  (any case); one-line errors when unset, empty, ``0``, ``false``, ``no`` or ``off``; any other
  value is an error (a typo must not silently change what errors look like).
- ``SYNATTN_STRUCTS_BACKEND``: the dynamic programs' implementation (docs/structs.md); an unknown
  name is an error naming the variable and the names it takes.

Example:
    >>> debug_on({"SYNATTN_DEBUG": "Yes"}), debug_on({"SYNATTN_DEBUG": " 0 "}), debug_on({})
    (True, False, False)
    >>> debug_on({"SYNATTN_DEBUG": "2"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    synattn.errors.UsageError: SYNATTN_DEBUG='2': expected 1, true, yes or on ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from synattn.errors import UsageError, brief

DEBUG = "SYNATTN_DEBUG"
DEBUG_ON = ("1", "true", "yes", "on")
DEBUG_OFF = ("", "0", "false", "no", "off")
STRUCTS_BACKEND = "SYNATTN_STRUCTS_BACKEND"


def debug_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``SYNATTN_DEBUG`` asks for tracebacks (see the module docstring).

    Raises:
        UsageError: a value that is neither on nor off.
    """
    raw = (os.environ if environ is None else environ).get(DEBUG, "")
    value = raw.strip().lower()
    if value in DEBUG_ON:
        return True
    if value in DEBUG_OFF:
        return False
    raise UsageError(f"{DEBUG}={brief(raw, 60)}: expected 1, true, yes or on (tracebacks instead of one-line "
                     "errors), or 0, false, no, off or empty (one-line errors)")


def check_structs_backend() -> None:
    """Raises :class:`UsageError` when ``SYNATTN_STRUCTS_BACKEND`` names no backend (as
    :func:`synattn.structs.backend.requested_backend`, which reads it, checks it; imported only when
    the variable is set)."""
    if STRUCTS_BACKEND not in os.environ:
        return
    from synattn.structs import backend

    try:
        backend.requested_backend()
    except ValueError:
        raise UsageError(f"{STRUCTS_BACKEND}={brief(os.environ[STRUCTS_BACKEND], 60)}: not a structs backend; "
                         f"choose one of {', '.join(backend.BACKENDS)} (docs/structs.md)") from None


def check() -> bool:
    """Checks the variables above; returns whether tracebacks are asked for (:func:`debug_on`).

    Raises:
        UsageError: a value the command cannot use.
    """
    debug = debug_on()
    check_structs_backend()
    return debug
