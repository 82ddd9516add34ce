"""Unsupervised constituency trees from Tree Transformer link probabilities (seed 002; METHODS §3).

A trained Tree Transformer gives, per layer l and adjacent pair (i, i + 1), the probability a^l_i
that the two words lie in one constituent (``ConstituentState.stack()``). Top-down decoding::

    start with the whole sentence at the top layer
    in a span, find the split point b with the smallest a_b at the current layer
    if a_b > threshold (0.8):
        at the minimum layer  -> the span is one flat constituent
        else                  -> look at the same span one layer down
    else: split between words b and b + 1 and decode both parts at the current layer

Choices we made: ``min_layer`` counts layers from the bottom starting at 1, so the default 3 is
layer index 2 (the public code's ``min_layer = 2``); with fewer layers than ``min_layer`` the top
layer is the minimum. Both parts of a split continue at the layer where the split was found (the
public code's extra rule, which moves a part one layer down when all its links exceed 0.7, is not
in the paper and is left out). Ties pick the leftmost split point.

Example:
    >>> import numpy as np
    >>> from synattn.trees.constituency import to_brackets
    >>> a = np.array([[0.9, 0.2, 0.9]])          # one layer, 4 words
    >>> to_brackets(induce_tree(a, ["the", "cat", "saw", "it"], min_layer=1))
    '(X (X the cat) (X saw it))'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from synattn.errors import InputError
from synattn.trees.constituency import Tree, tree_from_spans


def _as_numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().float().cpu().numpy()
    return np.asarray(a, dtype=np.float64)


def induced_spans(a: Any, threshold: float = 0.8, min_layer: int = 3) -> set[tuple[int, int]]:
    """The constituents (word spans of two or more words) found by top-down decoding.

    Args:
        a: ``[layers, n − 1]`` link probabilities of one sentence (numpy or torch), bottom layer
            first.
        threshold: a split point whose a exceeds it is not trusted at that layer.
        min_layer: the lowest layer decoding goes down to, counted from 1 at the bottom.

    Returns:
        ``(start, end)`` spans (end exclusive) with ``end − start >= 2``, the whole sentence
        included when n >= 2.
    """
    a = _as_numpy(a)
    if a.ndim != 2 or a.shape[0] == 0:
        raise InputError(f"expected link probabilities [layers, n - 1], got shape {list(a.shape)}")
    if min_layer < 1:
        raise InputError(f"min_layer counts layers from 1, got {min_layer}")
    top = a.shape[0] - 1
    bottom = min(min_layer - 1, top)
    n = a.shape[1] + 1
    found: set[tuple[int, int]] = set()
    todo = [(0, n, top)]
    while todo:
        start, end, layer = todo.pop()
        if end - start < 2:
            continue
        found.add((start, end))
        links = a[layer, start:end - 1]
        split = start + int(np.argmin(links))
        if a[layer, split] > threshold:
            if layer > bottom:
                todo.append((start, end, layer - 1))
            continue  # at the minimum layer: one flat constituent
        todo.append((start, split + 1, layer))
        todo.append((split + 1, end, layer))
    return found


def induce_tree(a: Any, words: Sequence[str] | None = None, threshold: float = 0.8,
                min_layer: int = 3, label: str = "X") -> Tree:
    """Decodes one sentence's link probabilities into a bracketed tree.

    Args:
        a: ``[layers, n − 1]`` link probabilities (numpy or torch), bottom layer first.
        words: ``[n]`` the words (default ``"0", "1", ...``).
        threshold: see :func:`induced_spans`.
        min_layer: see :func:`induced_spans`.
        label: the label of every inner node.

    Returns:
        The tree, with flat constituents where no split point was trusted.
    """
    spans = induced_spans(a, threshold, min_layer)
    n = _as_numpy(a).shape[1] + 1
    words = [str(i) for i in range(n)] if words is None else list(words)
    if len(words) != n:
        raise InputError(f"{len(words)} words for link probabilities of {n} words")
    return tree_from_spans(words, spans, label=label)


def induce_trees(a: Any, lengths: Sequence[int] | Any, words: Sequence[Sequence[str]] | None = None,
                 threshold: float = 0.8, min_layer: int = 3, label: str = "X") -> list[Tree]:
    """Decodes a padded batch, e.g. ``ConstituentState.stack()``.

    Args:
        a: ``[batch_size, layers, N − 1]`` link probabilities, padded beyond each sentence.
        lengths: ``[batch_size]`` sentence lengths in words (positions, when the model's input
            has extra tokens, slice ``a`` first).
        words: per sentence, its words (default ``"0", "1", ...``).
        threshold: see :func:`induced_spans`.
        min_layer: see :func:`induced_spans`.
        label: the label of every inner node.

    Returns:
        One tree per sentence.
    """
    a = _as_numpy(a)
    lengths = [int(n) for n in _as_numpy(lengths)]
    if a.ndim != 3 or len(lengths) != a.shape[0]:
        raise InputError(f"expected [batch_size, layers, N - 1] link probabilities for "
                         f"{len(lengths)} lengths, got shape {list(a.shape)}")
    if words is not None and len(words) != len(lengths):
        raise InputError(f"{len(words)} word lists for {len(lengths)} sentences")
    trees = []
    for row, n in enumerate(lengths):
        if not 1 <= n <= a.shape[2] + 1:
            raise InputError(f"sentence {row} has length {n}, outside 1..{a.shape[2] + 1}")
        trees.append(induce_tree(a[row, :, :n - 1], None if words is None else words[row],
                                 threshold, min_layer, label))
    return trees
