"""Reading plain-text corpora line by line with errors that name the file and the line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from synattn.errors import DataError


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
            causes[cause] = causes.get(cause, 0) + 1
        detail = "; ".join(f"{n}× {c}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1]))
        first = ", ".join(str(line) for line, _ in self.skipped[:5])
        return f"{path}: skipped {len(self.skipped)} line(s) ({detail}); first at line(s) {first}"


def check_text_file(path: str | Path, sniff: int = 8192) -> None:
    """Raise :class:`DataError` for a binary file (a NUL byte among its first ``sniff`` bytes): its
    "lines" are not sentences, and each would be reported as bad input on its own."""
    with open(path, "rb") as f:
        head = f.read(sniff)
    if b"\x00" in head:
        offset = head.index(b"\x00")
        raise DataError(f"not a text file: a NUL byte at byte {offset + 1} (a binary file?)", str(path),
                        head[:offset].count(b"\n") + 1)


def read_lines(path: str | Path, *, on_error: str = "raise", max_words: int | None = None,
               report: SkipReport | None = None, keep_tabs: bool = False) -> list[tuple[int, str]]:
    """Read a one-sentence-per-line UTF-8 file.

    Args:
        path: the file.
        on_error: ``"raise"`` raises :class:`DataError` at the first bad line; ``"skip"`` leaves it out
            and records it in ``report``.
        max_words: lines with more whitespace-separated words than this are bad input.
        report: filled with the skipped lines when ``on_error="skip"``.
        keep_tabs: keep tab characters (the columns of a TSV file), normalising the whitespace
            inside each column; else every run of whitespace, tabs included, becomes one space.

    Returns:
        ``(line_number, text)`` pairs (1-based line numbers) of the good lines, whitespace-normalised.

    Raises:
        DataError: non-UTF-8 bytes, an empty line, or an over-long line (with ``on_error="raise"``);
            a binary file (:func:`check_text_file`), whatever ``on_error``.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    report = report if report is not None else SkipReport()
    out: list[tuple[int, str]] = []
    check_text_file(path)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark is no text
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                cause = f"not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1})"
            else:
                if keep_tabs:
                    text = "\t".join(" ".join(column.split()) for column in text.rstrip("\r\n").split("\t"))
                else:
                    text = " ".join(text.split())
                if not text.strip():
                    cause = "empty line"
                elif max_words is not None and len(text.split()) > max_words:
                    cause = f"line has {len(text.split())} words, more than the limit of {max_words}"
                else:
                    out.append((number, text))
                    continue
            if on_error == "raise":
                raise DataError(cause + " (use --on-error skip to leave such lines out)",
                                path=str(path), line=number)
            report.skipped.append((number, cause))
    return out
