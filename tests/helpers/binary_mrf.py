"""Exact marginals of a small pairwise Markov random field over binary variables, by enumerating
every assignment: what the approximate second-order inferences approximate."""

from __future__ import annotations

import itertools
import math


def exact_marginals(unary: dict, factors: dict) -> dict:
    """``p(z_v = 1)`` for every variable ``v`` of ``unary`` (its score), under
    ``p(z) ∝ exp(Σ_v unary[v] z_v + Σ_{(a, b)} factors[a, b] z_a z_b)`` (one weight per unordered pair)."""
    names = list(unary)
    weights, on = [], {v: 0.0 for v in names}
    for z in itertools.product((0, 1), repeat=len(names)):
        x = dict(zip(names, z))
        w = math.exp(sum(unary[v] * x[v] for v in names) + sum(f * x[a] * x[b] for (a, b), f in factors.items()))
        weights.append(w)
        for v in names:
            on[v] += w * x[v]
    total = sum(weights)
    return {v: on[v] / total for v in names}
