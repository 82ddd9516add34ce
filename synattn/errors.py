"""Error types that synattn raises for bad user input.

Every error raised while reading user files names the file, the line and the cause, so that
``synattn`` can print it as one line without a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class SynattnError(Exception):
    """Base class of every error synattn raises on purpose for bad input or a missing resource."""


class MissingDependencyError(SynattnError, ImportError):
    """An optional package (a spaCy model, a corpus package) is not installed.

    The message says what to ``pip install``.
    """

    def __init__(self, what: str, install: str):
        self.what = what
        self.install = install
        super().__init__(f"{what} is not installed; install it with: pip install {install}")


@dataclass
class Location:
    """Where in an input file a problem was found (1-based line numbers)."""

    path: str = "<input>"
    line: int | None = None
    sent_id: str | None = None

    def __str__(self) -> str:
        out = self.path
        if self.line is not None:
            out += f":{self.line}"
        if self.sent_id is not None:
            out += f" (sentence {self.sent_id})"
        return out


class InputError(SynattnError, ValueError):
    """Malformed user input: the message starts with ``file:line`` and states the cause."""

    def __init__(self, cause: str, path: str = "<input>", line: int | None = None,
                 sent_id: str | None = None):
        self.cause = cause
        self.location = Location(path, line, sent_id)
        super().__init__(f"{self.location}: {cause}")

    @property
    def path(self) -> str:
        return self.location.path

    @property
    def line(self) -> int | None:
        return self.location.line

    @property
    def sent_id(self) -> str | None:
        return self.location.sent_id


class TreebankError(InputError):
    """A dependency or constituency treebank file is malformed (bad head, cycle, no root, ...)."""


class DataError(InputError):
    """A text corpus file is malformed (mismatched parallel lines, bad encoding, empty line...)."""


class UsageError(SynattnError, ValueError):
    """A bad command-line option or configuration value; the message names the option or key.

    The ``synattn`` command prints it as one line and exits with status 2 (like argparse).
    """


class ConfigError(UsageError):
    """A configuration mistake (unknown key, wrong type, value out of range, conflicting methods).

    The message names the file (or the ``key=value`` override), the key and the cause.
    """

    prefixed = False
    """True once the message starts with the key path of the config that holds the key."""


class RunFailure(SynattnError, RuntimeError):
    """The command could not finish for a reason outside the user's input (disk full, a run
    directory locked by another process, ...). The ``synattn`` command exits with status 1."""


def brief(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, bounded: nested lists and mappings are shown to a
    depth of 3 and 6 items per level (so that a YAML alias bomb, ``9^10`` elements behind one
    name, is never expanded), strings and numbers cut, and the whole at most ``limit``
    characters (a cut is marked with ``...``)."""
    import reprlib

    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother, shown.maxlong = 3, limit, limit, limit
    shown.maxlist = shown.maxtuple = shown.maxdict = shown.maxset = shown.maxfrozenset = 6
    text = shown.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
