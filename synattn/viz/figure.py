"""The matplotlib set-up every plot of synattn shares: a file-only backend, saving atomically."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only; never needs a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix: .png, .svg, .pdf) and close it."""
    from synattn.io import atomic_write

    path = Path(path)
    try:
        with atomic_write(path, "wb") as f:
            fig.savefig(f, dpi=dpi, format=path.suffix.lstrip(".") or "png", bbox_inches="tight")
    finally:
        pyplot().close(fig)
    return path
