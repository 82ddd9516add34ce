"""Parsing metrics: unlabeled bracket F1 of induced trees and dependency attachment scores.

Bracket F1 follows docs/methods.md §3 (Tree Transformer evaluation): unlabeled spans, single-word
spans and the whole-sentence span excluded, reported both sentence-averaged (the paper's
convention) and corpus-level (micro).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from synattn.errors import InputError
from synattn.trees.constituency import Tree, leaves, spans

Spans = Collection[tuple[int, int]]


@dataclass(frozen=True)
class BracketScores:
    """Unlabeled bracket scores of predicted against gold trees.

    Attributes:
        sentence_f1: mean over sentences of the per-sentence F1.
        precision, recall, f1: corpus-level (micro) scores over all spans.
        n_sentences: number of sentences.
        n_matched, n_pred, n_gold: span counts summed over sentences.
        per_sentence_f1: ``[n_sentences]`` the per-sentence F1 values.
    """

    sentence_f1: float
    precision: float
    recall: float
    f1: float
    n_sentences: int
    n_matched: int
    n_pred: int
    n_gold: int
    per_sentence_f1: np.ndarray


def _f1(matched: np.ndarray, n_pred: np.ndarray, n_gold: np.ndarray) -> np.ndarray:
    """2 |P ∩ G| / (|P| + |G|), and 1 where both are empty."""
    total = n_pred + n_gold
    return np.where(total == 0, 1.0, 2.0 * matched / np.maximum(total, 1))


def _as_spans(item: Tree | Spans) -> tuple[set[tuple[int, int]], int | None]:
    if isinstance(item, Tree):
        return spans(item), len(leaves(item))
    return {(int(i), int(j)) for i, j in item}, None


def bracket_f1(pred: Sequence[Tree | Spans], gold: Sequence[Tree | Spans]) -> BracketScores:
    """Unlabeled bracket precision, recall and F1 (docs/methods.md §3).

    Trees are turned into spans with ``spans(tree)`` (single-word and whole-sentence spans
    excluded); span sets are used as given. Per sentence, F1 = 2 |P ∩ G| / (|P| + |G|), the
    harmonic mean of precision and recall, with **F1 = 1 when both P and G are empty** (e.g. a
    two-word sentence: nothing to find and nothing wrongly found) and F1 = 0 when only one is.
    Corpus scores sum the counts first: precision = Σ|P ∩ G| / Σ|P| (1 when Σ|P| = 0),
    recall = Σ|P ∩ G| / Σ|G| (1 when Σ|G| = 0), F1 = 2 Σ|P ∩ G| / (Σ|P| + Σ|G|) (1 when both
    are 0).

    Args:
        pred: per sentence, a predicted ``Tree`` or its set of ``(start, end)`` spans.
        gold: per sentence, the gold ``Tree`` or span set (same sentences, same words).

    Returns:
        ``BracketScores``.

    Raises:
        InputError: different numbers of sentences, or a predicted and a gold tree with
            different numbers of words.

    Example:
        >>> from synattn.trees.constituency import parse_brackets
        >>> gold = parse_brackets("(S (NP a b) (VP c (NP d e)))")  # spans (0,2) (2,5) (3,5)
        >>> pred = parse_brackets("(S (X a b) (X c d) e)")          # spans (0,2) (2,4)
        >>> round(bracket_f1([pred], [gold]).sentence_f1, 4)       # 2*1 / (2+3)
        0.4
    """
    if len(pred) != len(gold):
        raise InputError(f"{len(pred)} predicted trees for {len(gold)} gold trees")
    matched, n_pred, n_gold = (np.zeros(len(gold), dtype=np.int64) for _ in range(3))
    for k, (p_item, g_item) in enumerate(zip(pred, gold)):
        p, p_words = _as_spans(p_item)
        g, g_words = _as_spans(g_item)
        if p_words is not None and g_words is not None and p_words != g_words:
            raise InputError(f"predicted tree has {p_words} words, gold tree {g_words}",
                             sent_id=str(k + 1))
        matched[k], n_pred[k], n_gold[k] = len(p & g), len(p), len(g)
    per_sentence = _f1(matched, n_pred, n_gold)
    m, tp, tg = int(matched.sum()), int(n_pred.sum()), int(n_gold.sum())
    return BracketScores(
        sentence_f1=float(per_sentence.mean()) if len(gold) else float("nan"),
        precision=m / tp if tp else 1.0,
        recall=m / tg if tg else 1.0,
        f1=float(_f1(np.array(m), np.array(tp), np.array(tg))),
        n_sentences=len(gold), n_matched=m, n_pred=tp, n_gold=tg,
        per_sentence_f1=per_sentence)


@dataclass(frozen=True)
class AttachmentScores:
    """Corpus-level dependency attachment scores over the scored words.

    Attributes:
        uas: fraction of scored words with the gold head (NaN when no word is scored).
        las: fraction with the gold head and the gold label (``None`` without labels).
        n_words: number of scored words.
        n_head_correct, n_labeled_correct: the counts behind ``uas`` and ``las``.
    """

    uas: float
    las: float | None
    n_words: int
    n_head_correct: int
    n_labeled_correct: int | None


def _concat(name: str, arrays: Sequence[Sequence | np.ndarray], lengths: np.ndarray) -> np.ndarray:
    if len(arrays) != len(lengths):
        raise InputError(f"{name} has {len(arrays)} sentences, gold heads {len(lengths)}")
    for k, (a, n) in enumerate(zip(arrays, lengths)):
        if len(a) != n:
            raise InputError(f"{name} has {len(a)} entries for {n} words", sent_id=str(k + 1))
    return np.concatenate([np.asarray(a) for a in arrays]) if len(arrays) else np.zeros(0)


def attachment_scores(pred_heads: Sequence[Sequence[int] | np.ndarray],
                      gold_heads: Sequence[Sequence[int] | np.ndarray],
                      pred_rels: Sequence[Sequence[str]] | None = None,
                      gold_rels: Sequence[Sequence[str]] | None = None,
                      upos: Sequence[Sequence[str]] | None = None, punct: bool = True,
                      punct_tags: Collection[str] = ("PUNCT",)) -> AttachmentScores:
    """Unlabeled and labeled attachment scores (UAS, LAS), pooled over all words.

    Args:
        pred_heads: per sentence, ``[n]`` predicted heads (1-based, 0 = ROOT; any consistent
            convention works as long as gold uses the same).
        gold_heads: per sentence, ``[n]`` gold heads.
        pred_rels: per sentence, ``[n]`` predicted labels (for LAS; compared as strings).
        gold_rels: per sentence, ``[n]`` gold labels.
        upos: per sentence, ``[n]`` POS tags; needed when ``punct`` is False.
        punct: score punctuation words too (True) or leave them out (False).
        punct_tags: POS tags that mark punctuation (default UPOS ``PUNCT``; pass e.g. the
            PTB tags for XPOS).

    Returns:
        ``AttachmentScores`` (``las`` is None unless both label lists are given).

    Raises:
        InputError: mismatched sentence counts or lengths, labels given for one side only, or
            ``punct=False`` without ``upos``.

    Example:
        >>> s = attachment_scores([[2, 0, 2]], [[2, 0, 1]], upos=[["X", "V", "PUNCT"]],
        ...                       punct=False)
        >>> s.uas, s.n_words
        (1.0, 2)
    """
    lengths = np.array([len(h) for h in gold_heads], dtype=np.int64)
    gold = _concat("gold heads", gold_heads, lengths)
    pred = _concat("predicted heads", pred_heads, lengths)
    scored = np.ones(len(gold), dtype=bool)  # [total words]
    if not punct:
        if upos is None:
            raise InputError("punct=False needs upos to find the punctuation words")
        scored = ~np.isin(_concat("upos", upos, lengths).astype(str), list(punct_tags))
    head_ok = (pred == gold) & scored
    n = int(scored.sum())
    n_head = int(head_ok.sum())
    if (pred_rels is None) != (gold_rels is None):
        raise InputError("give both pred_rels and gold_rels for LAS, or neither")
    n_labeled = None
    if pred_rels is not None and gold_rels is not None:
        rels_ok = (_concat("predicted labels", pred_rels, lengths).astype(str)
                   == _concat("gold labels", gold_rels, lengths).astype(str))
        n_labeled = int((head_ok & rels_ok).sum())
    return AttachmentScores(
        uas=n_head / n if n else float("nan"),
        las=None if n_labeled is None else (n_labeled / n if n else float("nan")),
        n_words=n, n_head_correct=n_head, n_labeled_correct=n_labeled)
