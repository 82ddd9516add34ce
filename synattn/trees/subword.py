"""Projection of a word-level dependency tree onto subword pieces (Deguchi et al. 2019, slides 12-14).

A word split into pieces w¹..wᵖ: every non-final piece's head is the next piece (its right
neighbour); the final piece's head is the **first** piece of the word's head word; a root word's
final piece hangs from ROOT. The result uses the same convention as word trees (1-based, 0 = ROOT),
so every function of :mod:`synattn.trees.relations` works on it, and
``head_targets(project_to_subwords(heads, pieces))`` makes a root word's final piece target itself,
as docs/methods.md §2 asks.

Example:
    >>> project_to_subwords([2, 0, 2], [2, 3, 1]).tolist()  # pieces: [p1 p2] [p3 p4 p5] [p6]
    [2, 3, 4, 5, 0, 3]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from synattn.errors import InputError


def _check_pieces(pieces_per_word: Any) -> np.ndarray:
    """``pieces_per_word`` as an int64 ``[n]`` array of positive counts (raises InputError)."""
    pieces = np.asarray(pieces_per_word)
    if pieces.size == 0:
        pieces = pieces.astype(np.int64)
    if pieces.ndim != 1 or not np.issubdtype(pieces.dtype, np.integer):
        raise InputError(f"pieces_per_word must be a 1-d integer array, got shape {pieces.shape} "
                         f"dtype {pieces.dtype}")
    if (pieces < 1).any():
        i = int(np.argmax(pieces < 1))
        raise InputError(f"word {i + 1} has {pieces[i]} pieces, expected at least 1")
    return pieces.astype(np.int64)


def first_piece_index(pieces_per_word: Any) -> np.ndarray:
    """0-based index of the first piece of every word.

    Args:
        pieces_per_word: ``[n]`` number of pieces of each word (each >= 1).

    Returns:
        ``[n]`` int64, e.g. ``[0, 2, 5]`` for pieces ``[2, 3, 1]``.
    """
    pieces = _check_pieces(pieces_per_word)
    return np.cumsum(pieces) - pieces  # [n]


def last_piece_index(word_of_piece: Any) -> np.ndarray:
    """0-based index of the last piece of every word, from the word of every piece (the piece that
    carries the word's arc in a projected tree, :func:`project_to_subwords`).

    Args:
        word_of_piece: ``[m]`` 0-based word of every piece, words in order.

    Returns:
        ``[n]`` int64, e.g. ``[1, 4, 5]`` for pieces of words ``[0, 0, 1, 1, 1, 2]``.
    """
    word_of_piece = np.asarray(word_of_piece, dtype=np.int64)
    last = np.zeros(int(word_of_piece.max()) + 1 if len(word_of_piece) else 0, dtype=np.int64)
    last[word_of_piece] = np.arange(len(word_of_piece))  # later pieces overwrite earlier ones
    return last


def word_index_of_pieces(pieces_per_word: Any) -> np.ndarray:
    """0-based word of every piece.

    Args:
        pieces_per_word: ``[n]`` number of pieces of each word (each >= 1).

    Returns:
        ``[sum(pieces_per_word)]`` int64, e.g. ``[0, 0, 1, 1, 1, 2]`` for pieces ``[2, 3, 1]``.
    """
    pieces = _check_pieces(pieces_per_word)
    return np.repeat(np.arange(len(pieces)), pieces)  # [m]


def project_to_subwords(heads: Any, pieces_per_word: Any) -> np.ndarray:
    """Subword heads of a word tree (Deguchi et al. 2019 slides 12-14; docs/methods.md §2 "Subword trees").

    Args:
        heads: ``[n]`` 1-based word heads, 0 = ROOT.
        pieces_per_word: ``[n]`` number of pieces of each word (each >= 1).

    Returns:
        ``[m]`` int64 1-based piece heads, 0 = ROOT, m = ``sum(pieces_per_word)``: a non-final
        piece heads to the next piece, a final piece to the first piece of its word's head word,
        a root word's final piece to ROOT. Words of one piece each give back ``heads``.
    """
    heads = np.asarray(heads)
    pieces = _check_pieces(pieces_per_word)
    if heads.size == 0:
        heads = heads.astype(np.int64)
    n = len(pieces)
    if heads.shape != (n,) or not np.issubdtype(heads.dtype, np.integer):
        raise InputError(f"heads must be [n] = [{n}] integers (one per word of pieces_per_word), "
                         f"got shape {heads.shape} dtype {heads.dtype}")
    if ((heads < 0) | (heads > n)).any():
        i = int(np.argmax((heads < 0) | (heads > n)))
        raise InputError(f"word {i + 1} has head {heads[i]}, expected 0 (ROOT) or a word 1..{n}")
    first = np.cumsum(pieces) - pieces  # [n] 0-based first piece of each word
    last = first + pieces - 1  # [n] 0-based final piece of each word
    out = np.arange(2, pieces.sum() + 2)  # [m] 1-based index of the next piece
    out[last] = np.where(heads > 0, first[np.maximum(heads - 1, 0)] + 1, 0)
    return out


def word_heads_of_pieces(piece_heads: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """Word-level heads ``[n]`` (1-based, 0 = ROOT) read back from a projected subword tree
    (:func:`project_to_subwords`'s inverse): a word's arc is carried by its final piece, which points
    at the first piece of the head word. ``piece_heads``, ``word_of_piece``: ``[m]``."""
    h = piece_heads[last_piece_index(word_of_piece)]
    return np.where(h == 0, 0, word_of_piece[np.maximum(h - 1, 0)] + 1)
