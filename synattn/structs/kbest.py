"""Exact k-best structures by Lawler's (1972) partition scheme over constrained argmaxes.

The best structure ``y`` of a subspace (a set of constraints) is found by the dynamic program's
own argmax with the excluded parts masked. The rest of the subspace splits into disjoint
subspaces, one per free part ``i`` of ``y`` (in a fixed order): parts before ``i`` keep ``y``'s
choice, part ``i`` must differ from it. Every other structure of the subspace lies in exactly
one of them, so popping the best of all open subspaces ``k`` times, each time splitting the one
popped, lists the ``k`` best exactly (ties in the argmax's own order). Each round solves the
subspaces opened in the previous one, for all batch elements, in one batched argmax.

:func:`lawler` is generic: a problem is a tuple of tensors (the constraints), ``solve`` gives the
best of many problems at once, ``split`` the subspaces left after a structure.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import torch

from .arguments import kbest_count

Constraints = tuple[torch.Tensor, ...]


def lawler(k: int, initial: Constraints,
           solve: Callable[[torch.Tensor, Constraints], tuple[list[float], torch.Tensor]],
           split: Callable[[int, torch.Tensor, Constraints], Constraints],
           empty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best structures of each batch element, best first.

    Args:
        k: how many (``>= 1``).
        initial: constraints ``[B, ...]`` of each batch element's whole space.
        solve: ``(sents [M], constraints [M, ...]) -> (best scores, a list of M floats with
            -inf where nothing is allowed; structures [M, ...])``.
        split: ``(b, structure, constraints of its subspace) -> constraints [m, ...]`` of the
            subspaces of what is left (``m`` may be 0).
        empty: the structure that pads the lists (``-1`` heads, an all-zero chart).

    Returns:
        ``scores [B, K]`` (float64, ``-inf`` where fewer than ``K`` exist) and structures
        ``[B, K, ...]`` (``empty`` where missing), on the CPU. ``K = k`` unless every batch
        element has fewer than ``k`` structures: then ``K`` is the most any of them has (the
        columns past it would be padding only), so a ``k`` larger than the space costs nothing.
    """
    batch = initial[0].shape[0]
    k = kbest_count(k, batch, empty.numel() * empty.element_size())
    found: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(batch)]
    heaps: list[list] = [[] for _ in range(batch)]
    counter = 0
    todo: list[tuple[torch.Tensor, Constraints]] = [(torch.arange(batch), initial)]
    for j in range(k):
        todo = [(s, c) for s, c in todo if len(s)]
        if not todo and not any(heaps):  # every structure is listed: the rest stays padding
            break
        if todo:
            sents = torch.cat([s for s, _ in todo])
            constraints = tuple(torch.cat(parts) for parts in zip(*(c for _, c in todo)))
            best, arg = solve(sents, constraints)
            for m, b in enumerate(sents.tolist()):
                if best[m] > -float("inf"):
                    heapq.heappush(heaps[b], (-best[m], counter, arg[m],
                                              tuple(c[m] for c in constraints)))
                    counter += 1
        todo = []
        for b in range(batch):
            if not heaps[b]:
                continue
            neg, _, y, constraint = heapq.heappop(heaps[b])
            found[b].append((-neg, y))
            if j < k - 1:
                subs = split(b, y, constraint)
                todo.append((torch.full((subs[0].shape[0],), b, dtype=torch.long), subs))
    width = max((len(f) for f in found), default=0) if all(len(f) < k for f in found) else k
    scores = torch.full((batch, width), -float("inf"), dtype=torch.float64)
    structures = empty.expand(batch, width, *empty.shape).clone()
    for b, listed in enumerate(found):
        for j, (score, y) in enumerate(listed):
            scores[b, j], structures[b, j] = score, y
    return scores, structures
