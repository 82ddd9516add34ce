"""Compiled CPU kernels (numba) of :class:`synattn.structs.Autoregressive`'s searches: the ``k``
best children of the beam at one step of beam search, and greedy decoding's pass over its steps.

The PyTorch path adds each prefix's score to its children's log-probabilities (``[B, W, C]``,
float64) and takes the ``k`` best of the ``W·C`` children of each batch element (a stable sort:
``topk`` orders exact ties arbitrarily). On a CPU that selection is the largest cost of the step
besides the model (``topk``, measured: a selection over fresh values each step, its branches
unpredictable, about four times what the same call takes on values it has just seen). Here
one pass per batch element keeps the ``k`` best children in a sorted buffer: a child enters
only if it beats the buffer's last entry, a single comparison for most of them.
The sums are the same float64 additions as the PyTorch path's (``scores[b, w] + logp[b, w, c]``,
``logp`` widened to float64), so the values are equal; on both paths ties keep the smaller
flat index ``w·C + c`` first.

Greedy decoding picks each step's token by an argmax of the raw logits and normalises the steps
at the end; :func:`greedy_settle` then checks each token against its row of ``log p`` (no
earlier entry equal to it, or NaN, where ``argmax`` of ``log p`` would take that one instead),
sums the tokens' ``log p`` in float64 in step order (``cumsum``'s additions) and marks the rows
scored ``-inf``: one scalar pass in place of a reduction over every row and five small tensor
operations. (A branch-free version that numba vectorises was slower in the decode than the
PyTorch operations it replaces; this one stops at the first equal entry.)
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..backend import as_array


@numba.njit(cache=True, fastmath=False)
def _best_children(scores, logp, k):
    B, W, C = logp.shape
    best = np.empty((B, k), dtype=np.float64)
    beam = np.empty((B, k), dtype=np.int64)
    token = np.empty((B, k), dtype=np.int64)
    for b in range(B):
        filled = 0
        for w in range(W):
            s = scores[b, w]
            for c in range(C):
                v = s + np.float64(logp[b, w, c])
                if filled == k:
                    if not v > best[b, k - 1]:
                        continue
                    p = k - 1
                else:
                    p = filled
                    filled += 1
                while p > 0 and best[b, p - 1] < v:  # shift the worse entries down
                    best[b, p] = best[b, p - 1]
                    beam[b, p] = beam[b, p - 1]
                    token[b, p] = token[b, p - 1]
                    p -= 1
                best[b, p] = v
                beam[b, p] = w
                token[b, p] = c
    return best, beam, token


def best_children(scores: torch.Tensor, logp: torch.Tensor, k: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` best children (``k <= W·C``) of ``W`` prefixes per batch element, best first.

    Args:
        scores: ``[B, W]`` float64 prefix scores.
        logp: ``[B, W, C]`` their children's log-probabilities (float32 or float64).
        k: how many.

    Returns:
        ``best [B, k]`` float64 ``scores[b, w] + logp[b, w, c]``, the prefix ``w`` and the token
        ``c`` of each (``[B, k]`` int64).
    """
    best, beam, token = _best_children(as_array(scores), as_array(logp), k)
    return torch.from_numpy(best), torch.from_numpy(beam), torch.from_numpy(token)


@numba.njit(cache=True, fastmath=False)
def _greedy_settle(logp, tokens, start, scores, fresh, mark):
    B, S, C = logp.shape
    for b in range(B):
        total = scores[b]
        for t in range(S):
            token = tokens[b, start + t]
            v = logp[b, t, token]
            for c in range(token):
                u = logp[b, t, c]
                if u == v or u != u:
                    return False
            total = np.float64(v) if fresh and t == 0 else total + np.float64(v)
        scores[b] = total
        if mark and total == -np.inf:
            for t in range(tokens.shape[1]):
                tokens[b, t] = -1
    return True


def greedy_settle(logp: torch.Tensor, tokens: torch.Tensor, start: int, scores: torch.Tensor | None,
                  mark: bool) -> torch.Tensor | None:
    """Greedy decoding's pass over ``S`` steps whose tokens were taken by an argmax of the raw
    logits.

    Args:
        logp: ``[B, S, C]`` the steps' ``log p`` (float32 or float64; the raw logits when they are
            not normalised).
        tokens: ``[B, N]`` int64, the ``S`` steps' tokens at columns ``start..start+S-1``; with
            ``mark``, the rows scored ``-inf`` are set to ``-1`` in place.
        start: the first step's column in ``tokens``.
        scores: ``[B]`` float64 sums of the steps before (updated in place), or None for the
            first steps.
        mark: the last pass (mark the impossible rows).

    Returns:
        ``[B]`` float64 the tokens' ``log p`` summed in step order after ``scores``, or None where
        a token has an earlier ``log p`` equal to its own (or NaN): ``argmax`` of ``log p`` would
        take that one (a near-tie of the raw logits rounded into a tie). Only the earlier entries
        are read: the log-softmax subtracts the same numbers from a whole row, so no later entry
        exceeds the raw maximum's.
    """
    fresh = scores is None
    if scores is None:
        scores = torch.empty(logp.shape[0], dtype=torch.float64)
    if not _greedy_settle(as_array(logp), tokens.numpy(), start, scores.numpy(), fresh, mark):
        return None
    return scores
