"""A prepared dataset folder as one object: its manifest, label vocabularies and sentencepiece
tokenizers, each read once (the splits' arrays are read by :class:`synattn.data.batching.PreparedDataset`).

The folder holds ``manifest.json`` (:data:`MANIFEST`: splits, sides, sentencepiece file names,
vocabulary sizes, which sides have trees), ``labels.json`` (:data:`LABELS`: the POS and
dependency-label vocabularies, when the data was parsed), the sentencepiece models and, for a side
whose text the parser tokenized, ``detok.SIDE.json`` (how its tokens are written as text,
:mod:`synattn.data.detok`).

Example:
    >>> PreparedData.is_prepared("/nonexistent")
    False
"""

from __future__ import annotations

import json
import logging
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from synattn.errors import InputError
from synattn.folders import FolderKind, check_own_folder
from synattn.locks import LOCK_NAME

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
"""The manifest's file name in a prepared folder."""

LABELS = "labels.json"
"""The label vocabularies' file name in a prepared folder."""

MARKER = ".synattn-dataset"  # written first: the folder is (being made into) a prepared dataset


class PreparedData:
    """The folder ``folder`` written by :func:`synattn.data.prepare.prepare`.

    Reading a property that needs a missing or unreadable file raises the ``OSError`` or
    ``ValueError`` of the read; callers turn it into their own one-line error.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    @staticmethod
    def is_prepared(folder: str | Path) -> bool:
        """Whether ``folder`` has a manifest."""
        return (Path(folder) / MANIFEST).is_file()

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    @cached_property
    def manifest(self) -> dict[str, Any]:
        """The parsed ``manifest.json``."""
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    @cached_property
    def labels(self) -> dict[str, list[str]]:
        """The label vocabularies by name (``src_upos``, ``src_deprels``, …); {} when not parsed."""
        path = self.folder / LABELS
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def word_tokenizer(self, side: str) -> str | None:
        """The spaCy pipeline whose tokenizer made ``side``'s words (``prepare`` parsed raw text),
        or None when the words are the whitespace-separated tokens of the input (pre-tokenised
        text, given CoNLL-U, no parse). New text for a run of this dataset is split the same way
        (:meth:`synattn.data.sentences.Sentences.from_text`)."""
        config, source = self.manifest.get("config", {}), self.manifest.get("tree_source", {}).get(side)
        if source in (None, "given CoNLL-U") or config.get("pretokenized") or config.get("corpus") == "ptb":
            return None
        return source

    def tokenizer_path(self, side: str) -> Path:
        """The sentencepiece model of ``side`` (``src`` or ``tgt``)."""
        return self.folder / self.manifest["spm"][side]

    def spacing(self, side: str):
        """How ``side``'s tokens are written as text (a :class:`synattn.data.detok.Spacing`), or None
        when they are written as they are (whitespace-separated input).

        The table ``prepare`` stored (``detok.SIDE.json``); for a folder prepared before those
        tables, one learned from its training split (seconds); None for the vocabulary copy of such
        a folder in a run (``RUN/vocab``), which has no text to learn from.
        """
        from synattn.data.detok import Spacing

        tables = self.manifest.get("detok")
        if tables is not None:
            if side not in tables:
                return None
            try:
                return Spacing.load(self.folder / tables[side])
            except ValueError as err:
                raise InputError(f"{str(err).split(': ', 1)[-1]}; prepare the dataset again",
                                 str(self.folder / tables[side])) from None
        if not (self.folder / "train" / f"{side}.txt").is_file():
            return None
        return _learned_spacing(str(self.folder.resolve()), str(self.manifest.get("key")), side)

    def tokenizer(self, side: str):
        """The sentencepiece processor of ``side``."""
        import sentencepiece as spm

        return spm.SentencePieceProcessor(model_file=str(self.tokenizer_path(side)))


@lru_cache(maxsize=4)
def _learned_spacing(folder: str, key: str, side: str):
    """The spacing of an older folder's side, learned once per process (``key``: the folder's
    settings, so that a folder prepared again is learned again)."""
    from synattn.data.detok import Spacing
    from synattn.data.indexed import IndexedField
    from synattn.data.subwords import spell_words

    logger.info("%s was prepared without detokenization tables: learning %s's from its training text", folder, side)
    train, sp = Path(folder) / "train", PreparedData(folder).tokenizer(side)
    ids, word = IndexedField(train, f"{side}_ids"), IndexedField(train, f"{side}_word")
    words = [spell_words(ids[i], word[i], sp) for i in range(len(ids))]
    return Spacing.learn(zip(words, (train / f"{side}.txt").read_text(encoding="utf-8").splitlines()))


def is_prepared_folder(folder: Path) -> bool:
    """Whether ``folder`` is a folder ``prepare`` made (finished, or interrupted)."""
    if (folder / MARKER).is_file() and not (folder / MARKER).is_symlink():  # a link makes no folder prepare's
        return True
    try:  # made before the marker existed: a manifest of synattn's
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    # a run's copy of its dataset's vocabulary (RUN/vocab) has the manifest too, with the dataset's fingerprint
    return isinstance(manifest, dict) and {"synattn", "splits", "spm"} <= set(manifest) and "dataset" not in manifest


DATASET = FolderKind(MARKER, "a prepared dataset", made_before_markers=is_prepared_folder,
                     force_advice="to write the dataset into it (its split subfolders would be replaced)")
"""A folder of ``synattn prepare`` (:mod:`synattn.folders`)."""


def holds_only_a_dataset(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but a prepared dataset in ``data/`` (a lock file aside): what a
    command that prepares into ``OUT/data`` (``reproduce``, ``demo``) may take as its own and reuse."""
    try:
        names = {p.name for p in Path(folder).iterdir()} - {LOCK_NAME}
    except OSError:
        return False
    return names == {"data"} and DATASET.made(Path(folder) / "data")


def check_output_folder(out: Path, force: bool = False) -> None:
    """Refuse to write into ``out`` unless it is new, empty or a prepared dataset (or ``force``);
    never the root or the home folder (:func:`synattn.folders.check_own_folder`).

    Raises:
        UsageError: ``out`` is a file, a system folder, or a folder with other content and
            ``force`` is off.
    """
    check_own_folder(out, "-o", DATASET, force)
