"""``synattn translate``: beam-search translation of a text file (or a prepared split) with a run.

  synattn translate --run runs/tree_distance -i input.en -o output.fr --beam 5
  synattn translate --run runs/baseline --split test -o test.hyp

When the model's encoder reads source trees (tree-relative labels, specialized heads), the input is
parsed with the spaCy pipeline the dataset was prepared with; supervised heads need no parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from synattn.data.batching import PreparedDataset
from synattn.data.text import SkipReport, read_lines
from synattn.evaluate.runner import load_run
from synattn.generate.translate import Translator
from synattn.io import atomic_write


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text with a trained run (beam search)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run directory of 'synattn train'")
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint directory")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--input", help="text file, one sentence per line")
    source.add_argument("--split", help="translate a split of the run's prepared dataset")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.add_argument("--data", help="prepared dataset folder (default: the run's)")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's eval.beam; 1 = greedy)")
    p.add_argument("--length-penalty", type=float, default=None, help="length normalisation exponent")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
    p.add_argument("--pretokenized", action="store_true", help="input tokens are separated by whitespace")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="empty or non-UTF-8 input lines: stop (default) or translate them as empty lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model, exp, checkpoint = load_run(args.run, args.checkpoint)
    ev = exp.eval
    data = args.data or exp.data
    translator = Translator(model, data, args.beam or ev.beam,
                            ev.length_penalty if args.length_penalty is None else args.length_penalty,
                            ev.max_len_a, ev.max_len_b, args.batch_size or ev.batch_size)
    print(f"translating with {checkpoint}", file=sys.stderr)
    if args.split:
        dataset = PreparedDataset(data, args.split)
        examples = [dataset[i] for i in range(len(dataset))]
        total = len(examples)
        keep = list(range(total))
    else:
        report = SkipReport()
        lines = read_lines(args.input, on_error=args.on_error, report=report)
        if len(report):
            print(report.summary(args.input), file=sys.stderr)
        trees = [None] * len(lines)
        if translator.needs_trees:
            from synattn.data.parsing import parse

            model_name = json.loads((Path(data) / "manifest.json").read_text())["config"]["src_model"]
            trees = list(parse([t for _, t in lines], model_name, pretokenized=args.pretokenized))
        examples = [translator.encode(tree.words if tree else text.split(), tree)
                    for (_, text), tree in zip(lines, trees)]
        total = sum(1 for _ in open(args.input, "rb"))
        keep = [number - 1 for number, _ in lines]
    hypotheses = translator.translate(examples, show_progress=True)
    out = [""] * total
    for i, hyp in zip(keep, hypotheses):
        out[i] = hyp
    text = "".join(h + "\n" for h in out)
    if args.output:
        with atomic_write(args.output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
