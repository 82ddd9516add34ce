"""The project and write steps of ``prepare`` (:mod:`synattn.data.prepare`): every word segmented on
its own, the word trees projected onto the pieces (docs/methods.md §2), and each split written as
memory-mapped arrays (:mod:`synattn.data.indexed`) with its text, first into ``OUT/.building``, then
moved into place.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from synattn.data.encoding import encode_sentence
from synattn.data.indexed import write_field
from synattn.data.reading import Side
from synattn.io import atomic_write, real_folder, remove_path
from synattn.progress import progress


def write_splits(out: Path, data: dict[str, dict[str, Side]], sides: tuple[str, ...], models: dict,
                 names: dict[str, str], labels: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Writes every split to ``out/SPLIT`` and the label vocabularies to ``out/labels.json``;
    returns each split's sizes (sentences, pieces by side). A full disk or an interruption leaves
    no half-built arrays behind."""
    building = out / ".building"
    try:
        sizes = _build_splits(out, building, data, sides, models, names, labels)
    finally:
        with contextlib.suppress(OSError):
            remove_path(building)
    with atomic_write(out / "labels.json") as f:
        json.dump(labels, f, indent=1)
    return sizes


def _build_splits(out: Path, building: Path, data: dict[str, dict[str, Side]], sides: tuple[str, ...],
                  models: dict, names: dict[str, str], labels: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Writes every split into ``building`` and moves it to ``out/SPLIT`` (replacing what was
    there; a link there is removed, never followed); returns the splits' sizes."""
    remove_path(building)  # of a killed prepare (a link there is removed, never followed)
    real_folder(building)
    sizes: dict[str, dict[str, int]] = {}
    for split, by_side in data.items():
        folder = building / split
        folder.mkdir()
        for s in sides:
            _write_side(folder, s, by_side[s], models[names[s]], labels, split)
            with atomic_write(folder / f"{s}.txt") as f:  # the text, e.g. BLEU references
                f.writelines(line + "\n" for line in by_side[s].lines)
        sizes[split] = {"sentences": len(by_side["src"].lines),
                        **{f"{s}_pieces": int(sum(np.load(folder / f"{s}_ids.offsets.npy")[-1:]))
                           for s in sides}}
    for split in data:
        target = out / split
        remove_path(target)
        (building / split).rename(target)
    return sizes


_DTYPES = {"upos": np.int16, "deprel": np.int16}


def _write_side(folder: Path, side: str, data: Side, sp, labels: dict[str, list[str]], split: str) -> None:
    """Segment, project and write one side of one split."""
    trees = data.trees
    encoded = [encode_sentence(side, words, sp, labels, trees[k] if trees is not None else None)
               for k, words in enumerate(progress(data.words(), desc=f"{split}.{side}", unit="sent"))]
    for name in encoded[0] if encoded else (f"{side}_ids", f"{side}_word"):
        write_field(folder, name, [e[name] for e in encoded],
                    dtype=_DTYPES.get(name.split("_", 1)[1], np.int32))
