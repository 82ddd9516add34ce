"""Slow, obviously-correct tree relations by explicit path search, and random tree generators.

Used by the tests and by ``benchmarks/bench_relations.py`` as the baseline of
:mod:`synattn.trees.relations`: the tree is an undirected graph over the words and an artificial
ROOT (node 0; word i is node i + 1), the path from i to j is found by breadth-first search, and
its moves are read off edge by edge (U when the next node is the current node's head, D otherwise)
before the sibling rule of docs/methods.md §1 rewrites a leading "UD".
"""

from __future__ import annotations

from collections import deque

import numpy as np

from synattn.trees.relations import FAR, MAX_DISTANCE, MAX_TRAVERSAL, traversal_vocab


def _bfs_parents(heads: list[int], source: int) -> list[int]:
    """BFS predecessor of every node (ROOT = 0, word i = i + 1) on the undirected tree graph."""
    n = len(heads)
    neighbours: list[list[int]] = [[] for _ in range(n + 1)]
    for word, head in enumerate(heads, start=1):
        neighbours[word].append(head)
        neighbours[head].append(word)
    pred = [-1] * (n + 1)
    pred[source] = source
    queue = deque([source])
    while queue:
        node = queue.popleft()
        for nxt in neighbours[node]:
            if pred[nxt] == -1:
                pred[nxt] = node
                queue.append(nxt)
    return pred


def reference_relations(heads: list[int] | np.ndarray) -> tuple[np.ndarray, list[list[str]]]:
    """Distance and traversal path string of every word pair by BFS, with the sibling rule.

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT.

    Returns:
        ``[n, n]`` int64 distances (edges of the BFS path) and n lists of n path strings
        (``""`` for i == j).
    """
    heads = [int(h) for h in heads]
    n = len(heads)
    dist = np.zeros((n, n), dtype=np.int64)
    paths = []
    for i in range(n):
        pred = _bfs_parents(heads, i + 1)
        row = []
        for j in range(n):
            nodes = [j + 1]  # walk back from j to i, then reverse
            while nodes[-1] != i + 1:
                nodes.append(pred[nodes[-1]])
            nodes.reverse()
            dist[i, j] = len(nodes) - 1
            moves = "".join("U" if node != 0 and heads[node - 1] == nxt else "D"
                            for node, nxt in zip(nodes, nodes[1:]))
            if moves.startswith("UD"):  # one step up, then down: through a sibling of i
                sibling = nodes[2] - 1  # 0-based word reached by the first D
                moves = ("L" if sibling < i else "R") + moves[2:]
            row.append(moves)
        paths.append(row)
    return dist, paths


def reference_labels(heads: list[int] | np.ndarray, max_distance: int = MAX_DISTANCE,
                     max_traversal: int = MAX_TRAVERSAL) -> tuple[np.ndarray, np.ndarray]:
    """Distance and traversal labels ``[n, n]`` of one sentence from :func:`reference_relations`."""
    index = {label: k for k, label in enumerate(traversal_vocab(max_traversal))}
    dist, paths = reference_relations(heads)
    trav = np.array([[index.get(p, index[FAR]) for p in row] for row in paths], dtype=np.int64)
    return np.minimum(dist, max_distance + 1), trav.reshape(dist.shape)


def random_heads(rng: np.random.Generator, n: int, roots: int = 1,
                 projective: bool = False) -> np.ndarray:
    """A random dependency tree over n words.

    Args:
        rng: numpy random generator.
        n: number of words (>= 1).
        roots: number of root words (1 <= roots <= n).
        projective: if True, a projective tree (no crossing arcs, roots not covered by any arc);
            else each word, in random order, attaches to a random earlier-placed word.

    Returns:
        ``[n]`` int64 1-based heads, 0 = ROOT.
    """
    heads = np.zeros(n, dtype=np.int64)
    if projective:
        cuts = np.sort(rng.choice(np.arange(1, n), size=roots - 1, replace=False))
        bounds = [0, *cuts.tolist(), n]
        for lo, hi in zip(bounds, bounds[1:]):
            _projective_span(rng, heads, lo, hi, 0)
        return heads
    order = rng.permutation(n)
    for k, word in enumerate(order):
        heads[word] = 0 if k < roots else order[rng.integers(k)] + 1
    return heads


def _projective_span(rng: np.random.Generator, heads: np.ndarray, lo: int, hi: int,
                     head: int) -> None:
    """Fills ``heads[lo:hi]`` with one projective subtree hanging from ``head`` (1-based)."""
    stack = [(lo, hi, head)]
    while stack:
        lo, hi, head = stack.pop()
        root = int(rng.integers(lo, hi))
        heads[root] = head
        for a, b in ((lo, root), (root + 1, hi)):  # split each side into consecutive dependents
            if a < b:
                cuts = sorted(rng.choice(np.arange(a + 1, b), size=int(rng.integers(b - a)),
                                         replace=False).tolist()) if b - a > 1 else []
                bounds = [a, *cuts, b]
                stack += [(x, y, root + 1) for x, y in zip(bounds, bounds[1:])]
