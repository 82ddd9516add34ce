"""Read and write CoNLL-U dependency treebanks (https://universaldependencies.org/format.html).

The reader splits the file into sentences itself so that every error names its file, line and
sentence; fields are parsed with the ``conllu`` package's value parsers. It only reads text:
nothing in the file is ever evaluated. Multiword-token lines (``3-4``) and empty nodes (``5.1``)
are not words of the tree; they are kept in ``DependencyTree.metadata`` so that writing a tree
back reproduces them.

Checks (each a ``TreebankError`` naming ``file:line (sentence id)``; the sentence id is the
``# sent_id`` comment, else the 1-based sentence number): bytes that are not UTF-8, a token line
without exactly 10 tab-separated columns, an empty column, an invalid or out-of-order ID, a
multiword token or empty node out of place, a non-integer HEAD, a head out of range, a cycle
(naming its words), no root, a comment after the token lines, a second ``# sent_id`` or
``# text`` comment, a carriage return inside a line, a sentence without words; a file with text
but no word line at all is said to be no CoNLL-U (a Markdown or text file given by mistake).
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Literal, cast

import numpy as np
from conllu.exceptions import ParseException
from conllu.parser import parse_comment_line, parse_id_value, parse_int_value

from synattn.errors import InputError, TreebankError
from synattn.limits import MAX_LINE_CHARS, control_cause
from synattn.trees.dependency import DependencyTree, head_problem

logger = logging.getLogger(__name__)

COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
_EXTRA_COLUMNS = ("lemma", "feats", "deps", "misc")  # raw columns kept in metadata
_BAD_BYTE = re.compile("[\udc80-\udcff]")  # undecodable bytes under surrogateescape
# keep every comment line, also free-text ones that `conllu` would drop
_KEEP_ALL_COMMENTS = {"__fallback__": lambda key, value: (key, value)}

PathOrFile = str | os.PathLike | IO[str] | IO[bytes]


def read_text(path_or_file: PathOrFile, name: str | None = None) -> tuple[str, str]:
    """Read a whole treebank file as text, keeping bytes that are not UTF-8 visible.

    Bytes that are not valid UTF-8 become lone surrogates (``surrogateescape``) so that the
    caller can report them with their line (see ``bad_byte_cause``). A leading BOM is dropped.

    Args:
        path_or_file: a path, or an open text or binary file.
        name: the name used in error messages (default: the path, or the file's ``name``).

    Returns:
        ``(text, name)``.

    Raises:
        TreebankError: the file cannot be opened or read.
    """
    if isinstance(path_or_file, (str, os.PathLike)):
        name = name or os.fspath(path_or_file)
        try:
            with open(path_or_file, "rb") as f:
                data: str | bytes = f.read()
        except OSError as e:
            raise TreebankError(f"cannot read file: {e.strerror or e}", path=name) from None
    else:
        name = name or str(getattr(path_or_file, "name", "<input>"))
        try:
            data = path_or_file.read()
        except UnicodeDecodeError as e:
            raise TreebankError(f"file is not valid UTF-8 ({e.reason})", path=name) from None
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="surrogateescape")
    return data.removeprefix("\ufeff"), name


def bad_byte_cause(line: str) -> str | None:
    """The cause to report if ``line`` (from ``read_text``) holds bytes that are not UTF-8."""
    match = _BAD_BYTE.search(line)
    if match is None:
        return None
    byte = ord(match.group()) - 0xDC00
    return f"byte 0x{byte:02x} at column {match.start() + 1} is not valid UTF-8"


@dataclass
class ReadReport:
    """What ``read_conllu_with_report`` read and what it skipped.

    Attributes:
        path: the file's name.
        n_read: sentences returned.
        skipped: one ``TreebankError`` per skipped sentence (its message says where and why).
    """

    path: str
    n_read: int = 0
    skipped: list[TreebankError] = field(default_factory=list)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def summary(self, max_errors: int = 5) -> str:
        """One line per skipped sentence (at most ``max_errors``) under a count line."""
        lines = [f"{self.path}: read {self.n_read} sentences, skipped {self.n_skipped}"]
        lines += [f"  {e}" for e in self.skipped[:max_errors]]
        if self.n_skipped > max_errors:
            lines.append(f"  ... and {self.n_skipped - max_errors} more")
        return "\n".join(lines)


def _sentence_blocks(lines: list[str]) -> Iterable[tuple[int, list[str]]]:
    """Yield ``(first line number (1-based), lines)`` of each run of non-blank lines."""
    start, block = 0, list[str]()
    for number, line in enumerate(lines, start=1):
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


def _parse_sentence(block: list[str], first_line: int, number: int, path: str,
                    check_bytes: bool) -> DependencyTree:
    """Parse the lines of one sentence into a validated ``DependencyTree``."""
    sent_id: str | None = None
    text: str | None = None
    comments: list[tuple[str, str | None]] = []
    words: list[str] = []
    heads: list[int] = []
    deprels: list[str] = []
    upos: list[str] = []
    xpos: list[str] = []
    word_lines: list[int] = []
    extra: dict[str, list[str]] = {c: [] for c in _EXTRA_COLUMNS}
    multiword: list[tuple[int, int, str, str]] = []
    multiword_lines: list[int] = []
    empty_nodes: list[tuple[int, str]] = []

    def fail(cause: str, line: int) -> TreebankError:
        return TreebankError(cause, path=path, line=line,
                             sent_id=sent_id if sent_id is not None else str(number))

    for line_number, line in enumerate(block, start=first_line):
        line = line.removesuffix("\r")
        if check_bytes and (cause := bad_byte_cause(line)) is not None:
            raise fail(cause, line_number)
        if len(line) > MAX_LINE_CHARS:
            raise fail(f"line has {len(line):,} characters, more than the limit of {MAX_LINE_CHARS:,} characters",
                       line_number)
        if (cause := control_cause(line)) is not None:
            raise fail(cause, line_number)
        if "\r" in line:
            raise fail("carriage return inside a line", line_number)
        if line.startswith("#"):
            if words or multiword or empty_nodes:
                raise fail("comment line after the token lines of the sentence", line_number)
            for key, value in parse_comment_line(line, metadata_parsers=_KEEP_ALL_COMMENTS):
                if key in ("sent_id", "text") and any(key == k for k, _ in comments):
                    raise fail(f"second '# {key}' comment in one sentence", line_number)
                comments.append((key, value))
                if key == "sent_id":
                    sent_id = value
                elif key == "text":
                    text = value
            continue
        columns = line.split("\t")
        if len(columns) != len(COLUMNS):
            raise fail(f"expected 10 tab-separated columns, found {len(columns)}", line_number)
        empty = [COLUMNS[k] for k, column in enumerate(columns) if not column.strip()]
        if empty:
            raise fail(f"empty column {', '.join(empty)} (write '_' for no value)", line_number)
        try:
            token_id = parse_id_value(columns[0])
        except ParseException:
            token_id = None
        if token_id is None:
            raise fail(f"invalid ID {columns[0]!r}", line_number)
        expected = len(words) + 1
        if isinstance(token_id, tuple) and token_id[1] == "-":
            first, last = token_id[0], token_id[2]
            if first != expected or (multiword and first <= multiword[-1][1]):
                raise fail(f"multiword token {columns[0]} out of place: the next word is "
                           f"{expected}", line_number)
            multiword.append((first, last, columns[1], columns[9]))
            multiword_lines.append(line_number)
            continue
        if isinstance(token_id, tuple):  # empty node "k.m" follows word k
            if token_id[0] != len(words):
                raise fail(f"empty node {columns[0]} out of place: it must follow word "
                           f"{token_id[0]}, but the last word is {len(words)}", line_number)
            empty_nodes.append((len(words), line))
            continue
        if token_id != expected:
            raise fail(f"word ID {token_id} out of order: expected {expected}", line_number)
        try:
            head = parse_int_value(columns[6])
        except ParseException:
            head = None
        if head is None:
            raise fail(f"HEAD {columns[6]!r} is not an integer", line_number)
        if not 0 <= head < 2**31:
            raise fail(f"HEAD {head} is out of range", line_number)
        words.append(columns[1])
        heads.append(head)
        upos.append(columns[3])
        xpos.append(columns[4])
        deprels.append(columns[7])
        for key, k in zip(_EXTRA_COLUMNS, (2, 5, 8, 9)):
            extra[key].append(columns[k])
        word_lines.append(line_number)

    if not words:
        raise fail("sentence has no words", first_line)
    for (first, last, _, _), line_number in zip(multiword, multiword_lines):
        if last > len(words):
            raise fail(f"multiword token {first}-{last} ends after the last word "
                       f"{len(words)}", line_number)
    problem = head_problem(heads, words)
    if problem is not None:
        raise fail(problem[1], word_lines[problem[0]])
    metadata = {"comments": comments, **extra, "multiword_tokens": multiword,
                "empty_nodes": empty_nodes}
    return DependencyTree(words, np.asarray(heads, dtype=np.int64), deprels, upos, xpos, sent_id, text, metadata)


def read_conllu_with_report(path_or_file: PathOrFile,
                            on_error: Literal["raise", "skip"] = "raise",
                            name: str | None = None) -> tuple[list[DependencyTree], ReadReport]:
    """Read a CoNLL-U file into dependency trees, and say what was skipped.

    Args:
        path_or_file: a path, or an open text or binary file.
        on_error: ``"raise"`` raises the first error; ``"skip"`` leaves out every malformed
            sentence, records its error in the report and logs one warning with the count.
        name: the file name used in error messages (default: the path or the file's ``name``).

    Returns:
        ``(trees, report)``: the sentences in file order, and a ``ReadReport``.

    Raises:
        TreebankError: on the first malformed sentence (``on_error="raise"``), or when the file
            cannot be read.

    Example:
        >>> text = "1\\tHi\\thi\\tINTJ\\tUH\\t_\\t0\\troot\\t_\\t_\\n\\n"
        >>> trees, report = read_conllu_with_report(io.StringIO(text))
        >>> trees[0].words, trees[0].heads.tolist(), report.n_skipped
        (['Hi'], [0], 0)
    """
    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    text, path = read_text(path_or_file, name)
    check_bytes = _BAD_BYTE.search(text) is not None
    _check_is_conllu(text, path)
    report = ReadReport(path)
    trees = []
    for number, (first_line, block) in enumerate(_sentence_blocks(text.split("\n")), start=1):
        try:
            trees.append(_parse_sentence(block, first_line, number, path, check_bytes))
        except TreebankError as e:
            if on_error == "raise":
                raise
            report.skipped.append(e)
    report.n_read = len(trees)
    if report.n_skipped:
        logger.warning("%s: skipped %d malformed sentences of %d (first: %s)", path,
                       report.n_skipped, report.n_skipped + report.n_read, report.skipped[0])
    return trees, report


def _check_is_conllu(text: str, path: str) -> None:
    """Raises ``TreebankError`` (whatever ``on_error``) for a file with text but not one word line
    (10 tab-separated columns): a file of another format (Markdown, plain text), named as such
    rather than by the first complaint about its first block."""
    lines = text.split("\n")
    if any(line.count("\t") == len(COLUMNS) - 1 and not line.startswith("#") for line in lines):
        return
    first = next((n for n, line in enumerate(lines, start=1) if line.strip()), None)
    if first is not None:
        raise TreebankError("not CoNLL-U: no line has the 10 tab-separated columns of a word "
                            f"({' '.join(COLUMNS)})", path=path, line=first)


def read_conllu(path_or_file: PathOrFile, on_error: Literal["raise", "skip"] = "raise",
                name: str | None = None) -> list[DependencyTree]:
    """Read a CoNLL-U file into dependency trees (see ``read_conllu_with_report``).

    Args:
        path_or_file: a path, or an open text or binary file.
        on_error: ``"raise"`` or ``"skip"`` (malformed sentences left out, one warning logged;
            use ``read_conllu_with_report`` to get the errors).
        name: the file name used in error messages.

    Returns:
        The sentences in file order.
    """
    return read_conllu_with_report(path_or_file, on_error, name)[0]


def _field(value: str, what: str, tree: DependencyTree, word: int | None,
           tabs_ok: bool = False) -> str:
    if not value.strip() or ("\t" in value and not tabs_ok) or "\n" in value or "\r" in value:
        where = "" if word is None else f" of word {word}"
        raise InputError(f"{what}{where} is blank or holds a tab or line break: {value!r}",
                         sent_id=tree.sent_id)
    return value


def to_conllu(tree: DependencyTree) -> str:
    """Format one tree as a CoNLL-U sentence block (ending with its blank line).

    Comments come from ``metadata["comments"]`` in their order, with ``# sent_id`` and
    ``# text`` taken from the tree's fields; columns the tree lacks are written as ``_``.

    Raises:
        InputError: a field is blank or holds a tab or line break.
    """
    n = len(tree)
    meta = tree.metadata
    lines = []
    comments = list(meta.get("comments", []))
    keys = {key for key, _ in comments}
    fields = {"sent_id": tree.sent_id, "text": tree.text}
    for key in ("text", "sent_id"):
        if key not in keys and fields[key] is not None:
            comments.insert(0, (key, fields[key]))
    for key, value in comments:
        if key in fields:
            if fields[key] is None and value is not None:
                continue  # the field was cleared after reading
            value = fields[key]
        comment = f"# {key}" if value is None else f"# {key} = {value}"
        lines.append(_field(comment, "comment", tree, None, tabs_ok=True))  # read back as one comment
    extra = {key: meta.get(key) or ["_"] * n for key in _EXTRA_COLUMNS}
    multiword = {first: (last, form, misc) for first, last, form, misc
                 in meta.get("multiword_tokens", [])}
    empty_nodes = meta.get("empty_nodes", [])
    lines += [_field(raw, "empty node", tree, None, True) for after, raw in empty_nodes
              if after == 0]
    for i in range(1, n + 1):
        if i in multiword:
            last, form, misc = multiword[i]
            lines.append("\t".join([f"{i}-{last}", _field(form, "multiword token", tree, i)]
                                   + ["_"] * 7 + [_field(misc, "MISC", tree, i)]))
        columns = [str(i), tree.words[i - 1], extra["lemma"][i - 1], tree.upos[i - 1],
                   tree.xpos[i - 1], extra["feats"][i - 1], str(int(tree.heads[i - 1])),
                   tree.deprels[i - 1], extra["deps"][i - 1], extra["misc"][i - 1]]
        lines.append("\t".join(_field(c, name, tree, i) for c, name in zip(columns, COLUMNS)))
        lines += [_field(raw, "empty node", tree, None, True) for after, raw in empty_nodes
                  if after == i]
    return "\n".join(lines) + "\n\n"


def write_conllu(trees: Iterable[DependencyTree], path_or_file: PathOrFile) -> None:
    """Write trees as CoNLL-U, so that ``read_conllu`` gives them back equal.

    Args:
        trees: the sentences.
        path_or_file: a path (written as UTF-8), or an open text or binary file.

    Raises:
        InputError: a field is blank or holds a tab or line break.
    """
    text = "".join(to_conllu(tree) for tree in trees)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    elif isinstance(path_or_file, (io.RawIOBase, io.BufferedIOBase)):
        path_or_file.write(text.encode("utf-8"))
    else:  # (a text file)
        cast(IO[str], path_or_file).write(text)
