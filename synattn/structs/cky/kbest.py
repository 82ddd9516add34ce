"""The exact k best (labelled) binary bracketings.

On CPU tensors with numba, :class:`~synattn.structs.cky.crf.TreeCRF` (one label or labelled spans)
runs one compiled k-best CKY pass (:mod:`synattn.structs.cky._kbest_kernels`): a tree is one
derivation, so the k best derivations are the k best trees. Otherwise (PyTorch backend, CUDA
tensors, no numba) and for :class:`~synattn.structs.cky.cfg.SentCFG` (a symbol per span) it is
Lawler's scheme (:func:`~synattn.structs.kbest.lawler`) over masked CKY argmaxes: the same lists,
up to the order of equal scores (and rounding on the PyTorch path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..backend import kernels, use_numba
from ..constants import NEG
from ..kbest import Constraints, lawler


def labelled_kbest(k: int, lengths: torch.Tensor, usable: torch.Tensor,
                   solve: Callable[[torch.Tensor, torch.Tensor], tuple[list[float], torch.Tensor]],
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best labelled bracketings of each sentence, best first.

    A labelled bracketing of ``n`` words is a 0/1 chart ``[N, N, L]``: its ``2n - 1`` spans
    ``(i, j)``, each with one label. A subspace is ``(allowed [N, N, L], included [N, N, L])``
    ((span, label) pairs that may be used, and those every member has). A structure's free parts
    are its (span, label) pairs not yet included, ordered by start, end and label; sub-problem
    ``t`` keeps parts ``0..t-1`` and forbids part ``t``. Keeping ``(i, j, l)`` = forbidding every
    span that crosses ``(i, j)`` and every other label of ``(i, j)``: a binary bracketing is a
    maximal non-crossing set of spans, so a span that crosses none of a tree's spans is one of
    them. A sub-problem that leaves no label to a span every bracketing has (one word, the whole
    sentence) is dropped (it has no structure), so with one label those spans are no free parts.

    Args:
        k: how many (``>= 1``).
        lengths: ``[B]`` words per sentence.
        usable: ``[B, N, N, L]`` bool, the (span, label) pairs a structure may use at all.
        solve: ``(sents [M], allowed [M, N, N, L]) -> (best scores, a list of M floats with
            -inf where nothing is allowed; charts [M, N, N, L])``, the masked argmax.
        dtype: of the charts.

    Returns:
        ``scores [B, K]`` (float64, ``-inf`` where fewer than ``K`` exist) and charts ``[B, K, N,
        N, L]`` on the CPU (all 0 for the missing ones; ``K`` as in :func:`~synattn.structs.kbest.lawler`).
    """
    batch, N, _, L = usable.shape
    sizes = lengths.tolist()
    a, c = torch.arange(N).view(1, N, 1), torch.arange(N).view(1, 1, N)
    labels = torch.arange(L)

    def split(b: int, y: torch.Tensor, constraint: Constraints) -> Constraints:
        allowed, included = constraint
        i, j, lab = ((y > 0.5) & ~included).nonzero(as_tuple=True)  # [m] parts, in order
        m = len(i)
        iv, jv = i.view(-1, 1, 1), j.view(-1, 1, 1)
        cross = ((a < iv) & (iv <= c) & (c < jv)) | ((iv < a) & (a <= jv) & (jv < c))  # [m, N, N]
        span = ((a == iv) & (c == jv)).unsqueeze(-1)  # [m, N, N, 1]
        part = span & (labels == lab.view(-1, 1, 1, 1))  # [m, N, N, L]

        def before(x: torch.Tensor) -> torch.Tensor:  # parts 0..t-1 of sub-problem t
            return (x.cumsum(0) - x.long()) > 0

        sub = allowed & ~before(cross).unsqueeze(-1) & ~before(span & ~part) & ~part
        forced = (i == j) | ((i == 0) & (j == sizes[b] - 1))  # spans of every bracketing
        keep = ~forced | sub[torch.arange(m), i, j].any(-1)
        return sub[keep], (included | before(part))[keep]

    initial = (usable.cpu().clone(), torch.zeros(batch, N, N, L, dtype=torch.bool))
    return lawler(k, initial, lambda sents, constraints: solve(sents, constraints[0]), split,
                  torch.zeros(N, N, L, dtype=dtype))


def compiled_kbest(scores: torch.Tensor, lengths: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The compiled k-best pass (:func:`synattn.structs.cky._kbest_kernels.kbest`) over checked
    labelled scores ``[B, N, N, L]`` on the CPU: ``scores [B, K]``, charts ``[B, K, N, N, L]``."""
    return kernels("cky._kbest_kernels").kbest(scores.detach(), lengths, k)


def tree_kbest(crf, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best binary trees of a :class:`~synattn.structs.cky.crf.TreeCRF` over unlabelled
    spans: ``scores [B, k]`` and 0/1 span charts ``[B, k, N, N]`` (all 0 where fewer than ``k``
    trees exist; ``k`` columns at most, as many as the largest list when every element has fewer,
    see :func:`~synattn.structs.kbest.lawler`): the compiled pass on CPU tensors with numba, else
    :func:`tree_kbest_lawler`."""
    if use_numba(crf.scores):
        best, charts = compiled_kbest(crf.scores.unsqueeze(-1), crf.lengths, k)
        return best, charts[..., 0]
    return tree_kbest_lawler(crf, k)


def tree_kbest_lawler(crf, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`tree_kbest` by :func:`labelled_kbest` with one label (masked CKY argmaxes)."""
    scores, lengths = crf.scores.detach(), crf.lengths
    batch, N, _ = scores.shape
    device = scores.device

    def solve(sents: torch.Tensor, allowed: torch.Tensor) -> tuple[list[float], torch.Tensor]:
        sents = sents.to(device)
        sub = type(crf)(torch.where(allowed[..., 0].to(device), scores[sents], NEG), lengths[sents])
        return sub.max.detach().double().cpu().tolist(), sub.argmax.unsqueeze(-1).cpu()

    usable = torch.ones(batch, N, N, 1, dtype=torch.bool)
    best, charts = labelled_kbest(k, lengths, usable, solve, scores.dtype)
    return best.to(device), charts[..., 0].to(device)
