"""Monotonic alignments of two sequences: :class:`AlignmentCRF` (:mod:`~synattn.structs.alignment.crf`).

``synattn.structs.alignment`` was that module itself: its names are still read here.
"""

from .crf import AlignmentCRF

__all__ = ["AlignmentCRF"]


def __getattr__(name: str):
    """The other names of the alignment module, for code written against its old path."""
    from . import crf

    if not name.startswith("__") and hasattr(crf, name):
        return getattr(crf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
