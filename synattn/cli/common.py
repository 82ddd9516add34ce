"""Helpers the commands that read a trained run share: run arguments, loading, input sentences,
and output aligned with the input's lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from synattn.cli.paths import input_folder
from synattn.config_io import parse_yaml
from synattn.data.sentences import Sentences
from synattn.errors import InputError, SynattnError
from synattn.evaluate.runner import load_run
from synattn.io import atomic_write
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
    (``RUN/vocab``, :mod:`synattn.runs`; :func:`split_sentences` finds the dataset from it),
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


def split_sentences(data: Path, split: str, indices: Sequence[int] | None = None) -> Sentences:
    """:meth:`Sentences.from_split` of ``data``, the folder :func:`load` returns: for a run's
    ``vocab`` folder, the run's dataset (once checked against the run's fingerprint)."""
    if data.name == VOCAB and run_vocab(data.parent) == data:
        data = dataset_of(data.parent)
    return Sentences.from_split(data, split, indices)


def text_sentences(data: Path, path: str, needs_trees: bool, on_error: str = "raise", line: int | None = None,
                   pretokenized: bool | None = None, max_len: int | None = None) -> Sentences:
    """:meth:`Sentences.from_text`, saying on stderr which lines were left out."""
    sentences = Sentences.from_text(data, path, needs_trees, on_error, line, pretokenized, max_len)
    if len(sentences.skipped):
        print(sentences.skipped.summary(path), file=sys.stderr)
    return sentences


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
