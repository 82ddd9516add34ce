"""The tokenize step of ``prepare`` (:mod:`synattn.data.prepare`): what is learned from the training
split -- the sentencepiece model of each side (or one joint model), how each side's tokens are
written as text (:mod:`synattn.data.detok`) and the POS / dependency-label vocabularies.
"""

from __future__ import annotations

import logging
from pathlib import Path

from synattn.data.detok import Spacing
from synattn.data.reading import Side
from synattn.data.subwords import train_sentencepiece
from synattn.errors import DataError
from synattn.trees.dependency import DependencyTree

logger = logging.getLogger(__name__)


def vocabulary_names(sides: tuple[str, ...], joint: bool) -> dict[str, str]:
    """The sentencepiece model each side uses: its own (``src``, ``tgt``), or ``joint``."""
    return {"src": "joint", "tgt": "joint"} if joint else {s: s for s in sides}


def train_tokenizers(train: dict[str, Side], names: dict[str, str], out: Path, vocab_size: int,
                     subword_model: str) -> dict:
    """The sentencepiece model of each name in ``names`` (``out/spm.NAME.model``), trained on the
    words of the training sides that use it.

    Raises:
        DataError: sentencepiece refuses the text (e.g. too small a vocabulary), naming the file.
    """
    models = {}
    for side, name in names.items():
        if name in models:
            continue
        text = [" ".join(w) for s in names if names[s] == name for w in train[s].words()]
        try:
            models[name] = train_sentencepiece(text, out / f"spm.{name}.model", vocab_size, model_type=subword_model)
        except RuntimeError as err:  # sentencepiece's own checks, e.g. a too small vocabulary
            raise DataError(f"sentencepiece cannot train on it: {' '.join(str(err).split())}",
                            train["src" if name != "tgt" else "tgt"].path) from None
        pieces = models[name].get_piece_size()
        if pieces < vocab_size:
            logger.warning("the %s vocabulary has %d pieces, fewer than vocab_size=%d: the training text "
                           "has no more to give", name, pieces, vocab_size)
    return models


def learn_spacing(train: dict[str, Side], out: Path) -> dict[str, str]:
    """How each training side's tokens are written as text; the tables that are not plain
    space-joining are saved as ``out/detok.SIDE.json``. Returns their file names by side."""
    detok = {}
    for s, side in train.items():
        spacing = Spacing.learn(zip(side.words(), side.lines))
        if not spacing.is_identity:
            detok[s] = f"detok.{s}.json"
            spacing.save(out / detok[s])
    return detok


def label_vocabularies(train: dict[str, Side]) -> dict[str, list[str]]:
    """``{SIDE_upos, SIDE_deprels: labels}`` of every training side with trees (from train only)."""
    labels: dict[str, list[str]] = {}
    for s, side in train.items():
        if side.trees is not None:
            labels[f"{s}_upos"] = _label_vocab(side.trees, "upos")
            labels[f"{s}_deprels"] = _label_vocab(side.trees, "deprels")
    return labels


def _label_vocab(trees: list[DependencyTree], attribute: str) -> list[str]:
    labels = sorted({lab for t in trees for lab in getattr(t, attribute)})
    return ["<pad>", "<unk>"] + labels
