"""Unsupervised constituency trees from Tree Transformer link probabilities (Wang et al. 2019; docs/methods.md §3).

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
in the paper, is off by default: ``descend_above=0.7`` turns it on to reproduce that code's
trees). Ties pick the leftmost split point.

Trees over words from a model over subword pieces (:func:`word_links`): the link between words i
and i + 1 is the model's link between the last piece of word i and the first piece of word i + 1;
the links inside a word are not used (a word is never split), nor the link to a final ``</s>``.

Evaluation (:func:`score_induced`, docs/methods.md §3): unlabeled bracket F1 without punctuation,
single-word and whole-sentence spans excluded, sentence-averaged and corpus-level, next to the
right-branching, left-branching, random-binary and flat ("no brackets") baselines built over the
same punctuation-free words. A word is punctuation when its gold POS tag is a PTB punctuation tag or, in an untagged
gold tree, when all its characters are Unicode punctuation or symbols.

Example:
    >>> import numpy as np
    >>> from synattn.trees.constituency import to_brackets
    >>> a = np.array([[0.9, 0.2, 0.9]])          # one layer, 4 words
    >>> to_brackets(induce_tree(a, ["the", "cat", "saw", "it"], min_layer=1))
    '(X (X the cat) (X saw it))'
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

from synattn.errors import InputError
from synattn.trees.branching import left_branching, random_binary, right_branching, tree_from_spans
from synattn.trees.constituency import PTB_PUNCT_TAGS, Tree, drop_leaves, leaf_labels, leaves
from synattn.trees.metrics import BracketScores, bracket_f1

BASELINES = ("right-branching", "left-branching", "random", "no brackets")
"""The trees every induced tree is scored next to; "no brackets" is the flat tree (no constituent
but the sentence): the floor that F1's conventions give a model that finds nothing (F1 = 1 on a
sentence whose gold tree has no constituent either; short sentences often have none)."""
"""The baselines :func:`score_induced` reports next to the induced trees."""


def _as_numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().float().cpu().numpy()
    return np.asarray(a, dtype=np.float64)


def induced_spans(a: Any, threshold: float = 0.8, min_layer: int = 3,
                  descend_above: float | None = None) -> set[tuple[int, int]]:
    """The constituents (word spans of two or more words) found by top-down decoding.

    Args:
        a: ``[layers, n − 1]`` link probabilities of one sentence (numpy or torch), bottom layer
            first.
        threshold: a split point whose a exceeds it is not trusted at that layer.
        min_layer: the lowest layer decoding goes down to, counted from 1 at the bottom.
        descend_above: the public code's extra rule (off by default): after a split, a part
            whose links at the current layer all exceed this value (0.7 there) is decoded one
            layer lower (never below ``min_layer``).

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
        for part_start, part_end in ((start, split + 1), (split + 1, end)):
            part_layer = layer
            if (descend_above is not None and part_end - part_start >= 2 and layer > bottom
                    and a[layer, part_start:part_end - 1].min() > descend_above):
                part_layer = layer - 1
            todo.append((part_start, part_end, part_layer))
    return found


def no_split(a: Any, threshold: float = 0.8, min_layer: int = 3) -> bool:
    """Whether top-down decoding makes no split at all: every link of every layer from
    ``min_layer`` up exceeds ``threshold``, so a sentence of three or more words is one flat
    constituent (what a Tree Transformer after too little training gives: its links all near 1).

    Example:
        >>> no_split(np.array([[0.95, 0.9], [0.99, 0.97]]), min_layer=1), no_split(np.array([[0.95, 0.5]]), min_layer=1)
        (True, False)
    """
    a = _as_numpy(a)
    bottom = min(min_layer - 1, a.shape[0] - 1)
    return a.shape[1] == 0 or bool(a[bottom:].min() > threshold)


def induce_tree(a: Any, words: Sequence[str] | None = None, threshold: float = 0.8,
                min_layer: int = 3, label: str = "X", descend_above: float | None = None) -> Tree:
    """Decodes one sentence's link probabilities into a bracketed tree.

    Args:
        a: ``[layers, n − 1]`` link probabilities (numpy or torch), bottom layer first.
        words: ``[n]`` the words (default ``"0", "1", ...``).
        threshold: see :func:`induced_spans`.
        min_layer: see :func:`induced_spans`.
        label: the label of every inner node.
        descend_above: see :func:`induced_spans`.

    Returns:
        The tree, with flat constituents where no split point was trusted.
    """
    spans = induced_spans(a, threshold, min_layer, descend_above)
    n = _as_numpy(a).shape[1] + 1
    words = [str(i) for i in range(n)] if words is None else list(words)
    if len(words) != n:
        raise InputError(f"{len(words)} words for link probabilities of {n} words")
    return tree_from_spans(words, spans, label=label)


def induce_trees(a: Any, lengths: Sequence[int] | Any, words: Sequence[Sequence[str]] | None = None,
                 threshold: float = 0.8, min_layer: int = 3, label: str = "X",
                 descend_above: float | None = None) -> list[Tree]:
    """Decodes a padded batch, e.g. ``ConstituentState.stack()``.

    Args:
        a: ``[batch_size, layers, N − 1]`` link probabilities, padded beyond each sentence.
        lengths: ``[batch_size]`` sentence lengths in words (positions, when the model's input
            has extra tokens, slice ``a`` first).
        words: per sentence, its words (default ``"0", "1", ...``).
        threshold: see :func:`induced_spans`.
        min_layer: see :func:`induced_spans`.
        label: the label of every inner node.
        descend_above: see :func:`induced_spans`.

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
                                 threshold, min_layer, label, descend_above))
    return trees


def word_links(a: Any, word_of_piece: Sequence[int] | np.ndarray) -> np.ndarray:
    """Word-level link probabilities from links between adjacent pieces.

    The link between words i and i + 1 is the link between the last piece of word i and the
    first piece of word i + 1; links inside a word and links beyond the last piece (e.g. to a
    final ``</s>``) are not used.

    Args:
        a: ``[layers, m]`` links between adjacent positions, ``m >= pieces − 1`` (numpy or torch).
        word_of_piece: ``[pieces]`` the 0-based word of each piece (0, 0, 1, 2, 2, ...).

    Returns:
        ``[layers, words − 1]``.

    Example:
        >>> word_links(np.array([[0.9, 0.2, 0.8, 0.5]]), [0, 0, 1, 1]).tolist()
        [[0.2]]
    """
    a = _as_numpy(a)
    word = np.asarray(word_of_piece, dtype=np.int64)
    steps = np.diff(word)
    if len(word) == 0 or word[0] != 0 or ((steps != 0) & (steps != 1)).any():
        raise InputError(f"word_of_piece must count words 0, 1, ... in order, got {word.tolist()}")
    if a.ndim != 2 or a.shape[1] < len(word) - 1:
        raise InputError(f"links of shape {list(a.shape)} for {len(word)} pieces")
    return a[:, np.flatnonzero(steps)]  # the edge after the last piece of each word but the last


def is_punctuation(word: str) -> bool:
    """True when every character of ``word`` is Unicode punctuation (P*) or a symbol (S*)."""
    return bool(word) and all(unicodedata.category(c)[0] in "PS" for c in word)


def punctuation_mask(tree: Tree) -> list[bool]:
    """Per leaf of ``tree``: punctuation by its POS tag (PTB tags), or by its characters when the
    leaf has no tag."""
    return [tag in PTB_PUNCT_TAGS if tag else is_punctuation(word)
            for word, tag in zip(leaves(tree), leaf_labels(tree))]


def _without_punctuation(pred: Tree, gold: Tree, k: int, path: str) -> tuple[Tree, Tree]:
    """Both trees over the sentence's non-punctuation words.

    The gold tree has the same words as the prediction (its punctuation is then removed from
    both), or exactly the prediction's non-punctuation words (e.g. a gold file without it).
    """
    n_pred, n_gold = len(leaves(pred)), len(leaves(gold))
    if n_gold == n_pred:
        keep = [not p for p in punctuation_mask(gold)]
        return drop_leaves(pred, keep), drop_leaves(gold, keep)
    keep = [not is_punctuation(word) for word in leaves(pred)]
    if sum(keep) == n_gold:
        return drop_leaves(pred, keep), gold
    raise InputError(f"the gold tree has {n_gold} words, the sentence {n_pred} ({sum(keep)} without "
                     "punctuation)", path, sent_id=str(k + 1))


def score_induced(pred: Sequence[Tree], gold: Sequence[Tree], seed: int = 0,
                  gold_path: str = "<gold>") -> dict[str, BracketScores]:
    """Unlabeled bracket F1 of induced trees and of the branching and random baselines.

    Args:
        pred: the induced trees, one per sentence.
        gold: the gold trees (e.g. ``read_brackets(path)``, POS tags kept), same sentences.
        seed: seed of the random-binary baseline.
        gold_path: the gold file's name in error messages.

    Returns:
        ``{"induced": ..., "right-branching": ..., "left-branching": ..., "random": ..., "no brackets": ...}``, each
        with sentence-averaged (``sentence_f1``) and corpus (``f1``) scores over the
        punctuation-free words.

    Raises:
        InputError: different numbers of sentences, or a gold tree whose words do not fit.
    """
    if len(pred) != len(gold):
        raise InputError(f"{len(gold)} gold trees for {len(pred)} sentences", gold_path)
    pairs = [_without_punctuation(p, g, k, gold_path) for k, (p, g) in enumerate(zip(pred, gold))]
    induced = [p for p, _ in pairs]
    golds = [g for _, g in pairs]
    words = [leaves(g) for g in golds]
    rng = np.random.default_rng(seed)
    candidates = {"induced": induced,
                  "right-branching": [right_branching(w) if w else g for w, g in zip(words, golds)],
                  "left-branching": [left_branching(w) if w else g for w, g in zip(words, golds)],
                  "random": [random_binary(w, rng) if w else g for w, g in zip(words, golds)],
                  "no brackets": [tree_from_spans(w, set(), label="X") if w else g for w, g in zip(words, golds)]}
    return {name: bracket_f1(trees, golds) for name, trees in candidates.items()}
