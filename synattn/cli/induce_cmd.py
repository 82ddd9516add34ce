"""``synattn induce``: unsupervised constituency trees from a Tree Transformer run (docs/methods.md §3).

  synattn induce --run runs/tree_transformer_mlm -i sentences.txt -o trees.txt
  synattn induce --run runs/tree_transformer_mlm --split test --gold test.trees

The model is a run of a config with ``encoder.constituent: true`` (a masked LM, or the encoder of a
translation model). Every layer's link probabilities are decoded top-down into a tree per
sentence (threshold and minimum layer as in docs/methods.md §3), written bracketed, one per line. Trees are
over words: the link between two words is the model's link between the last piece of the first
and the first piece of the second. Input text (``-i``) is one sentence per line, split into words
as the run's dataset was: at whitespace (PTB style) for a dataset of given trees or pre-tokenised
text, by its spaCy pipeline for one that ``prepare`` parsed from raw text (``--pretokenized``
keeps whitespace-separated tokens whatever the dataset). A model trained on language-model text
(lowercased, no punctuation, numbers as N, as the tree-transformer study's) should read text made
the same way; a ``--split`` of the run's prepared dataset uses the words the dataset was prepared
with (rare words included, not ``<unk>``). Brackets inside words are written ``-LRB-``/``-RRB-``,
as in the Penn Treebank. A sentence whose links all exceed the threshold from the minimum layer up
is one flat constituent; the command says on stderr how many such trees it wrote and the lowest
link (a model after too little training has links near 1 everywhere).

With ``--gold`` (bracketed trees, one per sentence, e.g. the PTB's with POS tags), unlabeled
bracket F1 without punctuation (single-word and whole-sentence spans excluded) is printed,
sentence-averaged and corpus-level, next to right-branching, left-branching, random and flat
("no brackets": the floor of F1's conventions) trees.
"""

from __future__ import annotations

import argparse
import json
import sys

from synattn.cli.checks import BAD_LINES, add_max_len_argument, check_lengths, check_vocabulary, resolve_min_layer
from synattn.cli.common import (
    add_pretokenized_argument,
    add_run_arguments,
    load,
    run_inputs,
    split_sentences,
    text_sentences,
    write_aligned,
)
from synattn.cli.options import float_in, nonnegative_int, positive_int, split_name
from synattn.cli.paths import check_apart, input_file, output_file
from synattn.data.sentences import Sentences
from synattn.errors import InputError
from synattn.evaluate.induction import check_constituent, flat_note, induce_sentences, sentence_links, source_request
from synattn.io import atomic_write
from synattn.trees.constituency import read_brackets, to_brackets
from synattn.trees.induce import BASELINES, score_induced
from synattn.trees.metrics import BracketScores


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("induce", help="Tree Transformer trees (and bracket F1 against gold)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--input", help="text file, one sentence per line")
    source.add_argument("--split", type=split_name, help="a split of the run's prepared dataset")
    add_pretokenized_argument(p)
    p.add_argument("-o", "--output", help="trees, one per line (default: standard output)")
    p.add_argument("--gold", help="gold bracketed trees, one per sentence: print bracket F1")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random-tree baseline")
    p.add_argument("--json", help="also write the F1 scores as JSON here")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help=f"{BAD_LINES}: stop (default) or leave them out (empty output lines)")
    add_decoding_arguments(p)
    p.set_defaults(func=run)


def add_decoding_arguments(p: argparse.ArgumentParser, skippable: bool = True) -> None:
    """``--threshold``, ``--min-layer``, ``--original-rule``, ``--batch-size``, ``--max-len`` (shared with
    ``synattn viz``, which has no ``--on-error``: ``skippable`` False)."""
    p.add_argument("--threshold", type=float_in(0.0, 1.0), default=0.8,
                   help="a split point whose link exceeds it is not trusted at that layer (0.8)")
    p.add_argument("--min-layer", type=positive_int, default=None,
                   help="lowest layer decoding goes down to, counted from 1 at the bottom (default 3, "
                        "or the top layer of a shallower encoder)")
    p.add_argument("--original-rule", action="store_true",
                   help="also the public Tree Transformer code's rule: after a split, a part whose links all "
                        "exceed 0.7 is decoded one layer lower (off: the paper's decoding)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per forward pass")
    add_max_len_argument(p, skippable)


def induced_trees(model, sentences: Sentences, args: argparse.Namespace, min_layer: int) -> list:
    """The trees of :func:`add_decoding_arguments`' decoding, saying on stderr why trees are flat
    when no link allowed a split (``synattn induce`` and ``viz``)."""
    links = sentence_links(model, sentences, args.batch_size)
    if note := flat_note(links, args.threshold, min_layer):
        print(note, file=sys.stderr)
    return induce_sentences(model, sentences, args.threshold, min_layer,
                            descend_above=0.7 if args.original_rule else None, links=links)


def format_scores(scores: dict[str, BracketScores]) -> str:
    """A table of sentence-averaged and corpus bracket F1 (in %)."""
    names = {"induced": "tree transformer", **{b: b for b in BASELINES}}
    first = next(iter(scores.values()))
    lines = [f"unlabeled bracket F1 without punctuation, {first.n_sentences} sentences",
             f"{'':18} {'sentence F1':>11} {'corpus F1':>9}"]
    lines += [f"{names[k]:18} {100 * v.sentence_f1:11.1f} {100 * v.f1:9.1f}" for k, v in scores.items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.json and not args.gold:
        raise InputError("--json writes F1 scores, which need --gold", args.json)
    for path, option in ((args.input, "-i"), (args.gold, "--gold")):
        if path is not None:
            input_file(path, option)
    output_file(args.output, "-o")
    output_file(args.json, "--json")
    check_apart({"-o": args.output, "--json": args.json}, {"-i": args.input, "--gold": args.gold, **run_inputs(args)})
    model, exp, data = load(args)
    check_constituent(model, args.run)
    min_layer = resolve_min_layer(model, args.min_layer)
    check_vocabulary(model, exp.data, data, args.split)
    if args.split:
        sentences = split_sentences(data, args.split)
    else:
        sentences = text_sentences(data, args.input, bool(source_request(model).src), args.on_error,
                                   pretokenized=args.pretokenized or None, max_len=args.max_len)
        if not sentences.total:  # as translate: an empty output would look like the trees of nothing
            raise InputError("no sentences to induce trees for (the input is empty)", args.input)
    check_lengths(sentences, args.max_len, args.on_error, args.input or f"{data}/{args.split}")
    gold = read_brackets(args.gold) if args.gold else None  # a bad gold file stops before the work
    if gold is not None and len(gold) != sentences.total:
        raise InputError(f"{len(gold)} gold trees for {sentences.total} sentences", args.gold)
    trees = induced_trees(model, sentences, args, min_layer)
    write_aligned(args.output, sentences.total, sentences.numbers, [to_brackets(t) for t in trees])
    if gold is not None:
        scores = score_induced(trees, [gold[number - 1] for number in sentences.numbers], args.seed, args.gold)
        print(format_scores(scores), file=sys.stderr)
        if args.json:
            with atomic_write(args.json) as f:
                json.dump({k: {"sentence_f1": v.sentence_f1, "f1": v.f1, "precision": v.precision,
                               "recall": v.recall, "sentences": v.n_sentences} for k, v in scores.items()},
                          f, indent=1)
    return 0
