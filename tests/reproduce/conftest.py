"""Fixtures of the studies' tests."""

from __future__ import annotations

import numpy as np
import pytest

from synattn.trees.conllu_io import write_conllu
from synattn.trees.dependency import DependencyTree


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    """``--src-trees`` of a tiny made-up treebank (train 40, dev 8 sentences of five words)."""
    folder, rng = tmp_path_factory.mktemp("treebank"), np.random.default_rng(0)
    nouns, verbs = "cat dog bird farmer child river".split(), "saw found liked carried".split()
    paths = {}
    for split, n in (("train", 40), ("dev", 8)):
        trees = [DependencyTree(["the", str(rng.choice(nouns)), str(rng.choice(verbs)), "a", str(rng.choice(nouns))],
                                np.array([2, 3, 0, 5, 3]), upos=["DET", "NOUN", "VERB", "DET", "NOUN"])
                 for _ in range(n)]
        paths[split] = folder / f"{split}.conllu"
        write_conllu(trees, paths[split])
    return ["--src-trees", *[f"{s}={p}" for s, p in paths.items()]]
