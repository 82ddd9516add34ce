"""Plots of tree-relation label distributions (matplotlib, written as PNG)."""

from __future__ import annotations

from pathlib import Path

from synattn.trees.stats import RelationStats
from synattn.viz.figure import pyplot, save

TRAVERSAL_KEY = ("U: up to the head · D: down to a dependent · L / R: to a sibling on the left / right "
                 "(then down) · <far>: a longer path (one overflow label)")
"""What the traversal labels' letters mean (docs/methods.md §1)."""


def plot_relation_histograms(stats: dict[str, RelationStats], path: str | Path, top: int = 20) -> Path:
    """Bar charts of the tree-distance and traversal label shares over the pairs of distinct words
    (or pieces), one row per named corpus or level; distance 0 (a word with itself) is no such
    pair and is left out, and a key says what the traversal labels' letters mean.

    Args:
        stats: e.g. ``{"words": word_stats, "subwords": piece_stats}``.
        path: output PNG.
        top: how many of the most frequent traversal labels to show.
    """
    plt = pyplot()
    fig, axes = plt.subplots(len(stats), 2, figsize=(13, 3.4 * len(stats) + 0.5), squeeze=False)
    for row, (name, s) in enumerate(stats.items()):
        ax = axes[row, 0]
        kept = [i for i, label in enumerate(s.distance_vocab) if label != "0"]  # i ≠ j: never 0
        ax.bar(range(len(kept)), s.distance_counts[kept] / max(s.n_pairs, 1), color="#4c72b0")
        ax.set_xticks(range(len(kept)), [s.distance_vocab[i] for i in kept], fontsize=10)
        ax.set_title(f"{name}: tree distance (edges between the two)", fontsize=11)
        ax.set_ylabel("share of pairs (i ≠ j)", fontsize=10)
        ax = axes[row, 1]
        idx = [i for i in s.top_traversals(top + 1) if s.traversal_vocab[i]][:top]  # (the empty label is i = j)
        ax.bar(range(len(idx)), s.traversal_counts[idx] / max(s.n_pairs, 1), color="#dd8452")
        ax.set_xticks(range(len(idx)), [s.traversal_vocab[i] for i in idx], rotation=60, fontsize=10)
        ax.set_title(f"{name}: the {len(idx)} most frequent traversal labels (path from i to j)", fontsize=11)
        for a in axes[row]:
            a.tick_params(axis="y", labelsize=9)
    fig.tight_layout()
    fig.text(0.5, 0.0, TRAVERSAL_KEY, ha="center", va="top", fontsize=10)
    return save(fig, path)
