"""``synattn translate``: beam-search translation of a text file (or a prepared split) with a run.

  synattn translate --run runs/tree_distance -i input.en -o output.fr --beam 5
  synattn translate --run runs/baseline --split test -o test.hyp

When the model's encoder reads source trees (tree-relative labels, specialized heads), the input is
parsed with the spaCy pipeline the dataset was prepared with; supervised heads need no parser.
Raw text is split into words as the dataset's source was (by that pipeline's tokenizer when
``prepare`` parsed raw text), or at whitespace with ``--pretokenized``.
The output is text, spaced as the dataset's training text is (``s'en``, ``Hira.``; docs/data.md,
Detokenization), for sacreBLEU against untokenized references; ``--tokens`` writes the tokens.
A translation ends at the end-of-sentence token or at ``--max-len-a`` × source pieces +
``--max-len-b`` pieces (the run's ``eval.max_len_a`` and ``eval.max_len_b``: 1.5 × + 10 by
default), and a warning says when most translations stopped there unfinished (a model trained too
little). Progress goes to stderr: a bar on a terminal, else a line every 30 seconds.
"""

from __future__ import annotations

import argparse

from synattn.cli.checks import BAD_LINES, add_max_len_argument, check_lengths, check_vocabulary, require_model
from synattn.cli.common import (
    add_pretokenized_argument,
    add_run_arguments,
    load,
    run_inputs,
    split_sentences,
    text_sentences,
    write_aligned,
)
from synattn.cli.options import finite_float, float_in, int_in, positive_int, split_name
from synattn.cli.paths import check_apart, input_file, output_file
from synattn.errors import InputError, UsageError
from synattn.generate.translate import Translator
from synattn.models import EncoderDecoderTransformer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text with a trained run (beam search)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--input", help="text file, one sentence per line")
    source.add_argument("--split", type=split_name, help="translate a split of the run's prepared dataset")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.add_argument("--beam", type=positive_int, default=None,
                   help="beam size (default: the run's eval.beam; 1 = greedy)")
    p.add_argument("--length-penalty", type=finite_float, default=None, help="length normalisation exponent")
    p.add_argument("--batch-size", type=positive_int, default=None, help="sentences per batch")
    p.add_argument("--max-len-a", type=float_in(0, 100), default=None,
                   help="a translation has at most A × source pieces + B pieces (default: the run's eval.max_len_a, "
                        "1.5 unless set)")
    p.add_argument("--max-len-b", type=int_in(0, 10_000), default=None,
                   help="B of --max-len-a (default: the run's eval.max_len_b, 10 unless set)")
    add_pretokenized_argument(p)
    p.add_argument("--tokens", action="store_true",
                   help="write the target's tokens separated by spaces, as the model makes them (default: "
                        "text, spaced as the dataset's training text: docs/data.md, Detokenization)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help=f"{BAD_LINES}: stop (default) or leave them out (an empty output line each)")
    add_max_len_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.input is not None:
        input_file(args.input, "-i")
    output_file(args.output, "-o")
    check_apart({"-o": args.output}, {"-i": args.input, **run_inputs(args)})
    model, exp, data = load(args)
    require_model(model, (EncoderDecoderTransformer,), args.run, "translate")
    check_vocabulary(model, exp.data, data, args.split)
    ev = exp.eval
    max_len_a = ev.max_len_a if args.max_len_a is None else args.max_len_a
    max_len_b = ev.max_len_b if args.max_len_b is None else args.max_len_b
    if max_len_a == 0 and max_len_b < 1:
        raise UsageError(f"--max-len-a {max_len_a:g} and --max-len-b {max_len_b} allow no target piece")
    translator = Translator(model, data, args.beam or ev.beam,
                            ev.length_penalty if args.length_penalty is None else args.length_penalty,
                            max_len_a, max_len_b, args.batch_size or ev.batch_size, detokenize=not args.tokens)
    if args.split:
        sentences = split_sentences(data, args.split)
    else:
        sentences = text_sentences(data, args.input, translator.needs_trees, args.on_error,
                                   pretokenized=args.pretokenized or None, max_len=args.max_len)
        if not sentences.total:  # as synattn parse: an empty output would look like a translation of nothing
            raise InputError("no sentences to translate (the input is empty)", args.input or "<stdin>")
    check_lengths(sentences, args.max_len, args.on_error, args.input or f"{data}/{args.split}")
    hypotheses = translator.translate(sentences.examples, show_progress=True)  # (lines off a terminal)
    write_aligned(args.output, sentences.total, sentences.numbers, hypotheses)
    return 0
