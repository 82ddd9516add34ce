"""Compiled CPU kernel (numba) for the Viterbi parse of :class:`synattn.structs.SentCFG` under
masks of (span, symbol) pairs: each sub-problem of its k-best list
(:func:`~synattn.structs.cky.kbest.labelled_kbest`), with back pointers instead of autograd.

The max-plus recursion of :mod:`synattn.structs.cky.cfg`, with ``in(i, i, NT+t) = terms[i, t]``
(a preterminal over one word) and, for a span ``i..j`` of ``w >= 2`` words and a nonterminal
``X``::

    beta(i, j, X) = max_{Y, Z} rules[X, Y, Z] + P(i, j, Y, Z),
    P(i, j, Y, Z) = max_{i <= k < j} in(i, k, Y) + in(k+1, j, Z)

where the left child is a preterminal when ``k = i`` and a nonterminal otherwise (likewise the
right one), so each ``(Y, Z)`` of ``P`` takes its maximum over the splits of its block only (as
:mod:`~synattn.structs.cky._cfg_kernels` sums them): ``O(n³·NT² + n²·NT·S²)`` per sentence.
``P`` keeps its best split, ``beta`` its best ``(k, Y, Z)``; the best root's parse is read back
top-down. A (span, symbol) pair that is not allowed is ``NEG``; every value is kept at least
``NEG``, so a sentence whose every parse uses a masked part scores at most
:data:`~synattn.structs.constants.IMPOSSIBLE`. Ties go to the first maximum (splits, then ``Y``,
then ``Z`` in increasing order). One sentence per ``numba.prange`` iteration, float64 inside.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..backend import as_array, set_threads
from ..constants import IMPOSSIBLE, NEG, SERIAL_WORK

_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _sentence(terms, rules, roots, allowed, n, NT, beta, back, P, PK, out):
    """Fill ``beta [n, n, S]`` and ``back [n, n, NT, 3]`` (``k, Y, Z``), write the best parse's
    labelled spans into ``out [N, N, S]`` (nothing if it is impossible); returns its score."""
    S = rules.shape[1]
    beta[:] = NEG
    for i in range(n):
        for y in range(NT, S):
            if allowed[i, i, y]:
                beta[i, i, y] = max(terms[i, y - NT], NEG)
    for w in range(2, n + 1):
        for i in range(n - w + 1):
            j = i + w - 1
            P[:] = -np.inf
            for k in range(i, j):
                y0, y1 = (NT, S) if k == i else (0, NT)  # left child i..k
                z0, z1 = (NT, S) if k + 1 == j else (0, NT)  # right child k+1..j
                for y in range(y0, y1):
                    left = beta[i, k, y]
                    for z in range(z0, z1):
                        v = left + beta[k + 1, j, z]
                        if v > P[y, z]:
                            P[y, z], PK[y, z] = v, k
            for x in range(NT):
                if not allowed[i, j, x]:
                    continue
                best, by, bz = -np.inf, 0, 0
                for y in range(S):
                    for z in range(S):
                        v = rules[x, y, z] + P[y, z]
                        if v > best:
                            best, by, bz = v, y, z
                if best > NEG:
                    beta[i, j, x] = best
                    back[i, j, x, 0], back[i, j, x, 1], back[i, j, x, 2] = PK[by, bz], by, bz
    score, root = -np.inf, 0
    for x in range(NT):
        v = roots[x] + beta[0, n - 1, x]
        if v > score:
            score, root = v, x
    if not score > IMPOSSIBLE:
        return score
    stack = np.empty((2 * n, 3), dtype=np.int64)  # (i, j, symbol) still to expand
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, n - 1, root
    top = 1
    while top:
        top -= 1
        i, j, x = stack[top, 0], stack[top, 1], stack[top, 2]
        out[i, j, x] = 1.0
        if i < j:
            k, y, z = back[i, j, x, 0], back[i, j, x, 1], back[i, j, x, 2]
            stack[top, 0], stack[top, 1], stack[top, 2] = i, k, y
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = k + 1, j, z
            top += 2
    return score


@numba.njit(cache=True, parallel=True, fastmath=False)
def _batch(terms, rules, roots, allowed, lengths, out):
    batch, N, T = terms.shape
    NT = roots.shape[1]
    S = NT + T
    best = np.empty(batch)
    for b in numba.prange(batch):
        n = lengths[b]
        beta, back = np.empty((n, n, S)), np.zeros((n, n, NT, 3), dtype=np.int64)
        P, PK = np.empty((S, S)), np.zeros((S, S), dtype=np.int64)
        best[b] = _sentence(terms[b], rules[b], roots[b], allowed[b], n, NT, beta, back, P, PK, out[b])
    return best


def viterbi(terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor, lengths: torch.Tensor,
            allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The best parse of checked, masked ``terms [B, N, T]``, ``rules [B, NT, S, S]``, ``roots
    [B, NT]`` (CPU) using only the (span, symbol) pairs of ``allowed [B, N, N, S]`` (bool;
    preterminals on one-word spans, nonterminals on wider ones).

    Returns:
        ``scores [B]`` (float64, ``-inf`` where no parse survives the masks) and the parses as
        labelled spans ``[B, N, N, S]`` in the terms' dtype (all 0 where none survives).
    """
    batch, N, T = terms.shape
    NT = roots.shape[1]
    n = lengths.long()
    set_threads(int((n ** 3).sum()) * NT * NT + int((n ** 2).sum()) * NT * (NT + T) ** 2, SERIAL_WORK)
    out = np.zeros((batch, N, N, NT + T))
    best = _batch(as_array(terms.double()), as_array(rules.double()), as_array(roots.double()),
                  as_array(allowed), as_array(n), out)
    best = torch.from_numpy(best)
    return torch.where(best > IMPOSSIBLE, best, -float("inf")), torch.from_numpy(out).to(terms.dtype)
