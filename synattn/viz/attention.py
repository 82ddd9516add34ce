"""Attention heatmaps with the dependency tree drawn over them, and constituency trees, as images.

``plot_attention`` draws one heatmap per head (rows attend to columns), marks each row's gold head
with a box, and draws the dependency arcs above the heatmaps, so one sees at a glance whether a
head follows the tree. ``plot_constituency`` draws a bracketed tree (e.g. a Tree Transformer parse).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from synattn.trees.constituency import Tree
from synattn.viz.figure import pyplot, save


def _draw_arcs(ax, heads: np.ndarray) -> None:
    """Dependency arcs over positions 0..n-1 (x axis), head → dependent, ROOT as a vertical stub."""
    from matplotlib.patches import FancyArrowPatch

    top = 1.0
    for dep, head in enumerate(heads):
        if head == 0:
            ax.annotate("", xy=(dep, 0.05), xytext=(dep, top), arrowprops=dict(arrowstyle="->", lw=1))
            continue
        h = head - 1
        height = 0.15 + 0.8 * min(abs(h - dep) / max(len(heads) - 1, 1), 1.0)
        ax.add_patch(FancyArrowPatch((h, 0.05), (dep, 0.05), connectionstyle=f"arc3,rad={-0.6 if h < dep else 0.6}",
                                     arrowstyle="->", mutation_scale=8, lw=0.9, color="#333333"))
        top = max(top, height)
    ax.set_xlim(-0.5, len(heads) - 0.5)
    ax.set_ylim(0, 1.1)
    ax.axis("off")


MAX_PANEL_INCHES = 20.0
"""The largest side of one head's heatmap (at 100 dpi: 2,000 pixels)."""


def plot_attention(probs: np.ndarray, tokens: Sequence[str], path: str | Path, *,
                   heads: np.ndarray | None = None, head_names: Sequence[str] | None = None,
                   title: str | None = None, columns: int = 4) -> Path:
    """Heatmaps of attention heads over one sentence, with its dependency tree.

    Args:
        probs: ``[H, n, n]`` (or ``[n, n]``) attention probabilities, row i attending to column j.
        tokens: ``[n]`` labels of the positions.
        path: output file (``.png`` or ``.svg``).
        heads: ``[n]`` 1-based dependency heads of the positions (0 = ROOT); draws arcs and boxes.
        head_names: a title per heatmap (default ``head 0`` …).
        title: figure title.
        columns: heatmaps per row.
    """
    plt = pyplot()
    probs = np.asarray(probs, dtype=float)
    probs = probs[None] if probs.ndim == 2 else probs
    n_heads, n = probs.shape[0], len(tokens)
    if probs.shape[1:] != (n, n):
        raise ValueError(f"attention of shape {probs.shape} for {n} tokens")
    cols = min(columns, n_heads)
    rows = -(-n_heads // cols)
    size = min(max(2.5, 0.28 * n), MAX_PANEL_INCHES)  # a long sentence: labels thinned, not a huge image
    every = -(-n // int(MAX_PANEL_INCHES / 0.28))  # label every position up to ~70, then every k-th
    extra = 1 if heads is not None else 0
    fig = plt.figure(figsize=(size * cols, size * rows + extra * size * 0.35 + 0.4))
    grid = fig.add_gridspec(rows + extra, cols, height_ratios=[0.35] * extra + [1] * rows)
    if heads is not None:
        heads = np.asarray(heads)
        gold = np.where(heads > 0, heads - 1, np.arange(n))
        for c in range(cols):
            _draw_arcs(fig.add_subplot(grid[0, c]), heads)
    for k in range(n_heads):
        ax = fig.add_subplot(grid[extra + k // cols, k % cols])
        image = ax.imshow(probs[k], cmap="Blues", vmin=0, vmax=max(probs[k].max(), 1e-9))
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=6)  # each head its own scale
        if heads is not None:
            ax.scatter(gold, np.arange(n), marker="s", s=(72 * 0.5 * size / max(n, 1)) ** 2,
                       facecolors="none", edgecolors="#d62728", linewidths=0.8)
        ax.set_xticks(range(0, n, every), list(tokens)[::every], rotation=90, fontsize=7)
        ax.set_yticks(range(0, n, every), list(tokens)[::every], fontsize=7)
        ax.set_title(head_names[k] if head_names else f"head {k}", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path)


def _layout(tree: Tree, depth: int, leaves: list[str], nodes: list, edges: list) -> float:
    """Places ``tree``: leaves at consecutive x, inner nodes above the mean x of their children.

    Appends ``(x, depth, text, is_leaf)`` to ``nodes`` and ``((x, depth), (x_child, depth + 1))`` to
    ``edges``; returns the node's x.
    """
    if tree.is_leaf or not tree.children:
        x = float(len(leaves))
        leaves.append(tree.word if tree.is_leaf else tree.label)
        nodes.append((x, depth, leaves[-1], True))
        return x
    xs = [_layout(child, depth + 1, leaves, nodes, edges) for child in tree.children]
    x = float(np.mean(xs))
    nodes.append((x, depth, tree.label or "·", False))
    edges.extend(((x, depth), (cx, depth + 1)) for cx in xs)
    return x


def plot_constituency(tree: Tree, path: str | Path, title: str | None = None) -> Path:
    """Draw a bracketed tree top-down, words in sentence order from left to right."""
    plt = pyplot()
    nodes: list = []
    edges: list = []
    leaves: list[str] = []
    _layout(tree, 0, leaves, nodes, edges)
    deepest = max(d for _, d, _, _ in nodes)
    fig, ax = plt.subplots(figsize=(max(4, 0.7 * len(leaves)), 0.6 * (deepest + 1) + 0.8))
    for (x0, d0), (x1, d1) in edges:
        ax.plot([x0, x1], [-d0, -d1], color="#555555", lw=0.8)
    for x, d, text, is_leaf in nodes:
        ax.text(x, -d, text, ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="#dddddd" if is_leaf else "#4c72b0"))
    ax.set_xlim(-0.7, len(leaves) - 0.3)
    ax.set_ylim(-deepest - 0.6, 0.6)
    ax.axis("off")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return save(fig, path)
