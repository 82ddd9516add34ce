"""Compiled CPU kernel (numba) of one step of :class:`synattn.structs.Autoregressive`'s beam
search: the ``k`` best children of the beam.

The PyTorch path adds each prefix's score to its children's log-probabilities (``[B, W, C]``,
float64) and takes ``topk`` over the ``W·C`` children of each batch element. On a CPU that
``topk`` is the largest cost of the step besides the model (a selection over fresh values each
step, its branches unpredictable: about four times what the same call takes on values it has
just seen). Here one pass per batch element keeps the ``k`` best children in a sorted buffer: a
child enters only if it beats the buffer's last entry, a single comparison for most of them.
The sums are the same float64 additions as the PyTorch path's (``scores[b, w] + logp[b, w, c]``,
``logp`` widened to float64), so the values are equal; ties keep the smaller flat index
``w·C + c`` first.
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
