"""Reading plain-text corpora line by line with errors that name the file and the line.

Every command that reads sentences from a text file (``prepare``, ``parse``, ``translate``,
``induce``, ``viz``) reads them with :func:`read_lines`, which applies the same limits to each
line before any parser or tokenizer sees it (:func:`line_problem`): valid UTF-8, not empty, at
most :data:`MAX_LINE_CHARS` characters, no control characters, and at most the command's number
of words. A line longer than the limit is never held whole in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from synattn.errors import DataError
from synattn.limits import MAX_LINE_CHARS, control_cause

__all__ = ["MAX_LINE_CHARS", "SkipReport", "check_text_file", "control_cause", "count_lines", "line_problem",
           "read_lines"]


@dataclass
class SkipReport:
    """What a reader skipped with ``on_error="skip"``: ``(line, cause)`` pairs."""

    skipped: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.skipped)

    def summary(self, path: str | Path) -> str:
        if not self.skipped:
            return f"{path}: nothing skipped"
        causes: dict[str, int] = {}
        for _, cause in self.skipped:
            kind = cause.split(" (")[0]
            causes[kind] = causes.get(kind, 0) + 1
        detail = "; ".join(f"{n}× {c}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1]))
        lines = [str(line) for line, _ in self.skipped]
        which = ", ".join(lines[:20]) + (f" and {len(lines) - 20} more" if len(lines) > 20 else "")
        return f"{path}: skipped {len(lines)} line(s) ({detail}): line(s) {which}"


def check_text_file(path: str | Path, sniff: int = 8192) -> None:
    """Raise :class:`DataError` for a binary file: among its first ``sniff`` bytes, NUL bytes on at
    least 4 lines and on more than a quarter of them, or 64 NUL bytes or more. Its "lines" are
    not sentences, and each would be reported as bad input on its own; a text file with a stray
    NUL byte on a line is not binary: that line is bad input (:func:`line_problem`)."""
    with open(path, "rb") as f:
        head = f.read(sniff)
    if b"\x00" not in head:
        return
    lines = head.split(b"\n")
    with_nul = sum(b"\x00" in line for line in lines)
    if head.count(b"\x00") >= 64 or (with_nul >= 4 and 4 * with_nul > len(lines)):
        offset = head.index(b"\x00")
        raise DataError(f"not a text file: a NUL byte at byte {offset + 1} (a binary file?)", str(path),
                        head[:offset].count(b"\n") + 1)


def count_lines(path: str | Path, chunk: int = 1 << 20) -> int:
    """The number of lines of a file (a last line without a line break counts), read in chunks:
    a file of one enormous line takes no more memory than any other."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(chunk):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _bounded_lines(f: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """``(line, size)`` for each line of ``f``: its first ``max_bytes + 1`` bytes at most (the rest
    is read in chunks and dropped) and its size in bytes, line break excluded."""
    while raw := f.readline(max_bytes + 1):
        size, ended = len(raw), raw.endswith(b"\n")
        while not ended and (rest := f.readline(1 << 20)):
            size, ended = size + len(rest), rest.endswith(b"\n")
        yield raw, size - ended


def line_problem(text: str, *, max_chars: int = MAX_LINE_CHARS, max_words: int | None = None,
                 words_option: str | None = None) -> str | None:
    """Why a line of text (decoded, whitespace not yet normalised) is no sentence, or None.

    The checks every command makes before a parser or a tokenizer sees the line: not empty, at
    most ``max_chars`` characters once whitespace is normalised, no control character (a NUL
    byte, an escape ...; tabs, line breaks and the other white space are spaces), at most
    ``max_words`` whitespace-separated words (the limit is named ``words_option`` in the cause).
    """
    words = text.split()
    if not words:
        return "empty line"
    if len(text) > max_chars and (chars := sum(map(len, words)) + len(words) - 1) > max_chars:
        return f"line has {chars:,} characters, more than the limit of {max_chars:,} characters"
    if cause := control_cause(text):
        return cause
    if max_words is not None and len(words) > max_words:
        if words_option:
            return f"line has {len(words):,} words, more than {words_option} {max_words} (raise {words_option})"
        return f"line has {len(words):,} words, more than the limit of {max_words}"
    return None


def read_lines(path: str | Path, *, on_error: str = "raise", max_words: int | None = None,
               report: SkipReport | None = None, keep_tabs: bool = False, max_chars: int = MAX_LINE_CHARS,
               words_option: str | None = None) -> list[tuple[int, str]]:
    """Read a one-sentence-per-line UTF-8 file.

    Args:
        path: the file.
        on_error: ``"raise"`` raises :class:`DataError` at the first bad line; ``"skip"`` leaves it out
            and records it in ``report``.
        max_words: lines with more whitespace-separated words than this are bad input.
        report: filled with the skipped lines when ``on_error="skip"``.
        keep_tabs: keep tab characters (the columns of a TSV file), normalising the whitespace
            inside each column; else every run of whitespace, tabs included, becomes one space.
        max_chars: lines of more characters than this are bad input (read no further than the limit).
        words_option: the option that sets ``max_words``, named in the cause (e.g. ``--max-words``).

    Returns:
        ``(line_number, text)`` pairs (1-based line numbers) of the good lines, whitespace-normalised.

    Raises:
        DataError: non-UTF-8 bytes, an empty or over-long line, a control character
            (:func:`line_problem`; with ``on_error="raise"``); a binary file
            (:func:`check_text_file`), whatever ``on_error``.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    report = report if report is not None else SkipReport()
    out: list[tuple[int, str]] = []
    check_text_file(path)
    max_bytes = 4 * max_chars + 2  # UTF-8 takes at most 4 bytes a character (+ a line break)
    with open(path, "rb") as f:
        for number, (raw, size) in enumerate(_bounded_lines(f, max_bytes), start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark is no text
                raw = raw[3:]
            cause: str | None
            if size > max_bytes:
                cause = f"line has {size:,} bytes, more than the limit of {max_chars:,} characters"
            else:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    cause = f"not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1})"
                else:
                    cause = line_problem(text, max_chars=max_chars, max_words=max_words, words_option=words_option)
                    if cause is None:
                        if keep_tabs:
                            text = "\t".join(" ".join(column.split()) for column in text.rstrip("\r\n").split("\t"))
                        else:
                            text = " ".join(text.split())
                        out.append((number, text))
                        continue
            if on_error == "raise":
                way_out = "use --on-error skip to leave such lines out"
                message = (cause[:-1] + f", or {way_out})" if words_option and cause.endswith(f"(raise {words_option})")
                           else f"{cause} ({way_out})")
                raise DataError(message, path=str(path), line=number)
            report.skipped.append((number, cause))
    return out
