"""``synattn induce``: unsupervised constituency trees from a Tree Transformer run (METHODS §3).

  synattn induce --run runs/tree_transformer_mlm -i sentences.txt -o trees.txt
  synattn induce --run runs/tree_transformer_mlm --split test --gold test.trees

The model is a run of a config with ``encoder.constituent: true`` (a masked LM, or the encoder of a
translation model). Every layer's link probabilities are decoded top-down into a tree per
sentence (threshold and minimum layer as in METHODS §3), written bracketed, one per line. Trees are
over words: the link between two words is the model's link between the last piece of the first
and the first piece of the second. Input text (``-i``) is one sentence per line, its words
separated by whitespace (PTB style); a ``--split`` of the run's prepared dataset uses the words
the dataset was prepared with.

With ``--gold`` (bracketed trees, one per sentence, e.g. the PTB's with POS tags), unlabeled
bracket F1 without punctuation (single-word and whole-sentence spans excluded) is printed,
sentence-averaged and corpus-level, next to right-branching, left-branching and random trees.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

from synattn.data.batching import PreparedDataset, SyntaxRequest, collate_examples
from synattn.data.prepare import encode_sentence
from synattn.data.text import SkipReport, read_lines
from synattn.errors import InputError
from synattn.evaluate.runner import load_run
from synattn.io import atomic_write
from synattn.models import EncoderDecoderTransformer, MaskedLM
from synattn.train.checkpoint import resolve_checkpoint
from synattn.train.tasks import syntax_request_for
from synattn.trees.constituency import read_brackets, to_brackets
from synattn.trees.induce import BASELINES, induce_tree, score_induced, word_links
from synattn.trees.metrics import BracketScores


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("induce", help="Tree Transformer trees (and bracket F1 against gold)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--input", help="text file, one sentence per line, words separated by spaces")
    source.add_argument("--split", help="a split of the run's prepared dataset")
    p.add_argument("-o", "--output", help="trees, one per line (default: standard output)")
    p.add_argument("--gold", help="gold bracketed trees, one per sentence: print bracket F1")
    p.add_argument("--seed", type=int, default=0, help="seed of the random-tree baseline")
    p.add_argument("--json", help="also write the F1 scores as JSON here")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="empty or non-UTF-8 input lines: stop (default) or leave them out (empty output lines)")
    add_decoding_arguments(p)
    p.set_defaults(func=run)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """``--run``, ``--checkpoint``, ``--data`` (shared with ``synattn viz``)."""
    p.add_argument("--run", required=True, help="run directory of 'synattn train'")
    p.add_argument("--checkpoint", default="best",
                   help="best (falls back to last when the run never validated), last, or a checkpoint directory")
    p.add_argument("--data", help="prepared dataset folder (default: the run's)")


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """``--threshold``, ``--min-layer``, ``--batch-size`` (shared with ``synattn viz``)."""
    p.add_argument("--threshold", type=float, default=0.8,
                   help="a split point whose link exceeds it is not trusted at that layer (0.8)")
    p.add_argument("--min-layer", type=int, default=3,
                   help="lowest layer decoding goes down to, counted from 1 at the bottom (3)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")


def load(args: argparse.Namespace):
    """The run's model (eval mode), experiment config and dataset folder."""
    which = args.checkpoint
    if which == "best" and resolve_checkpoint(args.run, "best") is None:
        which = "last"
    try:
        model, exp, checkpoint = load_run(args.run, which)
    except FileNotFoundError as err:
        raise InputError(str(err), args.run) from None
    print(f"using {checkpoint}", file=sys.stderr)
    return model.eval(), exp, Path(args.data or exp.data)


class Sentences:
    """Encoded source sentences of a run's vocabulary: the model's inputs and their words.

    Attributes:
        examples: the stored fields of each sentence (``src_ids``, ``src_word``, with trees
            ``src_heads`` ...), as ``collate_examples`` takes them.
        words: the words of each sentence.
        numbers: each sentence's 1-based number: its line in the input file (skipped lines
            have none), or its index in the split plus one.
        total: number of input lines (or split sentences).
    """

    def __init__(self, examples: list[dict[str, np.ndarray]], words: list[list[str]],
                 numbers: list[int], total: int):
        self.examples, self.words, self.numbers, self.total = examples, words, numbers, total

    @classmethod
    def from_split(cls, data: Path, split: str, indices: Sequence[int] | None = None) -> Sentences:
        """Sentences of a prepared split (all, or ``indices``); words decoded from their pieces."""
        try:
            dataset = PreparedDataset(data, split)
        except (FileNotFoundError, KeyError) as err:
            raise InputError(str(err).strip('"'), str(data)) from None
        sp = spm.SentencePieceProcessor(model_file=str(data / dataset.manifest["spm"]["src"]))
        indices = range(len(dataset)) if indices is None else indices
        for i in indices:
            if not 0 <= i < len(dataset):
                raise InputError(f"sentence index {i} is outside 0..{len(dataset) - 1}", f"{data}/{split}")
        examples = [dataset[i] for i in indices]
        words = [[sp.decode(ids.tolist()) for ids in _pieces_by_word(e["src_ids"], e["src_word"])]
                 for e in examples]
        return cls(examples, words, [i + 1 for i in indices], len(dataset))

    @classmethod
    def from_text(cls, data: Path, path: str, needs_trees: bool, on_error: str = "raise",
                  line: int | None = None) -> Sentences:
        """Sentences of a text file (whitespace-separated words; all lines, or the 0-based
        ``line`` alone), parsed when ``needs_trees`` with the spaCy pipeline the dataset was
        prepared with (the words are kept)."""
        manifest = json.loads((data / "manifest.json").read_text())
        sp = spm.SentencePieceProcessor(model_file=str(data / manifest["spm"]["src"]))
        labels_path = data / "labels.json"
        labels = json.loads(labels_path.read_text()) if labels_path.exists() else {}
        report = SkipReport()
        lines = read_lines(path, on_error=on_error, report=report)
        if len(report):
            print(report.summary(path), file=sys.stderr)
        if line is not None:
            lines = [(number, text) for number, text in lines if number == line + 1]
            if not lines:
                raise InputError(f"no sentence at line {line + 1} (0-based index {line})", path)
        words = [text.split() for _, text in lines]
        trees = [None] * len(lines)
        if needs_trees:
            from synattn.data.parsing import parse

            trees = list(parse([" ".join(w) for w in words], manifest["config"]["src_model"], pretokenized=True))
        examples = [encode_sentence("src", w, sp, labels, tree) for w, tree in zip(words, trees)]
        with open(path, "rb") as f:
            total = sum(1 for _ in f)
        return cls(examples, words, [number for number, _ in lines], total)


def _pieces_by_word(ids: np.ndarray, word_of_piece: np.ndarray) -> list[np.ndarray]:
    """The piece ids of each word."""
    return np.split(ids, np.flatnonzero(np.diff(word_of_piece)) + 1)


def source_request(model) -> SyntaxRequest:
    """The source-side syntax the model's encoder reads."""
    request = syntax_request_for(model.config)
    return SyntaxRequest(src=request.src, max_distance=request.max_distance,
                         max_traversal=request.max_traversal)


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
            out[i] = links[row, :, :pieces - 1]
    return out


def induce_sentences(model, sentences: Sentences, threshold: float = 0.8, min_layer: int = 3,
                     batch_size: int = 32) -> list:
    """The induced word-level tree of every sentence."""
    links = constituent_links(model, sentences, batch_size)
    return [induce_tree(word_links(a, e["src_word"]), words, threshold, min_layer)
            for a, e, words in zip(links, sentences.examples, sentences.words)]


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
    model, _, data = load(args)
    check_constituent(model, args.run)
    if args.split:
        sentences = Sentences.from_split(data, args.split)
    else:
        sentences = Sentences.from_text(data, args.input, bool(source_request(model).src), args.on_error)
    trees = induce_sentences(model, sentences, args.threshold, args.min_layer, args.batch_size)
    lines = [""] * sentences.total
    for number, tree in zip(sentences.numbers, trees):
        lines[number - 1] = to_brackets(tree)
    text = "".join(line + "\n" for line in lines)
    if args.output:
        with atomic_write(args.output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if args.gold:
        gold = read_brackets(args.gold)
        if len(gold) != sentences.total:
            raise InputError(f"{len(gold)} gold trees for {sentences.total} sentences", args.gold)
        scores = score_induced(trees, [gold[number - 1] for number in sentences.numbers], args.seed, args.gold)
        print(format_scores(scores), file=sys.stderr)
        if args.json:
            with atomic_write(args.json) as f:
                json.dump({k: {"sentence_f1": v.sentence_f1, "f1": v.f1, "precision": v.precision,
                               "recall": v.recall, "sentences": v.n_sentences} for k, v in scores.items()},
                          f, indent=1)
    return 0
