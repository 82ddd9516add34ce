"""Second-order (sibling) dependency trees by enumeration: the sibling pairs of a tree and the
brute-force CRF quantities."""

from __future__ import annotations

import torch

from tests.helpers.trees import all_trees


def sibling_pairs(heads: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(h, s, m)`` for every pair of adjacent dependents ``s`` (inner), ``m`` of ``h`` on one side."""
    pairs = []
    for h in range(len(heads) + 1):
        kids = [d for d, hd in enumerate(heads, 1) if hd == h]
        right = [d for d in kids if d > h]  # ascending: nearest first
        left = [d for d in kids if d < h][::-1]
        for side in (right, left):
            pairs += [(h, s, m) for s, m in zip(side, side[1:])]
    return pairs


def brute_force(scores, siblings, n, multiroot):
    """log Z, arc and sibling marginals, the best score and every tree's score for one sentence."""
    trees = all_trees(n, True, multiroot)
    tree_scores = []
    for heads in trees.tolist():
        total = sum(scores[h, d] for d, h in enumerate(heads, 1))
        total = total + sum(siblings[h, s, m] for h, s, m in sibling_pairs(heads))
        tree_scores.append(total)
    tree_scores = torch.stack(tree_scores)
    log_z = torch.logsumexp(tree_scores, 0)
    prob = (tree_scores - log_z).exp()
    arcs, sibs = torch.zeros_like(scores), torch.zeros_like(siblings)
    for p, heads in zip(prob, trees.tolist()):
        for d, h in enumerate(heads, 1):
            arcs[h, d] += p
        for h, s, m in sibling_pairs(heads):
            sibs[h, s, m] += p
    return log_z, arcs, sibs, tree_scores, trees
