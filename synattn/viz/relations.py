"""Plots of tree-relation label distributions (matplotlib, written as PNG)."""

from __future__ import annotations

from pathlib import Path

from synattn.trees.stats import RelationStats
from synattn.viz.figure import pyplot, save


def plot_relation_histograms(stats: dict[str, RelationStats], path: str | Path, top: int = 20) -> Path:
    """Bar charts of the tree-distance and traversal label shares, one row per named corpus/level.

    Args:
        stats: e.g. ``{"words": word_stats, "subwords": piece_stats}``.
        path: output PNG.
        top: how many of the most frequent traversal labels to show.
    """
    plt = pyplot()
    fig, axes = plt.subplots(len(stats), 2, figsize=(13, 3.2 * len(stats)), squeeze=False)
    for row, (name, s) in enumerate(stats.items()):
        ax = axes[row, 0]
        ax.bar(range(len(s.distance_vocab)), s.distance_counts / max(s.n_pairs, 1), color="#4c72b0")
        ax.set_xticks(range(len(s.distance_vocab)), s.distance_vocab)
        ax.set_title(f"{name}: tree distance labels")
        ax.set_ylabel("share of pairs (i ≠ j)")
        ax = axes[row, 1]
        idx = s.top_traversals(top)  # labels that occur only
        ax.bar(range(len(idx)), s.traversal_counts[idx] / max(s.n_pairs, 1), color="#dd8452")
        ax.set_xticks(range(len(idx)), [s.traversal_vocab[i] or "self" for i in idx], rotation=60)
        ax.set_title(f"{name}: {len(idx)} most frequent traversal labels")
    fig.tight_layout()
    return save(fig, path)
