"""Exact samples of non-projective trees in ``O(N³)`` per sample: the chain rule over words with
the inverse Laplacian updated by Sherman-Morrison.

Koo et al. (2007, §3) write ``log Z = log det L`` with ``L[:, d] = Σ_h w_h v_h`` a sum over
``d``'s possible heads (``w_h`` the arc weight; ``v_h = e_d - e_h`` for a word head,
``v_ROOT = e_d``; for a single root, Koo's ``L̂`` with word 1's row replaced by the root weights:
``v_h`` without its entry in row 1, ``v_ROOT = e_1``). With ``X = L^{-1}``, the marginal of
``h → d`` is ``∂ log det L / ∂ log w_h = w_h · X[d, :] v_h`` (Koo et al. 2007, eqs. 7-8).

Sampling word ``d``'s head from that marginal and then fixing it (every other arc into ``d``
weighs 0) replaces column ``d`` of ``L`` by ``w_h* v_h*``: a rank-one change
``L' = L + u e_dᵀ``, whose inverse is (Sherman and Morrison 1950)

    X' = X - (X u)(e_dᵀ X) / (1 + e_dᵀ X u),   1 + e_dᵀ X u = p(h* → d | heads so far)

(``e_dᵀ X L[:, d] = 1``), so the denominator is the probability of the head just drawn. Word
``d + 1``'s conditional marginals are then read off ``X'`` the same way: ``N`` steps of
``O(N²)`` after one LU (``O(N³)``) per sentence, shared by all samples of that sentence.

**Exactness.** Every conditional is checked (entries ``>= -1e-9``, summing to 1 within
:data:`TOLERANCE`); the LU must pass the certificate of :mod:`synattn.structs.dependency.matrix_tree_gth`.
A sample whose check fails at word ``d`` keeps the heads drawn so far (from trusted conditionals)
and is completed by the robust conditioning sampler
(:meth:`~synattn.structs.distribution.Decoding._continue_sample`: the marginals of the CRF with
those heads fixed, by the GTH or log-space elimination), so the samples are exact at any scale.
Sentences of :data:`~synattn.structs.dependency.matrix_tree_gth.LAPACK_MAX_N` words or more take that
sampler throughout (batched LAPACK LU is not trusted there).
"""

from __future__ import annotations

import torch

from ..distribution import _gumbel_argmax
from .matrix_tree_gth import CERTIFICATE, LAPACK_MAX_N, _laplacian

TOLERANCE = 1e-6
"""A conditional whose probabilities sum to 1 less accurately than this (or has an entry below
``-1e-9``) is not trusted: the sample is completed by the robust sampler."""

CHUNK_ELEMENTS = 1 << 23
"""Samples are drawn in chunks of at most this many inverse entries (64 MiB of float64)."""


def matrix_tree_sample(crf, count: int, generator: torch.Generator | None) -> torch.Tensor:
    """``[count, B, N]`` exact samples (heads, ``-1`` padding and for sentences without a tree)
    of a :class:`~synattn.structs.dependency.matrix_tree.NonProjectiveDependencyCRF`."""
    scores, lengths, multiroot = crf.scores.detach(), crf.lengths, crf.multiroot
    batch, L, _ = scores.shape
    N = L - 1
    if N >= LAPACK_MAX_N:
        return crf._sequential_sample(count, generator)
    with torch.no_grad():
        feasible = crf.feasible if crf.masked else torch.ones_like(lengths, dtype=torch.bool)
        lap, root, words, _, _ = _laplacian(scores, lengths, multiroot)
        lu, pivots, info = torch.linalg.lu_factor_ex(lap)
        u = lu.diagonal(dim1=1, dim2=2).abs()
        ok = (info == 0) & ((u / lap.abs().amax(1)).amin(1) >= CERTIFICATE) & feasible
        eye = torch.eye(N, dtype=lu.dtype, device=lu.device).expand(batch, N, N)
        inverse = torch.where(ok[:, None, None], torch.linalg.lu_solve(lu, pivots, eye), 0.0)
        index = torch.arange(batch, device=lengths.device).repeat(count)  # [count * B]
        out = torch.full((len(index), N), -1, dtype=torch.long, device=index.device)
        stop = torch.where(ok[index], N, 0)  # first word whose conditional was not trusted
        rows = max(1, CHUNK_ELEMENTS // (N * N))
        for lo in range(0, len(index), rows):
            part = slice(lo, lo + rows)
            out[part], stop[part] = _draw(index[part], inverse, lap, root, words, lengths,
                                          multiroot, stop[part], generator)
        redo = (stop < lengths[index]) & feasible[index]
        if bool(redo.any()):
            at = redo.nonzero().squeeze(1)
            out[at] = crf._continue_sample(index[at], out[at], stop[at], generator)
    return out.view(count, batch, N)


def _draw(index: torch.Tensor, inverse: torch.Tensor, lap: torch.Tensor, root: torch.Tensor,
          words: torch.Tensor, lengths: torch.Tensor, multiroot: bool, stop: torch.Tensor,
          generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Heads ``[M, N]`` of samples of sentences ``index [M]``, word by word, and the updated
    ``stop [M]`` (the first word whose conditional failed its check; ``N`` if none)."""
    M, N = len(index), inverse.shape[-1]
    X = inverse[index].clone()  # [M, N, N]
    A, r, lens = words[index], root[index], lengths[index]  # A[m, h-1, d-1]
    rows = torch.arange(M, device=index.device)
    not_first = torch.ones(N, dtype=X.dtype, device=X.device)
    if not multiroot:
        not_first[0] = 0.0  # single root: row 1 of L̂ holds the root weights
    out = torch.full((M, N), -1, dtype=torch.long, device=index.device)
    for d in range(N):
        x = X[:, d].clone()  # [M, N]: row d of the inverse
        # p(ROOT -> d) = r[d] X[d, d] (multi-root) or r[d] X[d, 1] (single root)
        p_root = r[:, d] * (x[:, d] if multiroot else x[:, 0])
        # p(h -> d) = A[h, d] (X[d, d] - X[d, h]), the terms in row 1 dropped for a single root
        p_words = A[:, :, d] * (not_first[d] * x[:, d:d + 1] - not_first * x)
        probs = torch.cat((p_root.unsqueeze(1), p_words), 1)  # [M, N+1], head 0 = ROOT
        active = (d < lens) & (d < stop)
        trusted = (probs >= -1e-9).all(1) & ((probs.sum(1) - 1.0).abs() <= TOLERANCE)
        stop = torch.where(active & ~trusted, d, stop)
        active = active & trusted
        head = _gumbel_argmax(probs.clamp_min(0.0).log(), generator)  # [M]
        out[:, d] = torch.where(active, head, -1)
        # column d of L becomes w* v_h* (the head drawn); u = new column - old column
        word = (head - 1).clamp_min(0)
        w = torch.where(head == 0, r[:, d], A[rows, word, d])
        new = torch.zeros_like(x)
        to_root = head == 0
        if multiroot:
            new[:, d] = w
        else:
            new[:, 0] = torch.where(to_root, w, 0.0)
            new[:, d] += torch.where(to_root, 0.0, w * not_first[d])
        new[rows, word] -= torch.where(to_root, 0.0, w * not_first[word])
        u = new - lap[index, :, d]
        # Sherman-Morrison: X' = X - (X u) (e_d^T X) / p(head -> d)
        scale = torch.where(active, 1.0 / probs[rows, head].clamp_min(1e-300), 0.0)
        X.baddbmm_(torch.bmm(X, u.unsqueeze(2)), (x * scale.unsqueeze(1)).unsqueeze(1), alpha=-1)
    return out, stop
