"""The matplotlib set-up every plot of synattn shares: a file-only backend, saving atomically, and
a note above every figure saved within :func:`noted` (a toy study's plots say they are a toy's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

_NOTES: list[str] = []
"""The notes of the :func:`noted` blocks entered, innermost last."""

TOY_NOTE = ("TOY RUN: tiny data, model and budget, a smoke test of the pipeline; its numbers say nothing "
            "about the methods")
"""The note of a ``--toy`` study's plots."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only; never needs a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def noted(note: str | None) -> Iterator[None]:
    """Every figure :func:`save` writes within the block gets ``note`` in bold red above its titles
    (None: no note)."""
    if note is None:
        yield
        return
    _NOTES.append(note)
    try:
        yield
    finally:
        _NOTES.pop()


def _add_note(fig, note: str) -> None:
    """``note`` above everything else of ``fig`` (its titles and suptitle included)."""
    fig.canvas.draw()  # (the texts' places are known once drawn)
    renderer = fig.canvas.get_renderer()
    height = fig.bbox.height
    tops = [artist.get_window_extent(renderer).y1 / height
            for artist in [*fig.texts, *(ax.title for ax in fig.axes if ax.get_title())] if artist.get_text()]
    fig.text(0.5, max([1.0, *tops]) + 0.12 / fig.get_figheight(), note, ha="center", va="bottom",
             fontsize=10, fontweight="bold", color="#b2182b")


def save(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix: .png, .svg, .pdf) and close it; within
    :func:`noted`, with its note above the figure."""
    from synattn.io import atomic_write

    path = Path(path)
    try:
        if _NOTES:
            _add_note(fig, _NOTES[-1])
        with atomic_write(path, "wb") as f:
            fig.savefig(f, dpi=dpi, format=path.suffix.lstrip(".") or "png", bbox_inches="tight")
    finally:
        pyplot().close(fig)
    return path
