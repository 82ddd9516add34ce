"""Checks the commands that read a trained run make before they spend time on it: the model
fits the command, ``--data`` has the run's vocabulary, inputs are not longer than ``--max-len``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from synattn.cli.options import positive_int
from synattn.data.prepared import PreparedData
from synattn.data.text import MAX_LINE_CHARS
from synattn.data.validate import check_dataset, check_manifest
from synattn.errors import InputError, UsageError
from synattn.io import file_digest
from synattn.runs import VOCAB, dataset_of, run_vocab

DEFAULT_MAX_LEN = 1024
BAD_LINES = (f"empty, non-UTF-8 or too long (--max-len, or more than {MAX_LINE_CHARS:,} characters) input lines, "
             "or lines holding a control character")
"""The input lines ``--on-error`` of ``translate`` and ``induce`` is about (:func:`synattn.data.text.line_problem`)."""


def add_max_len_argument(p: argparse.ArgumentParser, skippable: bool = True) -> None:
    """``--max-len``; ``skippable``: the command has ``--on-error skip`` to leave a longer sentence out."""
    p.add_argument("--max-len", type=positive_int, default=DEFAULT_MAX_LEN,
                   help=f"longest input sentence in subword pieces (default {DEFAULT_MAX_LEN}); a longer "
                        "one stops the command" + (", or is left out with --on-error skip" if skippable else ""))


def _digest(path: Path) -> str | None:
    try:
        return file_digest(path)
    except OSError:
        return None


def check_vocabulary(model, trained_on: str | Path, data: str | Path, split: str | None = None) -> None:
    """Refuse a damaged dataset folder (:func:`synattn.data.validate.check_dataset`, with the
    arrays of ``split`` when given), or one whose vocabulary is not the one ``model`` was trained with.

    The sentencepiece models of ``data`` must be byte-identical to those of ``trained_on`` (the
    run's dataset) when that folder still exists; the vocabulary sizes must match the model's.
    """
    data, trained_on = Path(data), Path(trained_on)
    if split is not None and data.name == VOCAB and run_vocab(data.parent) == data:
        data = dataset_of(data.parent)  # a run's own copy of its vocabulary has no splits: its dataset has
    manifest = check_dataset(data, split)
    config = model.config
    sizes = {"src": getattr(config, "src_vocab_size", getattr(config, "vocab_size", None)),
             "tgt": getattr(config, "tgt_vocab_size", None)}
    if getattr(config, "synattn_text", None) is not None:  # reads the data in its own tokenizer's pieces
        sizes["src"] = None
    for side, expected in sizes.items():
        if expected is not None and side not in manifest["spm"]:
            raise InputError(f"--data: the dataset has no {side} side, which the model reads", str(data))
    for side in manifest["spm"]:
        expected = sizes.get(side)
        have = manifest.get("vocab_size", {}).get(side)
        if expected is not None and have is not None and have != expected:
            raise InputError(f"--data: the {side} vocabulary has {have} pieces but the model was trained "
                             f"with {expected} (a dataset prepared separately cannot be used with this run)",
                             str(data))
    if data.resolve() == trained_on.resolve() or not PreparedData.is_prepared(trained_on):
        return
    try:
        theirs = check_manifest(trained_on)
    except InputError:
        return
    for side, name in manifest["spm"].items():
        other = theirs["spm"].get(side)
        if other is not None and _digest(data / name) != _digest(trained_on / other):
            raise InputError(f"--data: its {side} sentencepiece model differs from that of {trained_on}, "
                             f"which the run was trained on", str(data))


def require_model(model, kinds: tuple[type, ...], run: str, command: str) -> None:
    """Refuse a run whose model ``command`` cannot use (e.g. translating with a masked LM)."""
    if not isinstance(model, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise UsageError(f"--run {run}: {command} needs a model of kind {names}, but this run trained a "
                         f"{type(model).__name__}")


def check_lengths(sentences, max_len: int, on_error: str | None, source: str) -> None:
    """Leave out (``on_error="skip"``, with a warning) or refuse sentences longer than ``max_len``
    pieces (``None``: a command without ``--on-error``, whose error does not advise it);
    ``sentences`` (:class:`synattn.data.sentences.Sentences`) is changed in place."""
    keep = []
    for k, example in enumerate(sentences.examples):
        pieces = len(example["src_ids"])
        if pieces <= max_len:
            keep.append(k)
            continue
        if on_error != "skip":
            way_out = "" if on_error is None else ", or use --on-error skip to leave it out"
            raise InputError(f"sentence has {pieces} subword pieces, more than --max-len {max_len} (raise "
                             f"--max-len{way_out})", source, sentences.numbers[k])
        print(f"{source}:{sentences.numbers[k]}: left out: {pieces} pieces, more than --max-len {max_len}",
              file=sys.stderr)
    if len(keep) < len(sentences.examples):
        sentences.examples = [sentences.examples[k] for k in keep]
        sentences.words = [sentences.words[k] for k in keep]
        sentences.numbers = [sentences.numbers[k] for k in keep]


def resolve_min_layer(model, min_layer: int | None, default: int = 3) -> int:
    """``--min-layer`` (1 = the bottom layer of the encoder): the given layer, which must exist, or
    ``default`` lowered to the encoder's top layer when the option was not given."""
    encoder = getattr(model.config, "encoder", None)
    layers = getattr(encoder, "layers", None)
    if not isinstance(layers, int):
        return default if min_layer is None else min_layer
    if min_layer is None:
        return min(default, layers)
    if min_layer > layers:
        raise UsageError(f"--min-layer {min_layer}: the encoder has {layers} layer(s); use 1..{layers}")
    return min_layer
