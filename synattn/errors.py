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


LINE_LIMIT = 2000
"""The most characters :func:`one_line` keeps of a whole error line."""

WORD_LIMIT = 300
"""The most characters :func:`one_line` keeps of one run of non-blank characters (a path, a value,
an argument echoed in an error line)."""

_BLANKS = " \t\n"


def one_line(text: str, limit: int = LINE_LIMIT, word_limit: int = WORD_LIMIT) -> str:
    """``text`` as one line that is safe to print on a terminal: line breaks and tabs as spaces
    (runs of them as one: a message the code wrapped), every other character that is not printable
    (a control character such as the escape ``\\x1b``, ``\\x1e`` or a carriage return, a line or
    paragraph separator, a format character such as ``\\u202e``) written as Python escapes it,
    each run of more than ``word_limit`` non-blank characters (an echoed path or value) cut in its
    middle, and the whole at most ``limit`` characters. Every error line of the ``synattn``
    command goes through it.

    Example:
        >>> print(one_line("bad key '\\x1b[2Jx'\\n  in line 2"))
        bad key '\\x1b[2Jx' in line 2
        >>> len(one_line("-o " + "x" * 120_000)) <= WORD_LIMIT + 3
        True
    """
    shown = "".join(" " if c in _BLANKS else c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return _cut(" ".join(_cut(word, word_limit) for word in shown.split(" ") if word), limit)


def _cut(text: str, limit: int) -> str:
    """``text`` when at most ``limit`` characters, else its start and end around what was left out."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(f"…({len(text):,} characters left out)…"), 2)
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    return f"{text[:head]}…({len(text) - head - tail:,} characters left out)…{text[len(text) - tail:]}"
