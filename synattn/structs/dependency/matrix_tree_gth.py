"""Matrix-Tree ``log Z`` and marginals in float64: Koo et al.'s closed form with LAPACK, the
GTH elimination in PyTorch, and the calls into the compiled GTH kernels.

The numerics (column scaling, the LAPACK certificate, the GTH elimination and its adjoint) are
described in :mod:`synattn.structs.dependency.matrix_tree`, which chooses between these paths per sentence.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np
import torch

from ..backend import as_array, kernels as backend_kernels, serial_if_small, set_threads
from ..constants import NEG, SAFE_PIVOT, SERIAL_WORK, TINY
from .arc_scores import usable_arcs


def _scaled_arcs(scores: torch.Tensor,
                 lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Column-scaled float64 weights: root ``r [B, N]``, words ``A [B, N, N]`` (``A[h-1, d-1]``),
    valid words ``[B, N]`` and the summed column shifts ``[B]``; unusable arcs weigh 0."""
    s = scores.double()
    batch, L, _ = s.shape
    N = L - 1
    pos = torch.arange(1, L, device=s.device)
    valid = pos <= lengths.unsqueeze(-1)  # [B, N] words
    arcs = valid.unsqueeze(2) & valid.unsqueeze(1) & ~torch.eye(N, dtype=torch.bool, device=s.device)
    into = torch.cat((valid.unsqueeze(1), arcs), 1)  # [B, N+1 (ROOT, words), N]: usable arcs
    shift = torch.where(into, s[:, :, 1:], NEG).amax(1)  # [B, N]
    shift = torch.where(valid, shift, 0.0).detach()
    w = torch.where(into, (s[:, :, 1:] - shift.unsqueeze(1)).exp(), 0.0)  # [B, N+1, N]
    return w[:, 0], w[:, 1:], valid, shift.sum(1)


def _weights(scores: torch.Tensor, lengths: torch.Tensor,
             multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The matrix for :func:`_factorize` and the column shifts ``[B]`` (summed).

    Returns ``M [B, N+1, N]`` (float64): multi-root rows are words ``1..N`` then ROOT, columns
    words ``1..N``; single-root rows are words ``2..N``, word 1, ROOT and columns words
    ``2..N``, word 1. Padded words get one unit in-arc from ROOT (multi-root) or from word 1
    (single root) and nothing else, so they add a pivot of 1.
    """
    root, words, valid, shift = _scaled_arcs(scores, lengths)
    N = words.shape[-1]
    pad = (~valid).double()
    if multiroot:
        return torch.cat((words, (root + pad).unsqueeze(1)), 1), shift  # [B, N+1, N]
    order = _single_root_order(N, words.device)
    words = words[:, order][:, :, order]  # word 1 last
    first = words[:, -1:] + pad[:, order].unsqueeze(1)  # word 1's row: unit arcs to padding
    return torch.cat((words[:, :-1], first, root[:, order].unsqueeze(1)), 1), shift


def _factorize(scores: torch.Tensor, lengths: torch.Tensor,
               multiroot: bool) -> tuple[torch.Tensor, ...]:
    """GTH elimination, in place (works under forward-mode AD, not under autograd).

    Returns ``log_z [B]``, the initial weights ``W [B, R, N]``, the eliminated matrix ``M`` and
    the pivots ``[B, N]``. Column ``k`` of ``M`` below row ``k`` and row ``k`` right of column
    ``k`` (divided by pivot ``k``) are as they were at step ``k``: all the outside pass needs.
    For a single root the last pivot is the replaced row's final entry (its Schur complement).
    """
    W, shift = _weights(scores, lengths, multiroot)
    batch, R, N = W.shape
    M = W.clone()
    pivots = W.new_empty(batch, N)
    steps, rows_end = (N, R) if multiroot else (N - 1, R - 1)  # single root: skip replaced row
    with serial_if_small(M.numel(), M.device):
        for k in range(steps):
            pivot = torch.sum(M[:, k + 1:rows_end, k], -1).clamp_min_(TINY)  # [B]
            pivots[:, k] = pivot
            row = M[:, k:k + 1, k + 1:].div_(pivot[:, None, None])
            # Schur complement: the pivot row's arcs are spread over the rows that feed the pivot
            M[:, k + 1:, k + 1:].addcmul_(M[:, k + 1:, k:k + 1], row)
    if not multiroot:
        pivots[:, N - 1] = M[:, R - 1, N - 1].clamp_min(TINY)
    return pivots.log().sum(1) + shift, W, M, pivots


@overload
def _gth_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                   with_flag: Literal[False] = False) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def _gth_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                   with_flag: Literal[True]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
def _gth_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, with_flag: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``log Z`` and arc marginals ``[B, N+1, N+1]``: the adjoint of :func:`_factorize`, written out.

    Walking the elimination backwards, ``G`` holds ``d log Z / d M`` for the part of ``M`` still
    to be undone; at the end it is ``d log Z / d W`` and the marginals are ``G * W``
    (``W = exp(s - shift)``). Unlike Koo et al.'s closed form, which subtracts two entries of the
    inverse, this keeps full accuracy at extreme score scales; ``O(B·N²)`` memory. With
    ``with_flag``, also ``[B]`` True where a pivot fell below :data:`SAFE_PIVOT`.
    """
    log_z, W, M, pivots = _factorize(scores, lengths, multiroot)
    batch, R, N = W.shape
    G = torch.zeros_like(W)
    steps, rows_end = (N, R) if multiroot else (N - 1, R - 1)
    if not multiroot:
        G[:, R - 1, N - 1] = 1.0 / pivots[:, N - 1]
    with serial_if_small(M.numel(), M.device):
        for k in range(steps - 1, -1, -1):
            column = M[:, k + 1:, k]  # [B, r]: the rows' arcs into the pivot at step k
            row = M[:, k, k + 1:]  # [B, c]: the pivot's arcs, divided by the pivot
            rest = G[:, k + 1:, k + 1:]  # [B, r, c]
            g_row = (column.unsqueeze(2) * rest).sum(1)  # [B, c]
            g_pivot = (1.0 - (g_row * row).sum(-1)) / pivots[:, k]  # [B]
            G[:, k + 1:, k] = (rest * row.unsqueeze(1)).sum(2)
            G[:, k + 1:rows_end, k] += g_pivot.unsqueeze(-1)
            G[:, k, k + 1:] = g_row / pivots[:, k, None]
    mu = G * W  # [B, R, N]
    if multiroot:
        mu = torch.cat((mu[:, N:], mu[:, :N]), 1)  # rows: ROOT, words
    else:  # rows [words 2..N, word 1, replaced row (ROOT)], columns [words 2..N, word 1]
        order = torch.argsort(_single_root_order(N, W.device))
        mu = torch.cat((mu[:, R - 1:], mu[:, :N][:, order]), 1)[:, :, order]
    out = torch.cat((mu.new_zeros(batch, N + 1, 1), mu), 2)  # [B, N+1, N+1]
    out = torch.where(usable_arcs(lengths, N + 1), out, 0.0)
    if with_flag:
        return log_z, out, pivots.amin(1) < SAFE_PIVOT
    return log_z, out


def _single_root_order(N: int, device: torch.device) -> torch.Tensor:
    """Words ``2..N`` then word 1 (0-based word indices)."""
    return torch.cat((torch.arange(1, N, device=device), torch.zeros(1, dtype=torch.long, device=device)))


LAPACK_MAX_N = 150
"""Below this length, LAPACK's LU is tried first (it can fail or hang at ``[4, N, N]``, ``N >= 150``,
with two threads on some CPU builds)."""

CERTIFICATE = 1e-6
"""A LAPACK pivot smaller than this fraction of its column's largest entry, or marginals off by
more than ``1e-9`` (column sums, range), send the sentence to the GTH path."""


def _koo_matrix(root: torch.Tensor, words: torch.Tensor, multiroot: bool,
                diagonal: torch.Tensor | float = 0.0) -> torch.Tensor:
    """Koo et al.'s matrix ``[B, N, N]`` of root weights ``[B, N]`` and word weights ``[B, N, N]``
    (``words[h-1, d-1]``, zero diagonal), plus ``diagonal``: multi-root ``L``, or single-root
    ``L̂`` with word 1's row replaced by the root weights. Linear in the weights."""
    laplacian = torch.diag_embed(words.sum(1) + diagonal + (root if multiroot else 0.0)) - words
    if not multiroot:
        laplacian = torch.cat((root.unsqueeze(1), laplacian[:, 1:]), 1)  # replace word 1's row
    return laplacian


def _koo_gradient(inverse: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """``d log det L / d (weight)`` ``[B, N+1 (ROOT, words), N]`` from ``X = L^{-1}`` (or, the
    map being linear, the same contraction of any ``[B, N, N]``): ``X[d, d] - X[d, h]`` for
    ``h -> d`` and ``X[d, d]`` for ``ROOT -> d``; single root: terms with word 1 as ``d`` or
    ``h`` dropped and ``X[d, 1]`` for ``ROOT -> d``."""
    N = inverse.shape[-1]
    x_diag = inverse.diagonal(dim1=1, dim2=2)  # [B, N]
    keep = torch.ones(N, dtype=inverse.dtype, device=inverse.device)
    if not multiroot:
        keep[0] = 0.0
    words = (keep * x_diag).unsqueeze(1) - keep[:, None] * inverse.transpose(1, 2)  # [B, N(h), N(d)]
    root = x_diag if multiroot else inverse[:, :, 0]
    return torch.cat((root.unsqueeze(1), words), 1)


def _laplacian(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> tuple[torch.Tensor, ...]:
    """Koo et al.'s matrix ``[B, N, N]`` of the column-scaled weights (:func:`_koo_matrix`), with
    the outputs of :func:`_scaled_arcs`. Padded words get identity rows and columns."""
    root, words, valid, shift = _scaled_arcs(scores, lengths)
    return _koo_matrix(root, words, multiroot, (~valid).double()), root, words, valid, shift


def _lapack_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                      need_marginals: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """:func:`_lapack_inverse` without the inverses."""
    return _lapack_inverse(scores, lengths, multiroot, need_marginals)[:3]


def _lapack_inverse(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """Koo et al.'s determinant and closed-form marginals with LAPACK's LU (float64).

    ``p(h -> d) = A[h, d] (X[d, d] - X[d, h])`` and ``p(ROOT -> d) = r[d] X[d, d]`` with
    ``X = L^{-1}`` (single root: terms with the first word as ``d`` or ``h`` dropped and
    ``p(ROOT -> d) = r[d] X[d, 1]``). Returns ``log_z``, marginals (or None) and a ``[B]`` mask
    of trustworthy sentences, and the inverses ``X [B, N, N]`` (float64; None without the
    marginals). No value is read back to the host: on a GPU every step stays on the device.
    """
    laplacian, root, words, valid, shift = _laplacian(scores, lengths, multiroot)
    batch, N = root.shape
    lu, pivots, info = torch.linalg.lu_factor_ex(laplacian)
    u = lu.diagonal(dim1=1, dim2=2)  # [B, N]
    swaps = (pivots != torch.arange(1, N + 1, device=pivots.device)).sum(1)
    positive = (u < 0).sum(1).add(swaps).remainder(2) == 0
    scale = laplacian.abs().amax(1)  # [B, N]: each column's largest entry
    ok = (info == 0) & positive & ((u.abs() / scale).amin(1) >= CERTIFICATE)
    log_z = u.abs().clamp_min(TINY).log().sum(1) + shift
    if not need_marginals:
        return log_z, None, ok, None
    eye = torch.eye(N, dtype=lu.dtype, device=lu.device).expand(batch, N, N)
    inverse = torch.linalg.lu_solve(lu, pivots, eye)  # [B, N, N]
    mu = torch.cat((root.unsqueeze(1), words), 1) * _koo_gradient(inverse, multiroot)  # [B, N+1, N]
    mu = torch.cat((mu.new_zeros(batch, N + 1, 1), mu), 2)
    mu = torch.where(usable_arcs(lengths, N + 1), mu, 0.0)
    sums = torch.where(valid, mu.sum(1)[:, 1:] - 1.0, 0.0).abs().amax(1)
    ok = ok & (sums <= 1e-9) & (mu.amin((1, 2)) >= -1e-9) & (mu.amax((1, 2)) <= 1 + 1e-9)
    return log_z, mu, ok, inverse


def _work(lengths: torch.Tensor) -> int:
    """``Σ (n+1)³``: the compiled kernels run on one thread below :data:`SERIAL_WORK`."""
    return int(((lengths.long() + 1) ** 3).sum())


@overload
def _compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                        inverse: Literal[False] = False) -> tuple[torch.Tensor, torch.Tensor | None]: ...
@overload
def _compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                        inverse: Literal[True]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]: ...
def _compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                        inverse: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None,
                                                                                torch.Tensor]:
    """``log Z [B]`` (float64) and marginals ``[B, N+1, N+1]`` (the scores' dtype, or None) by the
    compiled GTH kernels; with ``inverse``, also the inverses ``X [B, N, N]`` (float64) of Koo's
    matrices, which the adjoint determines (for :func:`_compiled_closed_form_tangent`)."""
    kernels = backend_kernels("dependency._matrix_tree_kernels")
    s = as_array(scores)
    out = np.zeros(s.shape if need_marginals else (0, 0, 0), dtype=s.dtype)  # (empty: unused)
    N = s.shape[-1] - 1
    x = np.zeros((s.shape[0], N, N) if inverse and need_marginals else (0, 0, 0))
    log_z = kernels.gth_forward(s, as_array(lengths), multiroot, need_marginals, out,
                                set_threads(_work(lengths), SERIAL_WORK), x)
    mu = torch.from_numpy(out) if need_marginals else None
    # (a sentence whose pivots fell below SAFE_PIVOT has log_z NaN: see _marginals)
    log_z = torch.from_numpy(log_z)
    return (log_z, mu, torch.from_numpy(x)) if inverse else (log_z, mu)


def _compiled_marginals_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                                direction: torch.Tensor) -> torch.Tensor:
    """``[B, N+1, N+1]`` derivative of the marginals in ``direction`` (the Hessian of ``log Z``
    times ``direction``) by the compiled forward-mode GTH kernel, in the scores' dtype."""
    kernels = backend_kernels("dependency._matrix_tree_tangent_kernels")
    s = as_array(scores)
    out = np.zeros(s.shape, dtype=s.dtype)
    kernels.gth_tangent(s, as_array(direction.to(scores.dtype)), as_array(lengths), multiroot, out,
                        set_threads(_work(lengths), SERIAL_WORK))
    return torch.from_numpy(out)


TANGENT_RESIDUAL = 1e-9
"""The closed-form Hessian-vector product of a sentence is kept when each of its columns sums to
0 (as it must: the marginals' columns sum to 1 for any scores) within this fraction of the
direction's largest entry, and the marginals recomputed from the inverse ``X`` sum to 1 within
it; otherwise the forward-mode GTH kernel recomputes the sentence. (The two sums are
``diag(X P (X L - I))`` and ``diag(X L)``: how far ``X`` is from the inverse; on random scores
×30 the first tracks the error against the forward-mode kernel within a factor of 2.)"""


def _compiled_closed_form_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                                  direction: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """The Hessian of ``log Z`` times ``direction`` ``[B, N+1, N+1]`` (the scores' dtype) from the
    inverses ``X [B, N, N]`` of Koo's matrices (:func:`_compiled_marginals` with ``inverse``).

    With ``w = exp(s - shift)``, Koo's matrix ``L`` linear in ``w`` and ``mu = w * K(X)``
    (:func:`_koo_gradient`), ``dX = -X dL X`` gives the vector-Jacobian product with ``v``
    (``H`` is symmetric): ``H v = v * mu - w * K(X P X)``, ``P = L(v * w)`` Koo's matrix of the
    weights ``v * w``. Two ``n × n`` matrix products per sentence instead of the forward-mode
    elimination (:func:`_compiled_marginals_tangent`), which recomputes the sentences that fail
    the check of :data:`TANGENT_RESIDUAL`.
    """
    kernels = backend_kernels("dependency._matrix_tree_tangent_kernels")
    s, v, n = as_array(scores), as_array(direction.to(scores.dtype)), as_array(lengths)
    batch, L, _ = s.shape
    threads = set_threads(_work(lengths), SERIAL_WORK)
    out = np.zeros(s.shape, dtype=s.dtype)
    if L - 1 < BLAS_FROM:  # the two products in the kernel
        kernels.closed_form_tangent(s, v, n, multiroot, as_array(inverse), out, TANGENT_RESIDUAL, threads)
        return torch.from_numpy(out)
    W, P, largest = np.zeros((batch, L, L - 1)), np.zeros((batch, L - 1, L - 1)), np.empty(batch)
    kernels.closed_form_inputs(s, v, n, multiroot, W, P, largest)
    X = inverse.double()
    Y = torch.matmul(torch.matmul(X, torch.from_numpy(P)), X)  # batched BLAS
    kernels.closed_form_finish(s, v, n, multiroot, W, as_array(X), as_array(Y), largest, out,
                               TANGENT_RESIDUAL, threads)
    return torch.from_numpy(out)


BLAS_FROM = 64
"""From this padded length the closed-form backward's two matrix products per sentence are one
batched BLAS call each (numba's loops are faster below)."""
