"""Checking a prepared dataset folder before a command reads it: a damaged or hand-edited
``manifest.json``, ``labels.json``, sentencepiece model or array is an :class:`InputError` naming the
file and the problem, instead of an exception deep inside numpy, sentencepiece or torch.

The checks are vectorised (one pass over each array of the split); they do not re-derive the
trees, only that every stored index is inside its range (ids below the vocabulary size, heads
inside their sentence, labels inside their vocabulary).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from synattn.data.prepared import LABELS, MANIFEST
from synattn.errors import InputError, brief

_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise InputError(f"no such folder (from {Path.cwd()}): give the prepared dataset's folder (--data)",
                             str(path.parent)) from None
        raise InputError(f"{path.name} is missing: not a prepared dataset (run 'synattn prepare')",
                         str(path.parent)) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{what} is not valid JSON ({' '.join(str(err).split())[:120]}); prepare the "
                         f"dataset again", str(path)) from None


def check_manifest(folder: str | Path) -> dict:
    """The manifest of ``folder``, checked: splits, sides, sentencepiece file names, sizes."""
    folder = Path(folder)
    path = folder / MANIFEST
    manifest = _json(path, "the manifest")

    def bad(cause: str):
        return InputError(f"{cause}; prepare the dataset again", str(path))

    if not isinstance(manifest, dict):
        raise bad("the manifest is not a JSON object")
    sides = manifest.get("sides")
    if not isinstance(sides, list) or "src" not in sides or not set(sides) <= {"src", "tgt"}:
        raise bad(f"'sides' must be [\"src\"] or [\"src\", \"tgt\"], got {brief(sides)}")
    for key in ("splits", "spm", "vocab_size"):
        if not isinstance(manifest.get(key), dict):
            raise bad(f"'{key}' must be an object, got {brief(manifest.get(key))}")
    for split, sizes in manifest["splits"].items():
        if not _FILE_NAME.fullmatch(split) or split.startswith(".") or not isinstance(sizes, dict):
            raise bad(f"split {brief(split)} is not a plain folder name with its sizes")
    for key in ("trees", "config"):
        if not isinstance(manifest.get(key, {}), dict):
            raise bad(f"'{key}' must be an object, got {brief(manifest.get(key))}")
    detok = manifest.get("detok", {})
    if not isinstance(detok, dict) or not all(side in sides and isinstance(name, str) and _FILE_NAME.fullmatch(name)
                                              for side, name in detok.items()):
        raise bad(f"'detok' must map sides to file names inside the folder, got {brief(detok)}")
    for side in sides:
        name, size = manifest["spm"].get(side), manifest["vocab_size"].get(side)
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
            raise bad(f"spm.{side} must be a file name inside the folder, got {brief(name)}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise bad(f"vocab_size.{side} must be a positive integer, got {brief(size)}")
    return manifest


def check_labels(folder: str | Path) -> dict[str, list[str]]:
    """``labels.json`` of ``folder`` (an empty dict when absent), checked."""
    path = Path(folder) / LABELS
    if not path.exists():
        return {}
    labels = _json(path, "labels.json")
    if not isinstance(labels, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                               for v in labels.values()):
        raise InputError("labels.json must map names to lists of labels; prepare the dataset again", str(path))
    return labels


def load_sentencepiece(folder: str | Path, manifest: dict, side: str):
    """The side's sentencepiece model, checked against the manifest's vocabulary size."""
    import sentencepiece as spm

    path = Path(folder) / manifest["spm"][side]
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as err:
        raise InputError(f"cannot load this sentencepiece model ({' '.join(str(err).split())[:120]})",
                         str(path)) from None
    if sp.get_piece_size() != manifest["vocab_size"][side]:
        raise InputError(f"the model has {sp.get_piece_size()} pieces, the manifest says "
                         f"{manifest['vocab_size'][side]}", str(path))
    return sp


def load_fields(folder: str | Path, split: str) -> dict:
    """The memory-mapped arrays of ``folder/split`` by field name (:class:`IndexedField`); a file
    numpy cannot read (damaged header, truncated data, offsets that do not fit) is an
    :class:`InputError` naming it."""
    from synattn.data.indexed import IndexedField

    where = Path(folder) / split
    fields = {}
    for path in sorted(where.glob("*.data.npy")):
        name = path.name[: -len(".data.npy")]
        try:
            fields[name] = IndexedField(where, name)
        except Exception as err:  # numpy reports a damaged header as ValueError, EOFError, TokenError...
            raise InputError(f"array {name} cannot be read ({' '.join(str(err).split())[:120]}); prepare the "
                             f"dataset again", str(where)) from None
    return fields


def check_fields(fields: dict, manifest: dict, split: str, where: str | Path,
                 labels: dict[str, list[str]] | None = None) -> None:
    """Checks the arrays of a split against each other and the manifest.

    Without ``labels`` only their shapes are checked, which costs O(sentences): every field the
    manifest's sides need is there, 1-D of an integer type, with one count of sentences (the
    manifest's) and the offsets of its side's ``*_ids``. With ``labels`` (the folder's
    ``labels.json``) every stored index is also checked against its range, O(pieces): ids below
    the vocabulary size, heads inside their sentence, tags inside their label vocabulary.
    """
    where = str(where)
    for side in manifest["sides"]:
        for name in (f"{side}_ids", f"{side}_word"):
            if name not in fields:
                raise InputError(f"array {name} is missing; prepare the dataset again", where)
    count = len(fields["src_ids"])
    expected = manifest["splits"][split].get("sentences")
    if isinstance(expected, int) and expected != count:
        raise InputError(f"{count} sentences in the arrays, {expected} in the manifest; prepare the dataset "
                         "again", where)
    for name, field in fields.items():
        side = name.split("_", 1)[0]
        reference = fields.get(f"{side}_ids", field)
        offsets = field.offsets
        if (field.data.ndim != 1 or field.data.dtype.kind not in "iu" or offsets.dtype.kind not in "iu"
                or offsets[0] != 0 or (len(offsets) > 1 and np.diff(offsets).min() < 0)):
            raise InputError(f"array {name} is not a list of integer sequences (damaged dataset?)", where)
        if len(field) != count or not np.array_equal(offsets, reference.offsets):
            raise InputError(f"array {name} does not line up with {side}_ids (damaged dataset?)", where)
    if labels is None:
        return
    spans: dict[str, np.ndarray] = {}  # per side: the length of the sentence of every piece
    for name, field in fields.items():
        side, kind = name.split("_", 1) if "_" in name else (name, "")
        data = np.asarray(field.data)
        if not len(data):
            continue
        if data.min() < 0:
            raise InputError(f"array {name} holds values that are not indices (damaged dataset?)", where)
        if kind in ("heads", "word"):
            if side not in spans:
                spans[side] = np.repeat(field.lengths, field.lengths)
            ok = bool((data <= spans[side]).all() if kind == "heads" else (data < spans[side]).all())
        else:
            limit = {"ids": manifest["vocab_size"].get(side, 0), "upos": len(labels.get(f"{side}_upos", [])),
                     "deprel": len(labels.get(f"{side}_deprels", []))}.get(kind)
            ok = limit is None or bool(data.max() < limit)
        if not ok:
            raise InputError(f"array {name} holds an index outside its range (damaged dataset?)", where)


def check_split(folder: str | Path, split: str, manifest: dict | None = None) -> None:
    """Every array of ``split``: loadable, of one sentence count, every index inside its range
    (:func:`check_fields` with the labels), and its text files of one line per sentence."""
    folder = Path(folder)
    manifest = manifest or check_manifest(folder)
    if split not in manifest["splits"]:
        raise InputError(f"has no split {split!r} (has {', '.join(manifest['splits']) or 'none'})", str(folder))
    fields = load_fields(folder, split)
    check_fields(fields, manifest, split, folder / split, check_labels(folder))
    count = len(fields["src_ids"])
    for side in manifest["sides"]:
        path = folder / split / f"{side}.txt"
        if path.exists():
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as err:
                raise InputError(f"not valid UTF-8 ({err.reason})", str(path)) from None
            if len(lines) != count:
                raise InputError(f"{len(lines)} lines for {count} sentences", str(path))


def check_dataset(folder: str | Path, split: str | None = None) -> dict:
    """The checked manifest of ``folder`` after checking its labels, sentencepiece models and
    (when given) the arrays of ``split``."""
    manifest = check_manifest(folder)
    check_labels(folder)
    for side in manifest["sides"]:
        load_sentencepiece(folder, manifest, side)
    if split is not None:
        check_split(folder, split, manifest)
    return manifest
