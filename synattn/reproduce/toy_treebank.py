"""A tiny English treebank the package carries, so that ``synattn reproduce STUDY --toy`` runs the
studies that train on a treebank (``supervised-head``, ``tree-transformer``) without
``--src-trees``.

Six hand-made sentence patterns with their Universal Dependencies trees (determiners, adjectives,
an indirect object, prepositional phrases, a relative clause, a coordination; final punctuation
as ``PUNCT``), each filled in with words taken in turn from short lists: 40 training, 12 dev and 12
test sentences. Its numbers mean nothing (the toy's never do); it makes every step of a study run.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle
from pathlib import Path

import numpy as np

from synattn.trees.dependency import DependencyTree

# word/UPOS/head/deprel per word; {NOUN}, {ADJ}, {VERB} are filled from the lists below
PATTERNS = (
    "The/DET/3/det {ADJ}/ADJ/3/amod {NOUN}/NOUN/4/nsubj {VERB}/VERB/0/root a/DET/7/det "
    "{ADJ}/ADJ/7/amod {NOUN}/NOUN/4/obj ./PUNCT/4/punct",
    "A/DET/2/det {NOUN}/NOUN/3/nsubj walked/VERB/0/root to/ADP/7/case the/DET/7/det "
    "{ADJ}/ADJ/7/amod {NOUN}/NOUN/3/obl ./PUNCT/3/punct",
    "The/DET/2/det {NOUN}/NOUN/3/nsubj gave/VERB/0/root the/DET/5/det {NOUN}/NOUN/3/iobj "
    "a/DET/7/det {NOUN}/NOUN/3/obj ./PUNCT/3/punct",
    "Birds/NOUN/2/nsubj sing/VERB/0/root in/ADP/6/case the/DET/6/det {ADJ}/ADJ/6/amod "
    "{NOUN}/NOUN/2/obl at/ADP/9/case the/DET/9/det dawn/NOUN/2/obl ./PUNCT/2/punct",
    "The/DET/2/det {NOUN}/NOUN/8/nsubj that/PRON/5/obj she/PRON/5/nsubj {VERB}/VERB/2/acl:relcl "
    "was/AUX/8/cop very/ADV/8/advmod {ADJ}/ADJ/0/root ./PUNCT/8/punct",
    "He/PRON/2/nsubj {VERB}/VERB/0/root the/DET/5/det {ADJ}/ADJ/5/amod {NOUN}/NOUN/2/obj "
    "and/CCONJ/8/cc she/PRON/8/nsubj {VERB}/VERB/2/conj the/DET/10/det {NOUN}/NOUN/8/obj ./PUNCT/2/punct",
)
WORDS = {
    "NOUN": "farmer bird child river teacher letter garden city shepherd door box merchant".split(),
    "ADJ": "old small quiet green heavy bright".split(),
    "VERB": "saw found liked carried watched opened painted".split(),
}
SIZES = {"train": 40, "dev": 12, "test": 12}


def toy_trees(count: int, start: int = 0) -> list[DependencyTree]:
    """``count`` sentences, the patterns in turn, each slot filled with the next word of its list
    (``start`` skips as many sentences first, so that splits differ)."""
    words = {slot: cycle(values) for slot, values in WORDS.items()}
    trees = []
    for k in range(start + count):
        tokens = [t.rsplit("/", 3) for t in PATTERNS[k % len(PATTERNS)].split()]
        forms = [next(words[w[1:-1]]) if w.startswith("{") else w for w, _, _, _ in tokens]
        if k >= start:
            trees.append(DependencyTree(forms, np.array([int(h) for _, _, h, _ in tokens]),
                                        [r for _, _, _, r in tokens], [u for _, u, _, _ in tokens],
                                        ["_"] * len(tokens), sent_id=str(k - start + 1), text=" ".join(forms)))
    return trees


def write_toy_treebank(folder: Path, write: Callable[[Path, str], object] | None = None) -> dict[str, str]:
    """Writes ``folder/{train,dev,test}.conllu`` (atomically, or with ``write(path, text)``: a
    study's :meth:`~synattn.reproduce.study.Context.write`) and returns ``{split: path}``."""
    import io

    from synattn.io import atomic_write
    from synattn.trees.conllu_io import write_conllu

    paths, start = {}, 0
    for split, count in SIZES.items():
        path = folder / f"{split}.conllu"
        text = io.StringIO()
        write_conllu(toy_trees(count, start), text)
        if write is not None:
            write(path, text.getvalue())
        else:
            with atomic_write(path) as f:
                f.write(text.getvalue())
        paths[split], start = str(path.resolve()), start + count
    return paths
