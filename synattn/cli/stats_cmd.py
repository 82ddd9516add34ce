"""``synattn stats``: statistics of a CoNLL-U treebank and of its tree-relation labels."""

from __future__ import annotations

import argparse
from pathlib import Path

from synattn.cli.options import positive_int
from synattn.cli.paths import check_apart, input_file, output_file
from synattn.errors import InputError, UsageError
from synattn.trees.conllu_io import read_conllu_with_report
from synattn.trees.relations import MAX_DISTANCE, MAX_TRAVERSAL, check_label_clips
from synattn.trees.stats import treebank_statistics


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="statistics of a CoNLL-U treebank and its relation labels",
                       description=__doc__)
    p.add_argument("conllu", help="CoNLL-U file")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="what to do with a malformed sentence (default: stop with file and line)")
    p.add_argument("--max-distance", type=positive_int, default=MAX_DISTANCE, help="tree-distance label clip")
    p.add_argument("--max-traversal", type=positive_int, default=MAX_TRAVERSAL, help="traversal label clip")
    p.add_argument("--plot", help="also write label histograms to this PNG")
    p.set_defaults(func=run)


PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".tif", ".tiff", ".webp")
"""Image formats matplotlib writes, by file suffix."""


def run(args: argparse.Namespace) -> int:
    input_file(args.conllu, "conllu")
    check_label_clips(args.max_distance, args.max_traversal, ("--max-distance", "--max-traversal"))
    output_file(args.plot, "--plot")
    check_apart({"--plot": args.plot}, {"conllu": args.conllu})
    if args.plot and Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:  # before the statistics, not after
        raise UsageError(f"--plot {args.plot}: name the image with one of {', '.join(PLOT_SUFFIXES)} "
                         "(its suffix says the format)")
    trees, report = read_conllu_with_report(args.conllu, on_error=args.on_error)
    if not trees:
        raise InputError("no sentences to summarise (" + (f"every sentence was left out: {report.n_skipped} "
                                                          f"malformed; first: {report.skipped[0]})"
                                                          if report.n_skipped else "the file is empty)"), args.conllu)
    stats = treebank_statistics(trees, args.max_distance, args.max_traversal)
    print(stats.format())
    if args.plot:
        from synattn.viz.relations import plot_relation_histograms

        print(f"wrote {plot_relation_histograms({args.conllu: stats.relations}, args.plot)}")
    return 0
