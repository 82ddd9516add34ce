"""Hypothesis strategies shared by tests: a random dependency tree with a piece count per word."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


@st.composite
def trees_with_pieces(draw):
    """A random dependency tree (one or more roots) and a piece count per word."""
    n = draw(st.integers(1, 7))
    order = draw(st.permutations(list(range(n))))
    heads = np.zeros(n, dtype=np.int64)
    for rank, word in enumerate(order):  # each word hangs from an earlier word of `order` or ROOT
        if rank and draw(st.booleans()):
            heads[word] = order[draw(st.integers(0, rank - 1))] + 1
    pieces = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    return heads, pieces
