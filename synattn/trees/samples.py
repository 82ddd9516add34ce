"""Small CoNLL-U treebanks shipped with synattn (``synattn/samples/``), for examples and first tries:
World English Bible verses (public domain) parsed by spaCy; their origin and licence are in
``synattn/samples/README.md``.

Example:
    >>> from synattn.trees import read_conllu
    >>> len(read_conllu(sample_conllu("dev")))
    50
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "samples"
"""Where the samples are installed."""

SPLITS = ("train", "dev")
"""The samples: ``train`` (200 sentences) and ``dev`` (50)."""


def sample_conllu(split: str = "dev") -> Path:
    """The path of the sample treebank ``split`` (one of :data:`SPLITS`).

    Raises:
        ValueError: an unknown split (the message lists the known ones).
    """
    if split not in SPLITS:
        raise ValueError(f"no sample treebank {split!r}; the samples are {', '.join(SPLITS)}")
    return FOLDER / f"{split}.conllu"
