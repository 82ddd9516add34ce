"""Corpus statistics of dependency trees and of the relation labels synattn derives from them.

What a researcher checks before training with tree-relative attention: how long sentences are,
how many trees are non-projective, how the tree-distance and traversal labels (docs/methods.md §1) are
distributed and how many pairs overflow the label vocabulary, and how often the BET(SG) hint
(docs/methods.md §4) is simply the previous token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from synattn.errors import InputError
from synattn.trees.dependency import DependencyTree
from synattn.trees.relations import (
    MAX_DISTANCE,
    MAX_TRAVERSAL,
    batch_relation_labels,
    batch_syntax_hints,
    distance_vocab,
    traversal_vocab,
)


def pad_heads(heads: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-sentence head arrays into a zero-padded ``[B, n_max]`` batch and ``lengths [B]``."""
    lengths = np.array([len(h) for h in heads], dtype=np.int64)
    batch = np.zeros((len(heads), int(lengths.max(initial=0))), dtype=np.int64)
    for b, h in enumerate(heads):
        batch[b, : len(h)] = h
    return batch, lengths


@dataclass
class RelationStats:
    """Label histograms over all ordered word pairs (i ≠ j) of a corpus."""

    distance_vocab: list[str]
    distance_counts: np.ndarray  # [len(distance_vocab)]
    traversal_vocab: list[str]
    traversal_counts: np.ndarray  # [len(traversal_vocab)]
    n_pairs: int = 0
    hint_is_previous: int = 0
    n_hints: int = 0

    @property
    def distance_overflow(self) -> float:
        return float(self.distance_counts[-1]) / max(self.n_pairs, 1)

    @property
    def traversal_overflow(self) -> float:
        return float(self.traversal_counts[-1]) / max(self.n_pairs, 1)

    def top_traversals(self, top: int) -> np.ndarray:
        """Indices of the ``top`` most frequent traversal labels that occur (fewer when fewer
        labels occur: a small treebank has no use for all of them), most frequent first."""
        order = np.argsort(-self.traversal_counts, kind="stable")[:top]
        return order[self.traversal_counts[order] > 0]


@dataclass
class TreebankStats:
    """Summary of a list of dependency trees; see :func:`treebank_statistics`."""

    n_sentences: int
    n_words: int
    lengths: np.ndarray
    roots_per_tree: Counter
    n_nonprojective: int
    deprels: Counter
    relations: RelationStats
    arc_lengths: Counter = field(default_factory=Counter)

    def format(self, top: int = 10) -> str:
        """A plain-text report."""
        r = self.relations
        lines = [
            f"sentences            {self.n_sentences:>10,}",
            f"words                {self.n_words:>10,}",
            f"length mean/median/max {self.lengths.mean():8.1f} / {np.median(self.lengths):.0f} / "
            f"{self.lengths.max()}",
            "root words per tree  " + ", ".join(f"{k}: {v}" for k, v in sorted(self.roots_per_tree.items())),
            f"non-projective trees {self.n_nonprojective:>10,} ({self.n_nonprojective / max(self.n_sentences, 1):.1%})",
            f"mean arc length      {_mean(self.arc_lengths):>10.2f} words",
            f"word pairs (i != j)  {r.n_pairs:>10,}",
            f"tree distance > {len(r.distance_vocab) - 2:<4} {r.distance_overflow:>10.1%} of pairs (overflow label)",
            f"traversal > {_longest(r.traversal_vocab)} moves    "
            f"{r.traversal_overflow:>10.1%} of pairs (overflow label)",
            f"BET hint = previous  {r.hint_is_previous / max(r.n_hints, 1):>10.1%} of positions",
            "",
            "tree distance labels: " + "  ".join(
                f"{lab}:{c / max(r.n_pairs, 1):.1%}" for lab, c in zip(r.distance_vocab, r.distance_counts)),
            f"top {len(r.top_traversals(top))} traversal labels: " + "  ".join(
                f"{r.traversal_vocab[i]}:{r.traversal_counts[i] / max(r.n_pairs, 1):.1%}"
                for i in r.top_traversals(top)),
            f"top {top} dependency labels: " + "  ".join(
                f"{lab}:{c / max(self.n_words, 1):.1%}" for lab, c in self.deprels.most_common(top)),
        ]
        return "\n".join(lines)


def _mean(counter: Counter) -> float:
    total = sum(counter.values())
    return sum(k * v for k, v in counter.items()) / max(total, 1)


def _longest(vocab: list[str]) -> int:
    return max(len(v) for v in vocab[:-1])


def relation_statistics(heads: Sequence[np.ndarray], max_distance: int = MAX_DISTANCE,
                        max_traversal: int = MAX_TRAVERSAL, chunk: int = 2048) -> RelationStats:
    """Histograms of tree-distance and traversal labels over all ordered word pairs, and hint stats.

    Args:
        heads: per-sentence 1-based head arrays (0 = ROOT).
        max_distance: clip of the tree-distance labels.
        max_traversal: clip of the traversal labels.
        chunk: sentences per vectorised batch (sorted by length to limit padding).
    """
    dvocab, tvocab = distance_vocab(max_distance), traversal_vocab(max_traversal)
    stats = RelationStats(dvocab, np.zeros(len(dvocab), np.int64), tvocab, np.zeros(len(tvocab), np.int64))
    order = np.argsort([len(h) for h in heads], kind="stable")
    for start in range(0, len(order), chunk):
        batch, lengths = pad_heads([heads[i] for i in order[start:start + chunk]])
        n = batch.shape[1]
        valid = np.arange(n)[None, :] < lengths[:, None]  # [B, n]
        pair = valid[:, :, None] & valid[:, None, :] & ~np.eye(n, dtype=bool)[None]  # [B, n, n]
        dist, trav = batch_relation_labels(batch, lengths, max_distance, max_traversal)
        stats.distance_counts += np.bincount(np.asarray(dist)[pair], minlength=len(dvocab))
        stats.traversal_counts += np.bincount(np.asarray(trav)[pair], minlength=len(tvocab))
        stats.n_pairs += int(pair.sum())
        hints = np.asarray(batch_syntax_hints(batch, lengths))  # [B, n]
        has_next = np.arange(n)[None, :] < (lengths[:, None] - 1)  # positions that predict a token
        stats.hint_is_previous += int(((hints == np.arange(n)[None, :]) & has_next).sum())
        stats.n_hints += int(has_next.sum())
    return stats


def treebank_statistics(trees: Sequence[DependencyTree], max_distance: int = MAX_DISTANCE,
                        max_traversal: int = MAX_TRAVERSAL) -> TreebankStats:
    """Statistics of a treebank: lengths, roots, projectivity, labels, relation label histograms."""
    if not trees:
        raise InputError("no trees to summarise (the treebank is empty)")
    heads = [np.asarray(t.heads) for t in trees]
    lengths = np.array([len(h) for h in heads])
    arcs: Counter = Counter()
    for h in heads:
        dependents = np.flatnonzero(h > 0)
        arcs.update(np.abs(h[dependents] - 1 - dependents).tolist())
    return TreebankStats(
        n_sentences=len(trees), n_words=int(lengths.sum()), lengths=lengths,
        roots_per_tree=Counter(int((h == 0).sum()) for h in heads),
        n_nonprojective=sum(not t.is_projective() for t in trees),
        deprels=Counter(r for t in trees for r in t.deprels),
        relations=relation_statistics(heads, max_distance, max_traversal),
        arc_lengths=arcs)
