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


def _draw_arcs(ax, heads: np.ndarray, words: Sequence[str] | None = None, fontsize: float = 8,
               words_share: float = 0.0) -> None:
    """Dependency arcs over positions 0..n-1 (x axis, the heatmap's columns), head → dependent,
    ROOT as a vertical stub; a position with head -1 (``<s>``, ``</s>``: no word of the tree) has
    none. ``words`` are written in the lower ``words_share`` of the panel, one per column, under the
    arcs' feet."""
    from matplotlib.patches import FancyArrowPatch

    top = 1.0 / (1.0 - words_share)  # y from 0 to top; the words below y = base
    base = top * words_share
    for x, word in enumerate(words or []):
        ax.text(x, base * 0.97, word, rotation=90, ha="center", va="top", fontsize=fontsize)
    for dep, head in enumerate(heads):
        if head < 0:
            continue
        if head == 0:
            ax.annotate("", xy=(dep, base + 0.03), xytext=(dep, top), arrowprops=dict(arrowstyle="->", lw=1))
            continue
        h = head - 1
        ax.add_patch(FancyArrowPatch((h, base + 0.03), (dep, base + 0.03),
                                     connectionstyle=f"arc3,rad={-0.6 if h < dep else 0.6}",
                                     arrowstyle="->", mutation_scale=8, lw=0.9, color="#333333"))
    ax.set_xlim(-0.5, len(heads) - 0.5)
    ax.set_ylim(0, top)
    ax.axis("off")


MAX_PANEL_INCHES = 20.0
"""The largest side of one head's heatmap (at 100 dpi: 2,000 pixels)."""
INCHES_PER_TOKEN = 0.32
"""The side of one cell of a heatmap: room for a label in 10-point type."""
FONT = 10
"""Points of the positions' labels (the titles are a point or two larger): readable when a wide
figure is shown shrunk to a screen."""
SPECIALS = {"<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]"}
"""Labels that are no piece of text: shown as they are."""


def readable_pieces(tokens: Sequence[str]) -> list[str]:
    """Labels of sentencepiece pieces without its ``▁`` word mark: a word's first piece as it is
    spelled (``▁God`` → ``God``), a piece that continues a word after a ``·`` (``s`` of ``▁heaven s``
    → ``·s``), a lone ``▁`` (a word boundary with no letters) as ``␣``; labels with no ``▁`` anywhere
    (words, or another tokenizer's) are kept as they are, and so are :data:`SPECIALS`."""
    if not any(str(t).startswith("▁") for t in tokens):
        return [str(t) for t in tokens]
    shown = []
    for token in map(str, tokens):
        if token in SPECIALS:
            shown.append(token)
        elif token == "▁":
            shown.append("␣")
        elif token.startswith("▁"):
            shown.append(token[1:])
        else:
            shown.append("·" + token)
    return shown


def _explain(fig, heads: bool, pieces: bool, below_inches: float) -> None:
    """The key under the heatmaps (``below_inches`` under the lowest one: its labels): what a row
    and a column are, the arcs' direction, the boxes."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="none", label="row: the query position (attending); column: the key (attended)")]
    if heads:
        handles += [Line2D([], [], color="#333333", marker=">", markersize=6, lw=1,
                           label="arc: from a head to its dependent (arrowhead at the dependent); "
                                 "arrow from the top: the root"),
                    Line2D([], [], color="none", marker="s", markerfacecolor="none", markeredgecolor="#d62728",
                           markersize=9, label="red box: each row's head in the tree")]
    if pieces:
        handles.append(Line2D([], [], color="none", label="·x: a piece that continues the word before it; ␣: a lone "
                                                          "word boundary"))
    bottom = min(ax.get_position().y0 for ax in fig.axes)
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, bottom - below_inches / fig.get_figheight()),
               frameon=False, fontsize=FONT, handlelength=1.5)


def plot_attention(probs: np.ndarray, tokens: Sequence[str], path: str | Path, *,
                   heads: np.ndarray | None = None, head_names: Sequence[str] | None = None,
                   title: str | None = None, columns: int = 4) -> Path:
    """Heatmaps of attention heads over one sentence, with its dependency tree.

    Above each heatmap, on its own columns, the tree: the positions' labels and the arcs over them.
    Every head is drawn on one colour scale, from 0 to the largest weight of any head (the heads
    are compared), with one colour bar; a key under the heatmaps says what rows, columns, arcs and
    boxes are. Sentencepiece labels are written without their ``▁`` (:func:`readable_pieces`).

    Args:
        probs: ``[H, n, n]`` (or ``[n, n]``) attention probabilities, row i attending to column j.
        tokens: ``[n]`` labels of the positions.
        path: output file (``.png`` or ``.svg``).
        heads: ``[n]`` 1-based dependency heads of the positions (0 = ROOT, -1 = not a word of
            the tree); draws arcs and boxes.
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
    labels = readable_pieces(tokens)
    cols = min(columns, n_heads)
    rows = -(-n_heads // cols)
    size = min(max(3.0, INCHES_PER_TOKEN * n), MAX_PANEL_INCHES)  # a long sentence: labels thinned
    every = -(-n // int(MAX_PANEL_INCHES / INCHES_PER_TOKEN))  # label every position up to ~60, then every k-th
    shown = [t if k % every == 0 else "" for k, t in enumerate(labels)]
    # above each heatmap: the labels (as tall as the longest), then the arcs, then the head's name
    words_inches = 0.11 * max((len(t) for t in shown), default=1) + 0.1
    tree_inches = (words_inches + min(0.3 * size, 2.5)) if heads is not None else 0.0
    fig = plt.figure(figsize=(size * cols * 1.15 + 1.2, (size + tree_inches + 1.0) * rows + 0.4))
    grid = fig.add_gridspec(rows, cols, hspace=(tree_inches + 1.0) / size, wspace=0.35)
    if heads is not None:
        heads = np.asarray(heads)
        word_rows = np.flatnonzero(heads >= 0)  # positions of the tree's words: one box each
        gold = np.where(heads > 0, heads - 1, np.arange(n))[word_rows]
    top = max(float(probs.max()), 1e-9)  # one scale for every head, fitted to the weights drawn
    panels, image = [], None
    for k in range(n_heads):
        ax = fig.add_subplot(grid[k // cols, k % cols])
        panels.append(ax)
        image = ax.imshow(probs[k], cmap="Blues", vmin=0, vmax=top)
        ax.set_yticks(range(0, n, every), labels[::every], fontsize=FONT)
        ax.set_xticks(range(0, n, every), labels[::every], rotation=90, fontsize=FONT)
        ax.set_ylabel("query", fontsize=FONT)
        ax.set_xlabel("key", fontsize=FONT)
        name = head_names[k] if head_names else f"head {k}"
        if heads is None:
            ax.set_title(name, fontsize=FONT + 1)
            continue
        ax.scatter(gold, word_rows, marker="s", s=(72 * 0.5 * size / max(n, 1)) ** 2,
                   facecolors="none", edgecolors="#d62728", linewidths=0.8)
        tree = ax.inset_axes([0, 1.0, 1, tree_inches / size])  # the heatmap's x scale: columns line up
        _draw_arcs(tree, heads, shown, FONT, words_share=words_inches / tree_inches)
        tree.set_title(name, fontsize=FONT + 1)
    bar = fig.colorbar(image, ax=panels, fraction=0.03 / cols, pad=0.02, shrink=min(1.0, 0.9 / rows + 0.1))
    bar.ax.tick_params(labelsize=FONT - 1)
    bar.set_label("attention weight (one scale for every head)", fontsize=FONT)
    _explain(fig, heads is not None, labels != [str(t) for t in tokens], words_inches + 0.4)
    if title:
        fig.suptitle(title, fontsize=FONT + 2, y=1.0 + 0.45 / fig.get_figheight())  # above the heads' names
    return save(fig, path)


def _layout(tree: Tree, depth: int, leaves: list[str], nodes: list, edges: list) -> float:
    """Places ``tree``: leaves at consecutive x, inner nodes above the mean x of their children.

    Appends ``(x, depth, text, is_leaf)`` to ``nodes`` and ``((x, depth), (x_child, depth + 1))`` to
    ``edges``; returns the node's x.
    """
    if tree.is_leaf or not tree.children:
        x = float(len(leaves))
        leaves.append(tree.word if tree.word is not None else tree.label)  # (a leaf's word)
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
