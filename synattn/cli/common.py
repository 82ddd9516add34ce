"""Helpers the commands that read a trained run share: run arguments, loading, input sentences,
and output aligned with the input's lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from synattn.data.batching import PreparedDataset, pieces_by_word
from synattn.data.prepare import encode_sentence
from synattn.data.prepared import PreparedData
from synattn.cli.paths import input_folder
from synattn.data.text import SkipReport, read_lines
from synattn.errors import InputError, SynattnError
from synattn.evaluate.runner import load_run
from synattn.io import atomic_write
from synattn.models.config_io import parse_yaml
from synattn.runs import VOCAB, check_dataset, dataset_of, run_fingerprint, run_vocab
from synattn.train.checkpoint import resolve_checkpoint


def add_pretokenized_argument(p: argparse.ArgumentParser) -> None:
    """``--pretokenized`` of the commands reading text with a run (``translate``, ``induce``, ``viz``)."""
    p.add_argument("--pretokenized", action="store_true",
                   help="input tokens are separated by whitespace and kept (default: raw text is split into "
                        "words as the dataset's source was: by its spaCy pipeline when prepare parsed raw text)")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """``--run``, ``--checkpoint``, ``--data`` (shared with ``synattn viz``)."""
    p.add_argument("--run", required=True, help="run directory of 'synattn train'")
    p.add_argument("--checkpoint", default="best",
                   help="best (falls back to last when the run never validated), last, a checkpoint of the run "
                        "(ckpt_000500, in RUN/checkpoints or RUN/snapshots) or a checkpoint folder")
    p.add_argument("--data", help="prepared dataset folder (default: the run's)")


def run_inputs(args: argparse.Namespace) -> dict[str, str | None]:
    """What a command reading a run reads, for :func:`synattn.cli.paths.check_apart`: the run,
    ``--data`` and the dataset the run was trained on (by its fingerprint, else its config)."""
    dataset = None
    try:
        saved = run_fingerprint(args.run)
        if saved is not None:
            dataset = saved.get("path")
        else:
            dataset = parse_yaml((Path(args.run) / "config.yaml").read_text(encoding="utf-8"))["experiment"]["data"]
    except (SynattnError, OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no run there, or a damaged one: loading it says so
    return {"--run": args.run, "--data": args.data,
            "the run's dataset": dataset if isinstance(dataset, str) else None}


def load(args: argparse.Namespace):
    """The run's model (eval mode), experiment config and vocabulary folder: ``--data`` (checked
    against the run's dataset fingerprint), else the run's own copy of its tokenizers and labels
    (``RUN/vocab``, :mod:`synattn.runs`; :meth:`Sentences.from_split` finds the dataset from it),
    else (runs of older versions) the dataset folder of the run's config."""
    input_folder(args.run, "--run")
    if args.data is not None:
        input_folder(args.data, "--data")
    which = args.checkpoint
    if which == "best" and resolve_checkpoint(args.run, "best") is None:
        which = "last"
    try:
        model, exp, checkpoint = load_run(args.run, which)
    except FileNotFoundError as err:
        raise InputError(str(err), args.run) from None
    print(f"using {checkpoint}", file=sys.stderr)
    if args.data:
        check_dataset(args.run, args.data)
        return model.eval(), exp, Path(args.data)
    return model.eval(), exp, run_vocab(args.run) or Path(exp.data)


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
        """Sentences of a prepared split (all, or ``indices``); words decoded from their pieces.
        ``data`` may be a run's ``vocab`` folder: the run's dataset is then used, once checked."""
        if data.name == VOCAB and run_vocab(data.parent) == data:
            data = dataset_of(data.parent)
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
        try:
            lines = dataset.text("src")
        except OSError:
            lines = None
        words = []
        for i, e in zip(indices, examples):
            count = int(e["src_word"].max()) + 1 if len(e["src_word"]) else 0
            tokens = lines[i].split() if lines is not None and i < len(lines) else []
            if len(tokens) != count:  # raw text tokenised by the parser: the words from their pieces
                tokens = [sp.decode(ids.tolist()) for ids in pieces_by_word(e["src_ids"], e["src_word"])]
            words.append(tokens)  # the prepared words themselves: rare words are not <unk> (⁇)
        return cls(examples, words, [i + 1 for i in indices], len(dataset))

    @classmethod
    def from_text(cls, data: Path, path: str, needs_trees: bool, on_error: str = "raise",
                  line: int | None = None, pretokenized: bool | None = None) -> Sentences:
        """Sentences of a text file (all lines, or the 0-based ``line`` alone), parsed when
        ``needs_trees`` with the spaCy pipeline the dataset was prepared with. With
        ``pretokenized`` the words are the whitespace-separated tokens (kept by the parser);
        without, raw text is tokenised by the parser, as ``prepare`` does; None (default): as the
        dataset's source words were made (:meth:`PreparedData.word_tokenizer`), so that
        ``servants.`` is the two words ``servants .`` wherever the training text had them so."""
        prepared = PreparedData(data)
        manifest, labels = prepared.manifest, prepared.labels
        sp = prepared.tokenizer("src")
        word_tokenizer = prepared.word_tokenizer("src")
        if pretokenized is None:
            pretokenized = word_tokenizer is None
        report = SkipReport()
        # one chosen line: the others may be anything (an empty line elsewhere is not its problem)
        lines = read_lines(path, on_error="skip" if line is not None else on_error, report=report)
        if line is not None:
            lines = [(number, text) for number, text in lines if number == line + 1]
            cause = dict(report.skipped).get(line + 1)
            if cause is not None:
                raise InputError(f"line {line + 1} (0-based index {line}): {cause}", path)
            if not lines:
                raise InputError(f"no sentence at line {line + 1} (0-based index {line})", path)
        elif len(report):
            print(report.summary(path), file=sys.stderr)
        words = [text.split() for _, text in lines]
        trees = [None] * len(lines)
        if needs_trees:
            from synattn.data.parsing import parse

            trees = list(parse([text for _, text in lines], manifest["config"]["src_model"],
                               pretokenized=pretokenized))
            words = [tree.words for tree in trees]
        elif not pretokenized:
            from synattn.data.parsing import tokenize

            words = tokenize([text for _, text in lines], word_tokenizer or manifest["config"]["src_model"])
        examples = [encode_sentence("src", w, sp, labels, tree) for w, tree in zip(words, trees)]
        with open(path, "rb") as f:
            total = sum(1 for _ in f)
        return cls(examples, words, [number for number, _ in lines], total)


def write_aligned(output: str | None, total: int, numbers: Sequence[int], texts: Sequence[str]) -> None:
    """Write one line per input line (``total``), ``texts[k]`` at 1-based line ``numbers[k]`` and
    empty lines where an input line was skipped; to ``output`` (atomically) or standard output."""
    lines = [""] * total
    for number, text in zip(numbers, texts):
        lines[number - 1] = text
    out = "".join(line + "\n" for line in lines)
    if output:
        with atomic_write(output) as f:
            f.write(out)
    else:
        sys.stdout.write(out)
