"""Attachment scores of dependency-supervised heads, and agreement of attention heads with trees.

A supervised head attends from every piece to the piece of its head (docs/methods.md §2). Its parse is read
per **word**: word w's predicted head is the word containing the piece that w's final piece attends
to most (the final piece carries the word's arc in the subword projection); a word attending into
itself means "root". The gold of a root word is itself, as in training.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synattn.trees.metrics import AttachmentScores, attachment_scores


def word_predictions(piece_scores: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """Word-level heads (1-based, 0 = ROOT) from one sentence's piece-level attention.

    Args:
        piece_scores: ``[p, p]`` scores or probabilities of the supervised head, row = attending piece
            (only the sentence's pieces, no padding or special tokens).
        word_of_piece: ``[p]`` 0-based word of every piece.

    Returns:
        ``[n_words]`` int64 predicted heads in CoNLL-U convention.
    """
    word_of_piece = np.asarray(word_of_piece)
    n = int(word_of_piece.max()) + 1 if len(word_of_piece) else 0
    last_piece = np.zeros(n, dtype=np.int64)
    last_piece[word_of_piece] = np.arange(len(word_of_piece))  # later pieces overwrite earlier ones
    target_word = word_of_piece[np.asarray(piece_scores)[last_piece].argmax(-1)]  # [n]
    words = np.arange(n)
    return np.where(target_word == words, 0, target_word + 1)


def supervised_attachment(piece_scores: Sequence[np.ndarray], word_of_piece: Sequence[np.ndarray],
                          gold_heads: Sequence[np.ndarray], upos: Sequence[Sequence[str]] | None = None,
                          punct: bool = True) -> AttachmentScores:
    """Unlabeled attachment of a supervised head over a corpus (word level; see module docstring)."""
    pred = [word_predictions(s, w) for s, w in zip(piece_scores, word_of_piece)]
    return attachment_scores(pred, [np.asarray(g) for g in gold_heads], upos=upos, punct=punct)


def head_agreement(probs: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Share of words whose most-attended position is their dependency head, per attention head.

    Args:
        probs: ``[H, n, n]`` attention of one sentence (word or piece positions, no padding).
        heads: ``[n]`` 1-based heads of the same positions; root positions count as attending to
            themselves.

    Returns:
        ``[H]`` agreement in [0, 1] (1/n is chance for a uniform head).
    """
    heads = np.asarray(heads)
    gold = np.where(heads > 0, heads - 1, np.arange(len(heads)))  # [n]
    return (np.asarray(probs).argmax(-1) == gold[None, :]).mean(-1)
