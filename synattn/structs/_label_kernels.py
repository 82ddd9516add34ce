"""Compiled CPU kernels (numba) that reduce labelled scores ``[B, X, Y, L]`` over their labels.

A labelled structure whose parts carry independent labels (labelled spans,
:mod:`synattn.structs.cky.labelled_spans`) reduces to the unlabelled one over one score per part:
``logsumexp_l s[..., l]`` for ``log Z``, ``max_l s[..., l]`` for the best structure. In PyTorch the
mask, the range check, the reduction and the dead-part test are each a pass over the labelled
scores (more time than the unlabelled dynamic program itself at torch-struct's sizes); here one
pass per part does all of them:

- :func:`reduce_labels`: per usable part ``(b, x, y)``, ``log-sum-exp``, maximum and first
  arg-maximum over the labels above the mask limit (:func:`~synattn.structs.scores.mask_impossible`'s
  rule), ``NEG`` for a part whose every label is masked, 0 for unusable parts; and, for the check
  of :func:`~synattn.structs.scores.check_scores`, whether a usable entry is NaN and the largest
  magnitude among the usable unmasked labels and the reduced scores;
- :func:`label_marginals`: ``μ[b, x, y] · softmax_l s[b, x, y, l]`` (0 for masked labels, dead or
  unusable parts), the labelled marginals from the unlabelled ones.

The labels are read in their own dtype (float32 or float64, no copy) and reduced in float64.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ._numba_math import exp
from .backend import as_array, set_threads
from .constants import NEG, SERIAL_WORK

_jit = numba.njit(cache=True, parallel=True, fastmath=False)


@_jit
def _reduce(s, usable, limit, lse, best, arg, nan, top):
    batch, X, Y, L = s.shape
    for b in numba.prange(batch):
        bad, t, e = 0, 0.0, np.empty(L)
        for i in range(X):
            for j in range(Y):
                if not usable[b, i, j]:
                    continue
                row, m, lo = s[b, i, j], -np.inf, np.inf
                for label in range(L):  # (selects, no branch: the loops vectorise)
                    x = np.float64(row[label])
                    bad += x != x
                    m = x if x > m else m
                    lo = x if x > limit and x < lo else lo
                if not m > limit:  # every label masked (or NaN): the part is forbidden
                    lse[b, i, j] = best[b, i, j] = NEG
                    continue
                for label in range(L):
                    x = np.float64(row[label])
                    e[label] = exp(x - m) if x > limit else 0.0
                a0 = a1 = a2 = a3 = 0.0  # (four partial sums: no chain of dependent adds)
                for label in range(0, L - L % 4, 4):
                    a0, a1 = a0 + e[label], a1 + e[label + 1]
                    a2, a3 = a2 + e[label + 2], a3 + e[label + 3]
                for label in range(L - L % 4, L):
                    a0 += e[label]
                k = 0
                while row[k] != m:  # the first best label
                    k += 1
                v = m + np.log((a0 + a1) + (a2 + a3))
                lse[b, i, j], best[b, i, j], arg[b, i, j] = v, m, k
                t = max(t, m, -lo, abs(v))
        nan[b], top[b] = bad > 0, t


@_jit
def _marginals(s, usable, limit, lse, mu, out):
    batch, X, Y, L = s.shape
    for b in numba.prange(batch):
        for i in range(X):
            for j in range(Y):
                p, z = np.float64(mu[b, i, j]), lse[b, i, j]
                if not usable[b, i, j] or z <= NEG or p == 0.0:
                    continue
                for label in range(L):
                    x = np.float64(s[b, i, j, label])
                    out[b, i, j, label] = p * exp(x - z) if x > limit else 0.0


def reduce_labels(scores: torch.Tensor, usable: torch.Tensor, limit: float
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool, float]:
    """One pass over float32/float64 CPU scores ``[B, X, Y, L]`` with ``usable [B, X, Y]``.

    Args:
        limit: entries ``<= limit`` are masked labels (``NEG``, or float16's minimum for scores
            cast from float16).

    Returns:
        ``lse [B, X, Y]`` (float64: :func:`label_marginals` reads it), ``best [B, X, Y]`` in the
        scores' dtype, ``arg [B, X, Y]`` (long), whether a usable entry is NaN and the largest
        magnitude of a usable unmasked label or reduced score.
    """
    batch, X, Y, L = scores.shape
    lse = torch.zeros(batch, X, Y, dtype=torch.float64)
    best = torch.zeros(batch, X, Y, dtype=scores.dtype)
    arg = torch.zeros(batch, X, Y, dtype=torch.long)
    nan, top = np.zeros(batch, dtype=np.bool_), np.zeros(batch)
    set_threads(scores.numel(), SERIAL_WORK)
    _reduce(as_array(scores), as_array(usable), limit, lse.numpy(), best.numpy(), arg.numpy(), nan, top)
    return lse, best, arg, bool(nan.any()), float(top.max(initial=0.0))


def label_marginals(scores: torch.Tensor, usable: torch.Tensor, limit: float, lse: torch.Tensor,
                    mu: torch.Tensor) -> torch.Tensor:
    """``[B, X, Y, L]`` labelled marginals in the scores' dtype from the unlabelled ones
    ``mu [B, X, Y]`` and :func:`reduce_labels`'s ``lse`` (no gradient)."""
    out = torch.zeros(scores.shape, dtype=scores.dtype)
    set_threads(scores.numel(), SERIAL_WORK)
    _marginals(as_array(scores), as_array(usable), limit, as_array(lse), as_array(mu.detach()),
               out.numpy())
    return out
