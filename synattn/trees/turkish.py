"""The Turkish Web Treebank (Google, ``pip install turkish-treebanks``) as dependency trees.

The package ships two CoNLL-U files (sections ``web`` and ``wiki``) next to its code. Its own
reader needs a protobuf runtime of 2020; this loader reads the files with ``read_conllu``
instead, and splits them the way the package does: within each section, sentence ``i``
(0-based) is in ``dev`` when ``i % 10 == 8``, in ``test`` when ``i % 10 == 9``, else in
``train``. Tokens are inflectional groups (a word's suffix groups are separate tokens joined by
``ig`` arcs), as in the treebank.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Literal

from synattn.errors import InputError, MissingDependencyError
from synattn.trees.conllu_io import read_conllu
from synattn.trees.dependency import DependencyTree

SECTIONS = ("web", "wiki")
_SPLITS = {"train": range(8), "dev": (8,), "test": (9,)}


def turkish_treebank_paths() -> dict[str, Path]:
    """Paths of the CoNLL-U file of each section, ``{"web": ..., "wiki": ...}``.

    Raises:
        MissingDependencyError: the ``turkish-treebanks`` package is not installed.
    """
    try:
        dist = importlib.metadata.distribution("turkish-treebanks")
    except importlib.metadata.PackageNotFoundError:
        raise MissingDependencyError("the Turkish Web Treebank", "turkish-treebanks") from None
    paths = {Path(f).stem: Path(str(dist.locate_file(f))) for f in dist.files or []
             if f.suffix == ".conllu"}
    if sorted(paths) != sorted(SECTIONS) or not all(p.is_file() for p in paths.values()):
        raise MissingDependencyError("the Turkish Web Treebank data files (web.conllu, "
                                     "wiki.conllu)", "--force-reinstall turkish-treebanks")
    return paths


def load_turkish_treebank(section: Literal["web", "wiki"] | None = None,
                          split: Literal["train", "dev", "test"] | None = None
                          ) -> list[DependencyTree]:
    """Read the Turkish Web Treebank (gold dependency trees) as ``DependencyTree``s.

    Args:
        section: ``"web"``, ``"wiki"``, or ``None`` for both (web first).
        split: ``"train"``, ``"dev"``, ``"test"``, or ``None`` for all sentences.

    Returns:
        The sentences of the section(s) and split, in file order.

    Raises:
        InputError: unknown section or split.
        MissingDependencyError: the package is not installed.
        TreebankError: a data file is malformed.

    Example:
        >>> dev = load_turkish_treebank("web", "dev")  # doctest: +SKIP
    """
    if section is not None and section not in SECTIONS:
        raise InputError(f"unknown section {section!r}; expected one of {SECTIONS}")
    if split is not None and split not in _SPLITS:
        raise InputError(f"unknown split {split!r}; expected one of {tuple(_SPLITS)}")
    paths = turkish_treebank_paths()
    trees = []
    for name in SECTIONS if section is None else (section,):
        section_trees = read_conllu(paths[name])
        trees += [t for i, t in enumerate(section_trees)
                  if split is None or i % 10 in _SPLITS[split]]
    return trees
