"""The demo's plots: learning curves of runs, the attachment of every encoder head, and a supervised
head's attention over a sentence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from synattn.viz.attention import plot_attention
from synattn.viz.figure import pyplot, save


def plot_learning_curves(runs: dict[str, str | Path], path: str | Path) -> Path:
    """Training and validation task losses (without auxiliary losses) of several runs against
    updates. Validation gets its own panel when some run validated twice or more; a run that
    validated once (the demo's runs, at the end) has that loss in its legend entry instead, not
    a panel of single dots."""
    from synattn.train import read_log

    logs = {name: (read_log(run, "train"), read_log(run, "valid")) for name, run in runs.items()}
    curves = any(len(valid) > 1 for _, valid in logs.values())
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(11 if curves else 6.5, 3.8), squeeze=False)
    axes = axes[0]
    for name, (train, valid) in logs.items():
        label = name
        if valid and not curves:
            last = valid[-1]
            label += f" (validation loss {last.get('task_loss', last['loss']):.2f} at update {last['step']})"
        axes[0].plot([r["step"] for r in train], [r.get("task_loss", r["loss"]) for r in train], label=label,
                     marker="o" if len(train) < 3 else None)  # a record or two: visible as dots
        if curves and valid:
            axes[1].plot([r["step"] for r in valid], [r.get("task_loss", r["loss"]) for r in valid],
                         marker="o", label=name)
    for ax, title in zip(axes, ("training task loss (label-smoothed)", "validation task loss")):
        ax.set_title(title)
        ax.set_xlabel("update")
        ax.set_ylabel("loss")
        ax.legend(fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def plot_head_attachment(tables: dict[str, dict], path: str | Path,
                         marks: dict[str, tuple[int, int]] | None = None,
                         mark_label: str = "the supervised head") -> Path:
    """Word-level attachment (UAS, %) of every encoder head of several models, one panel per model
    (``tables``: name → :func:`synattn.reproduce.heads.head_attachment`), all on one colour scale
    fitted to the scores (0 to the best head's, rounded up to 5 points: heads of 4 to 16% are told
    apart, and the panels compared); ``marks`` outlines a ``(layer, head)`` per model in red,
    ``mark_label`` saying what it is (under the panels)."""
    plt = pyplot()
    grids = {name: 100 * np.asarray(table["heads"]["encoder"])[..., 0] for name, table in tables.items()}  # [L, H]
    top = max(5.0, 5.0 * np.ceil(max(float(g.max()) for g in grids.values()) / 5.0))
    fig, axes = plt.subplots(1, len(tables), figsize=(4.6 * len(tables) + 0.8, 3.9), squeeze=False)
    image = None
    for ax, (name, grid) in zip(axes[0], grids.items()):
        image = ax.imshow(grid, vmin=0, vmax=top, cmap="viridis")
        for (layer, head), value in np.ndenumerate(grid):
            ax.text(head, layer, f"{value:.0f}", ha="center", va="center",
                    color="black" if value > 0.6 * top else "white", fontsize=10)
        if marks and name in marks:
            layer, head = marks[name]
            ax.add_patch(plt.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        ax.set_xticks(range(grid.shape[1]))
        ax.set_yticks(range(grid.shape[0]))
        ax.tick_params(labelsize=10)
        ax.set_xlabel("head", fontsize=10)
        ax.set_ylabel("layer", fontsize=10)
        ax.set_title(f"{name}\nUAS of each encoder head (%)", fontsize=10)
        if marks and name in marks:  # under the panel with the box: what the box is
            from matplotlib.patches import Patch

            ax.legend(handles=[Patch(fill=False, edgecolor="red", linewidth=2, label=f"red box: {mark_label}")],
                      loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.6 / grid.shape[0]), frameon=False,
                      fontsize=10)
    bar = fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    bar.set_label(f"UAS (%), one scale for every panel (0 to {top:.0f})", fontsize=10)
    bar.ax.tick_params(labelsize=9)
    return save(fig, path)


@torch.no_grad()
def plot_supervised_example(model, exp, path: str | Path, split: str = "test", max_pieces: int = 18) -> Path:
    """All heads of the layer holding the supervised head (the first layer in a model without one),
    over a short sentence of ``split`` (the first of 8 to ``max_pieces`` pieces without a lone ``▁``
    piece, where there is one), with the sentence's subword tree: a supervised head should follow
    the boxes (the tree's heads). The title names the sentence (its line in the split) and gives its
    text."""
    import textwrap

    import sentencepiece as spm

    from synattn.data.batching import PreparedDataset, collate
    from synattn.train.tasks import syntax_request_for

    dataset = PreparedDataset(exp.data, split)
    sp = spm.SentencePieceProcessor(model_file=str(Path(exp.data) / dataset.manifest["spm"]["src"]))
    lengths = dataset.fields["src_ids"].lengths
    candidates = np.flatnonzero((lengths >= 8) & (lengths <= max_pieces))
    lone = sp.piece_to_id("▁")  # a word boundary with no letters: hard to read in a plot
    clean = [i for i in candidates if lone not in dataset[int(i)]["src_ids"]]
    index = int((clean or candidates.tolist())[0]) if len(candidates) else int(np.argmin(lengths))
    request = syntax_request_for(model.config)
    batch = collate(dataset, np.array([index]), request)
    model.eval()
    out = model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax, tgt_syntax=batch.tgt_syntax,
                need_weights=True)
    supervised = model.config.encoder.supervised_head
    layer, head = (supervised.layer, supervised.head) if supervised else (0, -1)
    probs = out.attentions["encoder.self"][layer][0].float().numpy()  # [H, t, t]
    example = dataset[index]
    p = len(example["src_ids"])
    tokens = [sp.id_to_piece(int(i)) for i in example["src_ids"]]
    try:
        text = dataset.text("src")[index]
    except (OSError, IndexError):
        text = sp.decode([int(i) for i in example["src_ids"]])
    names = [f"layer {layer} head {h}" + (" (supervised)" if h == head else "") for h in range(probs.shape[0])]
    o = batch.src_offset
    title = (f"{split} sentence {index + 1} (line {index + 1} of {split}/src.txt): "
             + "\n".join(textwrap.wrap(repr(text), 90))
             + "\nencoder self-attention of the syntax model; red boxes: each piece's head in the subword tree")
    return plot_attention(probs[:, o:o + p, o:o + p], tokens, path, heads=example["src_heads"], head_names=names,
                          title=title, columns=2)
