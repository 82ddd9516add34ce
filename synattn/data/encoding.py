"""One sentence as the arrays a prepared dataset stores: piece ids, the word of each piece and,
with a dependency tree, the subword tree and the per-piece POS and dependency labels (used by
``prepare`` and to encode input at translation time)."""

from __future__ import annotations

import numpy as np

from synattn.data.subwords import segment_words
from synattn.trees.dependency import DependencyTree
from synattn.trees.subword import project_to_subwords


def encode_sentence(side: str, words: list[str], sp, labels: dict[str, list[str]],
                    tree: DependencyTree | None = None) -> dict[str, np.ndarray]:
    """The stored fields of one sentence on one side (also used to encode input at translation time).

    Args:
        side: ``"src"`` or ``"tgt"`` (the prefix of the field names).
        words: the sentence's words (each is segmented on its own).
        sp: the side's sentencepiece model.
        labels: the POS/deprel vocabularies (``labels.json``); unknown labels map to ``<unk>`` (1).
        tree: the sentence's dependency tree, if any.

    Returns:
        ``{side}_ids``, ``{side}_word`` and, with a tree, ``{side}_heads`` (subword tree),
        ``{side}_upos``, ``{side}_deprel`` (per piece, the label of its word).
    """
    pieces, per_word = segment_words(sp, words, out_type=int)
    word_of_piece = np.repeat(np.arange(len(words)), per_word)  # [pieces]
    out: dict[str, np.ndarray] = {f"{side}_ids": np.asarray(pieces, dtype=np.int32), f"{side}_word": word_of_piece}
    if tree is not None:
        upos_index = {lab: i for i, lab in enumerate(labels.get(f"{side}_upos", []))}
        rel_index = {lab: i for i, lab in enumerate(labels.get(f"{side}_deprels", []))}
        out[f"{side}_heads"] = project_to_subwords(tree.heads, per_word)
        out[f"{side}_upos"] = np.array([upos_index.get(tree.upos[w], 1) for w in word_of_piece], dtype=np.int16)
        out[f"{side}_deprel"] = np.array([rel_index.get(tree.deprels[w], 1) for w in word_of_piece],
                                         dtype=np.int16)
    return out
