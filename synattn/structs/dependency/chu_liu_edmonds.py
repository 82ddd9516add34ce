"""Chu-Liu-Edmonds (Chu and Liu 1965; Edmonds 1967): the best non-projective tree, per sentence on
the CPU, with masked arcs and the single-root constraint."""

from __future__ import annotations

import numpy as np

from ..constants import NEG


def chu_liu_edmonds(scores: np.ndarray) -> np.ndarray:
    """Best arborescence rooted at node 0 of a dense graph (multi-root).

    Args:
        scores: ``[n+1, n+1]`` float64 ``scores[h, d]``; node 0 is ROOT.

    Returns:
        ``[n+1]`` heads (``heads[0] = -1``).
    """
    n1 = scores.shape[0]
    s = scores.astype(np.float64).copy()
    low = -np.abs(s).max() * 4 * n1 - 1.0  # below any tree score: "no arc"
    np.fill_diagonal(s, low)
    s[:, 0] = low
    heads = s.argmax(0)
    heads[0] = -1
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    # contract the cycle into one node c (the last index of the smaller graph)
    in_cycle = np.zeros(n1, dtype=bool)
    in_cycle[cycle] = True
    rest = np.flatnonzero(~in_cycle)  # keeps ROOT first
    m = len(rest)
    cyc = np.array(cycle)
    cycle_score = s[heads[cyc], cyc]  # [k]
    enter = s[np.ix_(rest, cyc)] - cycle_score  # [m, k]: replace v's cycle arc by h -> v
    leave = s[np.ix_(cyc, rest)]  # [k, m]
    small = np.full((m + 1, m + 1), low)
    small[:m, :m] = s[np.ix_(rest, rest)]
    small[:m, m] = enter.max(1)
    small[m, :m] = leave.max(0)
    sub = chu_liu_edmonds(small)
    out = heads.copy()
    for j in range(1, m):  # nodes outside the cycle
        h = sub[j]
        out[rest[j]] = rest[h] if h < m else cyc[leave[:, j].argmax()]
    h = sub[m]  # the arc entering the cycle breaks it at one node
    out[cyc[enter[h].argmax()]] = rest[h]
    return out


def _find_cycle(heads: np.ndarray) -> list[int] | None:
    n1 = len(heads)
    color = np.zeros(n1, dtype=np.int64)  # 0 unseen, 1 on the current path, 2 done
    color[0] = 2
    for start in range(1, n1):
        path, v = [], start
        while color[v] == 0:
            color[v] = 1
            path.append(v)
            v = heads[v]
        if color[v] == 1:
            return path[path.index(v):]
        color[path] = 2
    return None


def best_tree(scores: np.ndarray, multiroot: bool) -> np.ndarray:
    """Heads ``[n]`` of words ``1..n`` in the best non-projective tree of ``scores [n+1, n+1]``.

    Masked arcs (``<= NEG``, also ``-inf``) get a score below every tree without them, and for a
    single root every root arc a penalty above any difference of tree scores, both computed from
    the largest unmasked score only (so that neither becomes infinite): the best tree avoids
    masked arcs if it can and has exactly one root arc.
    """
    s = scores.astype(np.float64).copy()
    n1 = s.shape[0]
    masked = ~(s > NEG)  # (NaN too)
    big = np.abs(np.where(masked, 0.0, s)).max() + 1.0
    penalty = 0.0 if multiroot else 2.0 * n1 * big
    s[masked] = -4.0 * n1 * (big + penalty)  # below any tree without masked arcs
    if not multiroot:
        s[0, 1:] -= penalty
    return chu_liu_edmonds(s)[1:]
