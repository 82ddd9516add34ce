"""Attention heads as dependency parsers, measured as Clark et al. (2019, "What does BERT look at?
An analysis of BERT's attention", §4.1–4.2) measure them.

A head's token-to-token attention becomes word-to-word attention: attention *to* a word split into
pieces is the sum over its pieces, attention *from* it the mean over its pieces (special tokens are
left out). A head then predicts, for every word, the other word it attends to most. Each head is
scored in both directions:

- ``parent`` (dependent → head): for every non-root word, is the most-attended other word its
  gold head?
- ``child`` (head → dependent): for every non-root word d with head h, is d the word that h attends
  to most? (A head with several dependents can get only one of them right: this is the reverse
  reading Clark et al. report per relation.)

Per relation, the best (layer, head, direction) is reported with its accuracy over that
relation's dependents, beside the fixed-offset baseline (the head predicted at the relative
position most often right for the relation, e.g. "the word before").

:class:`ProbeCounts` accumulates counts sentence by sentence; :meth:`ProbeCounts.summary` turns
them into accuracies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

DIRECTIONS = ("parent", "child")
MAX_OFFSET = 5
"""The fixed-offset baseline tries every relative position in −5..5 (0 excluded)."""


def word_attention(piece_attention: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """Word-to-word attention from piece-to-piece attention (Clark et al. 2019, §4.1).

    Args:
        piece_attention: ``[..., p, p]`` attention among one sentence's pieces (row = from).
        word_of_piece: ``[p]`` 0-based word of every piece.

    Returns:
        ``[..., n, n]``: row i is the mean over word i's pieces of the attention they give, summed
        over the pieces of each attended word.

    Example:
        >>> a = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]])  # pieces of words 0, 0, 1
        >>> word_attention(a, np.array([0, 0, 1])).round(2).tolist()
        [[0.65, 0.35], [0.6, 0.4]]
    """
    word_of_piece = np.asarray(word_of_piece)
    n = int(word_of_piece.max()) + 1 if len(word_of_piece) else 0
    member = np.zeros((len(word_of_piece), n))  # [p, n]
    member[np.arange(len(word_of_piece)), word_of_piece] = 1.0
    mean_rows = member.T / np.maximum(member.sum(0), 1)[:, None]  # [n, p]
    return mean_rows @ np.asarray(piece_attention, dtype=np.float64) @ member


def head_guesses(attention: np.ndarray) -> np.ndarray:
    """``[..., n]`` the other word each word attends to most (``attention`` ``[..., n, n]``)."""
    scores = np.array(attention, dtype=np.float64, copy=True)
    n = scores.shape[-1]
    scores[..., np.arange(n), np.arange(n)] = -np.inf
    return scores.argmax(-1) if n > 1 else np.zeros(scores.shape[:-1], dtype=np.int64)


@dataclass
class ProbeCounts:
    """Correct predictions of every head, per direction and per relation, over a corpus.

    Attributes:
        shape: ``(layers, heads)``.
        total: non-root words seen.
        correct: ``{direction: [L, H]}`` counts over all non-root words.
        by_relation: ``{relation: {direction: [L, H]}}``; ``count[relation]`` its dependents.
        offsets: ``{relation: [2 * MAX_OFFSET + 1]}`` dependents whose head sits at each offset.
    """

    shape: tuple[int, int]
    total: int = 0
    correct: dict[str, np.ndarray] = field(default_factory=dict)
    by_relation: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    offsets: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, attention: np.ndarray, heads: np.ndarray, relations: list[str]) -> None:
        """Adds one sentence.

        Args:
            attention: ``[L, H, n, n]`` word-level attention (:func:`word_attention`).
            heads: ``[n]`` gold heads, 1-based, 0 = ROOT.
            relations: ``[n]`` each word's relation to its head (any labels; ``"_"`` when unknown).
        """
        heads = np.asarray(heads)
        dependents = np.flatnonzero(heads > 0)  # non-root words
        if len(dependents) == 0:
            return
        gold = heads[dependents] - 1  # [d] 0-based head word of each dependent
        guesses = head_guesses(attention)  # [L, H, n]
        hit = {"parent": guesses[..., dependents] == gold,  # [L, H, d]
               "child": guesses[..., gold] == dependents}
        self.total += len(dependents)
        for direction, h in hit.items():
            self.correct[direction] = self.correct.get(direction, 0) + h.sum(-1)
        for k, d in enumerate(dependents):
            rel = relations[d].split(":")[0]  # UD subtypes count with their relation (nmod:poss -> nmod)
            self.count[rel] += 1
            table = self.by_relation.setdefault(rel, {direction: np.zeros(self.shape) for direction in DIRECTIONS})
            for direction, h in hit.items():
                table[direction] += h[..., k]
            offset = int(gold[k]) - int(d)
            if 0 < abs(offset) <= MAX_OFFSET:
                self.offsets.setdefault(rel, np.zeros(2 * MAX_OFFSET + 1))[offset + MAX_OFFSET] += 1

    def summary(self, min_count: int = 1) -> dict:
        """Accuracies: every head in both directions, the best head overall, and per relation.

        Returns:
            ``{"words": n, "parent": [L][H], "child": [L][H], "best": {...}, "relations": {rel:
            {"count", "layer", "head", "direction", "accuracy", "offset", "offset_accuracy"}}}``,
            relations with at least ``min_count`` dependents, most frequent first; layers and heads
            0-based.
        """
        out: dict = {"words": self.total}
        for direction in DIRECTIONS:
            out[direction] = (self.correct.get(direction, np.zeros(self.shape)) / max(self.total, 1)).tolist()
        out["best"] = _best({d: np.asarray(out[d]) for d in DIRECTIONS})
        relations = {}
        for rel, n in sorted(self.count.items(), key=lambda kv: (-kv[1], kv[0])):
            if n < min_count:
                continue
            best = _best({d: self.by_relation[rel][d] / n for d in DIRECTIONS})
            offsets = self.offsets.get(rel, np.zeros(2 * MAX_OFFSET + 1))
            k = int(offsets.argmax())
            relations[rel] = {"count": n, **best, "offset": k - MAX_OFFSET, "offset_accuracy": float(offsets[k] / n)}
        out["relations"] = relations
        return out


def _best(tables: dict[str, np.ndarray]) -> dict:
    """The (layer, head, direction) with the highest accuracy in ``{direction: [L, H]}``."""
    direction = max(tables, key=lambda d: (tables[d].max(), d == "parent"))
    layer, head = np.unravel_index(int(tables[direction].argmax()), tables[direction].shape)
    return {"layer": int(layer), "head": int(head), "direction": direction,
            "accuracy": float(tables[direction][layer, head])}
