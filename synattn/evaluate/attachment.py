"""Attachment scores of dependency-supervised heads, and agreement of attention heads with trees.

A supervised head attends from every piece to the piece of its head (docs/methods.md §2). Its parse is read
per **word**: word w's predicted head is the word containing the piece that w's final piece attends
to most (the final piece carries the word's arc in the subword projection); a word attending into
itself means "root". The gold of a root word is itself, as in training.

The same head also scores whole trees: :func:`word_arc_scores` turns its attention into word-level
arc log-scores (the log of the probability mass a word's final piece puts on each word's pieces;
on its own word, ROOT), and :func:`tree_predictions` decodes the best single-root tree under them,
projective (Eisner 1996) or not (Chu-Liu-Edmonds through the Matrix-Tree CRF's ``argmax``), as
graph-based parsers decode their arc scores (Dozat & Manning 2017). The argmax reading above can
form cycles or give several roots; a decoded tree cannot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synattn.trees.metrics import AttachmentScores, attachment_scores
from synattn.trees.subword import last_piece_index


def word_predictions(piece_scores: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """Word-level heads (1-based, 0 = ROOT) from one sentence's piece-level attention.

    Args:
        piece_scores: ``[..., p, p]`` scores or probabilities of the supervised head (or of any
            attention heads), row = attending piece (only the sentence's pieces, no padding or
            special tokens).
        word_of_piece: ``[p]`` 0-based word of every piece.

    Returns:
        ``[..., n_words]`` int64 predicted heads in CoNLL-U convention.
    """
    word_of_piece = np.asarray(word_of_piece)
    last = last_piece_index(word_of_piece)
    target_word = word_of_piece[np.asarray(piece_scores)[..., last, :].argmax(-1)]  # [..., n]
    return np.where(target_word == np.arange(len(last)), 0, target_word + 1)


def supervised_attachment(piece_scores: Sequence[np.ndarray], word_of_piece: Sequence[np.ndarray],
                          gold_heads: Sequence[np.ndarray], upos: Sequence[Sequence[str]] | None = None,
                          punct: bool = True) -> AttachmentScores:
    """Unlabeled attachment of a supervised head over a corpus (word level; see module docstring)."""
    pred = [word_predictions(s, w) for s, w in zip(piece_scores, word_of_piece)]
    return attachment_scores(pred, [np.asarray(g) for g in gold_heads], upos=upos, punct=punct)


def word_arc_scores(piece_log_probs: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """``[n+1, n+1]`` word-level arc log-scores of one sentence, laid out as :mod:`synattn.structs`
    takes them (``[head, dependent]``, index 0 = ROOT, words ``1..n``).

    Args:
        piece_log_probs: ``[p, p]`` log-probabilities of a supervised head (row = attending piece).
        word_of_piece: ``[p]`` 0-based word of every piece.

    The score of ``h → d`` is the log of the mass that ``d``'s final piece puts on the pieces of
    ``h``; ROOT → ``d`` is the mass it puts on its own word; the diagonal is ``-inf``.
    """
    word_of_piece = np.asarray(word_of_piece)
    last = last_piece_index(word_of_piece)
    n = len(last)
    rows = np.asarray(piece_log_probs, dtype=np.float64)[last]  # [n(d), p]
    top = rows.max(-1, keepdims=True)
    mass = np.zeros((n, n))  # [d, h]
    np.add.at(mass.T, word_of_piece, np.exp(rows - top).T)
    with np.errstate(divide="ignore"):
        by_word = np.log(mass) + top  # [d, h]
    scores = np.full((n + 1, n + 1), -np.inf)
    scores[1:, 1:] = by_word.T
    scores[0, 1:] = np.diag(by_word)
    np.fill_diagonal(scores, -np.inf)
    return scores


def tree_predictions(arc_scores: Sequence[np.ndarray], projective: bool = True) -> list[np.ndarray]:
    """The best single-root tree of every sentence under its ``[n+1, n+1]`` arc log-scores
    (:func:`word_arc_scores`): Eisner's algorithm if ``projective``, else the maximum spanning
    arborescence; returns ``[n]`` heads per sentence (CoNLL-U convention, 0 = ROOT)."""
    import torch

    from synattn.structs import DependencyCRF, NonProjectiveDependencyCRF

    if not arc_scores:
        return []
    size = max(len(s) for s in arc_scores)
    padded = torch.full((len(arc_scores), size, size), -float("inf"), dtype=torch.float64)
    for b, s in enumerate(arc_scores):
        padded[b, :len(s), :len(s)] = torch.as_tensor(s)
    # -inf arcs (no mass at all) stay usable at a very low score: every sentence keeps a tree
    padded = padded.clamp(min=-1e4)
    lengths = torch.tensor([len(s) - 1 for s in arc_scores])
    crf = (DependencyCRF if projective else NonProjectiveDependencyCRF)(padded, lengths, multiroot=False)
    heads = crf.argmax.numpy()
    return [heads[b, :len(s) - 1].astype(np.int64) for b, s in enumerate(arc_scores)]


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
