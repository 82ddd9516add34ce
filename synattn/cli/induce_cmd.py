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
from dataclasses import replace

import numpy as np
import torch

from synattn.cli.checks import add_max_len_argument, check_lengths, check_vocabulary, resolve_min_layer
from synattn.cli.common import (Sentences, add_pretokenized_argument, add_run_arguments, load, run_inputs,
                                write_aligned)
from synattn.cli.options import float_in, nonnegative_int, positive_int, split_name
from synattn.cli.paths import check_apart, input_file, output_file
from synattn.data.batching import SyntaxRequest, collate_examples
from synattn.errors import InputError
from synattn.io import atomic_write
from synattn.models import EncoderDecoderTransformer, MaskedLM
from synattn.train.tasks import syntax_request_for
from synattn.trees.constituency import read_brackets, to_brackets
from synattn.trees.induce import BASELINES, induce_tree, no_split, score_induced, word_links
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
                   help="empty or non-UTF-8 input lines: stop (default) or leave them out (empty output lines)")
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


def source_request(model) -> SyntaxRequest:
    """The source-side syntax the model's encoder reads."""
    request = syntax_request_for(model.config)
    return replace(request, tgt=frozenset())


def encoder_outputs(model, batch, need_weights: bool = False):
    """The encoder's extras (losses, attentions, constituent links) on a batch's sources."""
    if isinstance(model, MaskedLM):
        return model(batch.src, syntax=batch.src_syntax, need_weights=need_weights)
    if isinstance(model, EncoderDecoderTransformer):
        return model.encode(batch.src, batch.src_syntax, need_weights)[2]
    raise InputError(f"{type(model).__name__} has no encoder; induce and viz read an encoder's attention")


def check_constituent(model, run: str) -> None:
    """Raises ``InputError`` unless the model's encoder has constituent attention."""
    encoder = getattr(model.config, "encoder", None)
    if encoder is None or not encoder.constituent:
        raise InputError("the model's encoder has no constituent attention (train a config with "
                         "model.encoder.constituent: true, e.g. configs/tree_transformer_mlm.yaml)", run)


@torch.no_grad()
def constituent_links(model, sentences: Sentences, batch_size: int = 32) -> list[np.ndarray]:
    """Per sentence, the encoder's link probabilities between adjacent pieces ``[layers, pieces − 1]``."""
    request = source_request(model)
    device = next(model.parameters()).device
    order = np.argsort([len(e["src_ids"]) for e in sentences.examples], kind="stable")
    out: list[np.ndarray] = [np.zeros(0)] * len(order)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = collate_examples([sentences.examples[i] for i in chunk], request).to(device)
        links = encoder_outputs(model, batch).constituent_links["encoder"].float().cpu().numpy()  # [B, L, n − 1]
        for row, i in enumerate(chunk):
            pieces = len(sentences.examples[i]["src_ids"])
            out[i] = links[row, :, batch.src_offset:batch.src_offset + pieces - 1]  # not the <s> link
    return out


def induce_sentences(model, sentences: Sentences, threshold: float = 0.8, min_layer: int = 3,
                     batch_size: int = 32, descend_above: float | None = None, explain_flat: bool = False) -> list:
    """The induced word-level tree of every sentence (``descend_above``: see ``induced_spans``);
    ``explain_flat`` says on stderr why trees are flat when no link allowed a split."""
    links = [word_links(a, e["src_word"]) for a, e in zip(constituent_links(model, sentences, batch_size),
                                                          sentences.examples)]
    if explain_flat and (note := flat_note(links, threshold, min_layer)):
        print(note, file=sys.stderr)
    return [induce_tree(a, words, threshold, min_layer, descend_above=descend_above)
            for a, words in zip(links, sentences.words)]


def flat_note(links: list[np.ndarray], threshold: float, min_layer: int) -> str | None:
    """A note for the sentences of three or more words decoded without any split (every word link
    ``[layers, words − 1]`` from ``min_layer`` up above ``threshold``), or None when there are none."""
    long = [a for a in links if a.shape[1] >= 2]
    flat = [a for a in long if no_split(a, threshold, min_layer)]
    if not flat:
        return None
    lowest = min(float(a[min(min_layer, a.shape[0]) - 1:].min()) for a in flat)
    return (f"note: {len(flat)} of {len(long)} sentences of three or more words are flat trees: every link from "
            f"layer {min_layer} up is above --threshold {threshold:g} (the lowest {lowest:.3f}), so no split was "
            "made; the model's links do not separate words yet (too little training?)")


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
        sentences = Sentences.from_split(data, args.split)
    else:
        sentences = Sentences.from_text(data, args.input, bool(source_request(model).src), args.on_error,
                                        pretokenized=args.pretokenized or None)
        if not sentences.total:  # as translate: an empty output would look like the trees of nothing
            raise InputError("no sentences to induce trees for (the input is empty)", args.input)
    check_lengths(sentences, args.max_len, args.on_error, args.input or f"{data}/{args.split}")
    gold = read_brackets(args.gold) if args.gold else None  # a bad gold file stops before the work
    if gold is not None and len(gold) != sentences.total:
        raise InputError(f"{len(gold)} gold trees for {sentences.total} sentences", args.gold)
    trees = induce_sentences(model, sentences, args.threshold, min_layer, args.batch_size,
                             descend_above=0.7 if args.original_rule else None, explain_flat=True)
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
