"""Non-projective dependency CRF: the Matrix-Tree theorem (Koo et al. 2007) and Chu-Liu-Edmonds.

Score layout as in :mod:`synattn.structs.arc_scores` (``scores[b, h, d]``, head → dependent,
ROOT = 0). With ``A[h, d] = exp(s[h, d])`` for words and root weights ``r[d] = exp(s[0, d])``:

- multi-root: ``Z = det(L)``, ``L[d, d] = r[d] + Σ_h A[h, d]``, ``L[h, d] = -A[h, d]``;
- single root: ``Z = det(L̂)``, ``L̂`` = the same Laplacian without ``r`` on the diagonal and with
  the row of the first word replaced by ``r`` (Koo et al. 2007, §3.3).

**Numerics.** Each column ``d`` is divided by ``exp(max_h s[h, d])`` (added back as
``Σ_d max_h s[h, d]``), so nothing overflows, and everything runs in float64. Two ways compute
``log Z`` and the marginals:

- *LAPACK* (fast; lengths below :data:`LAPACK_MAX_N`): the LU factors of Koo's matrix give the
  determinant, and ``lu_solve`` its inverse for Koo's closed-form marginals. A sentence is
  trusted only if every pivot is at least :data:`CERTIFICATE` times its column's largest entry
  (below that, the subtractions inside LU may have cancelled) and its marginals are in ``[0, 1]``
  with column sums 1 to ``1e-9``; the others take the second way.
- *GTH elimination* (robust): these matrices are column-diagonally-dominant M-matrices, and
  Gaussian elimination in the Grassmann-Taksar-Heyman form computes every pivot as a *sum of
  non-negative terms* (the weight flowing into the eliminated word from the rows not yet
  eliminated, ROOT included), never as a difference. ``log Z`` keeps full relative accuracy even
  when ``Z`` is tiny against the largest arc weights (a likely cycle of high scores, e.g. scores
  ×100), where ``logdet`` returns garbage or NaN. Koo's single-root determinant comes from the
  same elimination: the words other than the first are eliminated with the first word playing
  ROOT, and the replaced row is carried along (its final entry is the Schur complement). The
  marginals are the adjoint of the elimination, written out (``O(B·N²)`` memory): unlike the
  closed form, which subtracts two entries of the inverse, it keeps column sums at 1 to float64
  rounding even for scores ×100. No LAPACK call is involved, so it also serves long sentences:
  batched LAPACK LU/inverse can fail ("Pivots given to lu_solve...") or hang for ``[4, N, N]``
  with ``N >= 150`` and two threads on some CPU builds.

The backward of the marginals uses the symmetry of the Hessian of ``log Z``: the
vector-Jacobian product equals a Jacobian-vector product, computed by forward-mode
differentiation of the GTH code.

**Compiled kernels.** For CPU tensors with numba installed (see :mod:`synattn.structs.backend`),
every sentence takes the GTH way in compiled code (:mod:`synattn.structs._matrix_tree_kernels`:
whole sentences spread over threads, each at its own length): ``log Z``, the adjoint for the
marginals, and for their backward the forward-mode derivative of both, written out. It needs no
certificate and no LAPACK call and gives the pure-PyTorch GTH numbers to float64 rounding.

**Extreme scales and masks.** A sentence whose GTH pivots fall below :data:`SAFE_PIVOT` (weights
underflowed, or a pivot made of masked arcs only) or whose columns span more than
:data:`~synattn.structs.matrix_tree_log.SAFE_SPREAD` is recomputed by the same elimination in log
space (:mod:`synattn.structs.matrix_tree_log`), exact at any scale; whether masks leave a tree at
all is then decided by reachability.

``argmax`` is Chu-Liu-Edmonds (:mod:`synattn.structs.chu_liu_edmonds`), per sentence on the CPU.
For a single root, every root arc gets a penalty larger than any difference of tree scores, so
the best tree has exactly one root arc and is the best such tree.
"""

from __future__ import annotations

import warnings
from functools import cached_property

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD

from .arc_scores import ArcCRF, usable_arcs
from .backend import as_array, set_threads, use_numba
from .chu_liu_edmonds import best_tree
from .matrix_tree_log import (_has_tree, _log_space_marginals, _log_space_marginals_tangent,
                              _wide_columns)
from .semiring import NEG, serial_if_small

TINY = 1e-300
"""Floor of a pivot (float64): keeps ``log`` and the divisions finite if weights underflow."""

SAFE_PIVOT = 1e-250
"""A GTH pivot below this (weights may have underflowed on the way) sends the sentence to the
log-space elimination (:func:`_log_space_marginals`)."""



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


def _gth_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                   with_flag: bool = False) -> tuple[torch.Tensor, ...]:
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


def _lapack_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                      need_marginals: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Koo et al.'s determinant and closed-form marginals with LAPACK's LU (float64).

    ``p(h -> d) = A[h, d] (X[d, d] - X[d, h])`` and ``p(ROOT -> d) = r[d] X[d, d]`` with
    ``X = L^{-1}`` (single root: terms with the first word as ``d`` or ``h`` dropped and
    ``p(ROOT -> d) = r[d] X[d, 1]``). Returns ``log_z``, marginals (or None) and a ``[B]`` mask
    of trustworthy sentences.
    """
    root, words, valid, shift = _scaled_arcs(scores, lengths)
    batch, N = root.shape
    pad = (~valid).double()
    diag = words.sum(1) + pad  # padded words: identity rows and columns
    laplacian = torch.diag_embed(diag + (root if multiroot else 0.0)) - words
    if not multiroot:
        laplacian = torch.cat((root.unsqueeze(1), laplacian[:, 1:]), 1)  # replace word 1's row
    lu, pivots, info = torch.linalg.lu_factor_ex(laplacian)
    u = lu.diagonal(dim1=1, dim2=2)  # [B, N]
    swaps = (pivots != torch.arange(1, N + 1, device=pivots.device)).sum(1)
    positive = (u < 0).sum(1).add(swaps).remainder(2) == 0
    scale = laplacian.abs().amax(1)  # [B, N]: each column's largest entry
    ok = (info == 0) & positive & ((u.abs() / scale).amin(1) >= CERTIFICATE)
    log_z = u.abs().clamp_min(TINY).log().sum(1) + shift
    if not need_marginals:
        return log_z, None, ok
    eye = torch.eye(N, dtype=lu.dtype, device=lu.device).expand(batch, N, N)
    inverse = torch.linalg.lu_solve(lu, pivots, eye)  # [B, N, N]
    x_diag = inverse.diagonal(dim1=1, dim2=2)  # [B, N]
    keep = torch.ones(N, dtype=root.dtype, device=root.device)
    if not multiroot:
        keep[0] = 0.0
    mu_words = words * (keep * x_diag).unsqueeze(1) - words * keep[:, None] * inverse.transpose(1, 2)
    mu_root = root * (x_diag if multiroot else inverse[:, :, 0])
    mu = torch.cat((mu_root.unsqueeze(1), mu_words), 1)  # [B, N+1, N]
    mu = torch.cat((mu.new_zeros(batch, N + 1, 1), mu), 2)
    mu = torch.where(usable_arcs(lengths, N + 1), mu, 0.0)
    sums = torch.where(valid, mu.sum(1)[:, 1:] - 1.0, 0.0).abs().amax(1)
    ok = ok & (sums <= 1e-9) & (mu.amin((1, 2)) >= -1e-9) & (mu.amax((1, 2)) <= 1 + 1e-9)
    return log_z, mu, ok


def _compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                        need_marginals: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log Z [B]`` (float64) and marginals ``[B, N+1, N+1]`` (the scores' dtype, or None) by the
    compiled GTH kernels."""
    from . import _matrix_tree_kernels as kernels

    s = as_array(scores)
    out = np.zeros(s.shape if need_marginals else (0, 0, 0), dtype=s.dtype)  # (empty: unused)
    log_z = kernels.gth_forward(s, as_array(lengths), multiroot, need_marginals, out,
                                set_threads())
    return torch.from_numpy(log_z), torch.from_numpy(out) if need_marginals else None
    # (a sentence whose pivots fell below SAFE_PIVOT has log_z NaN: see _marginals)


def _compiled_marginals_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                                direction: torch.Tensor) -> torch.Tensor:
    """``[B, N+1, N+1]`` derivative of the marginals in ``direction`` (the Hessian of ``log Z``
    times ``direction``) by the compiled forward-mode GTH kernel, in the scores' dtype."""
    from . import _matrix_tree_kernels as kernels

    s = as_array(scores)
    out = np.zeros(s.shape, dtype=s.dtype)
    kernels.gth_tangent(s, as_array(direction.to(scores.dtype)), as_array(lengths), multiroot, out,
                        set_threads())
    return torch.from_numpy(out)


def _marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
               need_marginals: bool = True, compiled: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """``log Z``, (optionally) marginals, ``[B]`` True for the sentences computed in log space,
    and ``[B]`` the word that played word 1 (1: none; see below).

    The compiled GTH kernels if ``compiled``, else LAPACK where certified and GTH elimination
    elsewhere. A single-root sentence flagged there (a pivot below :data:`SAFE_PIVOT`: the
    elimination lets word 1 play ROOT, which fails if word 1 cannot head the others, e.g. when
    another word's head is fixed to ROOT) is tried again with word 1 swapped with the word of the
    best root arc. Every sentence still flagged, or with a column wider than ``SAFE_SPREAD``, is
    computed by the log-space elimination."""
    log_z, mu, unsafe = _fast_marginals(scores, lengths, multiroot, need_marginals, compiled)
    swap = torch.ones_like(lengths)
    if not compiled:  # (the kernels flag wide columns themselves)
        unsafe = unsafe | _wide_columns(scores, lengths)
    if not multiroot and bool(unsafe.any()):
        idx = unsafe.nonzero().squeeze(1)
        L = scores.shape[-1]
        valid = (torch.arange(L, device=scores.device) >= 1) & (
            torch.arange(L, device=scores.device) <= lengths[idx, None])
        best = torch.where(valid, scores[idx, 0].double(), -float("inf")).argmax(-1)
        idx, best = idx[best != 1], best[best != 1]
        if len(idx):
            z, m, flag = _fast_marginals(_swap_words(scores[idx], best), lengths[idx], multiroot,
                                         need_marginals, compiled)
            ok = ~flag
            idx, best = idx[ok], best[ok]
            log_z = log_z.index_copy(0, idx, z[ok].to(log_z.dtype))
            if need_marginals:
                mu = mu.index_copy(0, idx, _swap_words(m[ok], best).to(mu.dtype))
            unsafe = unsafe.index_fill(0, idx, False)
            swap = swap.index_copy(0, idx, best)
    if bool(unsafe.any()):
        redo = unsafe.nonzero().squeeze(1)
        z, m = _log_space_marginals(scores[redo], lengths[redo], multiroot, need_marginals)
        none = ~_has_tree(scores[redo], lengths[redo], multiroot)  # (soft masks hide this)
        z = z.masked_fill(none, 2 * NEG)
        if need_marginals:
            m = m.masked_fill(none[:, None, None], 0.0)
        log_z = log_z.index_copy(0, redo, z)
        if need_marginals:
            mu = mu.index_copy(0, redo, m.to(mu.dtype))
    return log_z, mu, unsafe, swap


def _swap_words(x: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
    """``x [B, L, L]`` with node 1 and node ``word[b]`` exchanged in rows and columns (its own
    inverse: applied to the scores, then to their marginals or tangents, it relabels back)."""
    batch, L, _ = x.shape
    rows = torch.arange(batch, device=x.device)
    perm = torch.arange(L, device=x.device).repeat(batch, 1)
    perm[:, 1] = word
    perm[rows, word] = 1
    x = x.gather(1, perm.unsqueeze(2).expand(batch, L, L))
    return x.gather(2, perm.unsqueeze(1).expand(batch, L, L))


def _fast_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                    need_marginals: bool,
                    compiled: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """:func:`_marginals` without the log-space fallback; the last output flags small pivots."""
    if compiled:
        log_z, mu = _compiled_marginals(scores, lengths, multiroot, need_marginals)
        return log_z, mu, log_z.isnan()
    N = scores.shape[-1] - 1
    if N >= LAPACK_MAX_N:
        if need_marginals:
            return _gth_marginals(scores, lengths, multiroot, with_flag=True)
        log_z, _, _, pivots = _factorize(scores, lengths, multiroot)
        return log_z, None, pivots.amin(1) < SAFE_PIVOT
    log_z, mu, ok = _lapack_marginals(scores, lengths, multiroot, need_marginals)
    unsafe = torch.zeros_like(ok)
    if bool(ok.all()):
        return log_z, mu, unsafe
    redo = (~ok).nonzero().squeeze(1)
    if need_marginals:
        z, m, flag = _gth_marginals(scores[redo], lengths[redo], multiroot, with_flag=True)
        mu = mu.index_copy(0, redo, m)
    else:
        z, _, _, pivots = _factorize(scores[redo], lengths[redo], multiroot)
        flag = pivots.amin(1) < SAFE_PIVOT
    return log_z.index_copy(0, redo, z), mu, unsafe.index_copy(0, redo, flag)


def matrix_tree_log_partition(scores: torch.Tensor, lengths: torch.Tensor,
                              multiroot: bool) -> torch.Tensor:
    """``log Z`` ``[batch_size]`` of non-projective trees (float64, not differentiable).

    Args:
        scores: ``[batch_size, N+1, N+1]`` arc scores with unusable entries finite
            (see :func:`~synattn.structs.arc_scores.check_arc_scores`).
        lengths: ``[batch_size]`` word counts in ``1..N``.
        multiroot: allow several words to attach to ROOT.
    """
    return _marginals(scores, lengths, multiroot, False, use_numba(scores, lengths))[0]


class MatrixTreeMarginals(torch.autograd.Function):
    """Arc marginals; backward ``H g`` by forward-mode differentiation (``H``: Hessian of log Z),
    compiled or by PyTorch's forward-mode AD, whichever path ran the forward."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
        ctx.multiroot = multiroot
        ctx.compiled = use_numba(scores, lengths)
        _, mu, log_space, swap = _marginals(scores, lengths, multiroot, True, ctx.compiled)
        ctx.save_for_backward(scores, lengths, log_space, swap)
        return mu.to(scores.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if torch.is_grad_enabled():
            raise RuntimeError("NonProjectiveDependencyCRF: derivatives of order 3 and higher of "
                               "log_partition (the backward of marginals' backward) are not "
                               "supported; orders 1 and 2 are")
        scores, lengths, log_space, swap = ctx.saved_tensors
        if not ctx.compiled:  # the forward may have used LAPACK: route for the GTH tangent
            log_space, swap = _gth_route(scores, lengths, ctx.multiroot, log_space)
        swapped = bool((swap != 1).any())
        if not bool(log_space.any()) and not swapped:
            return _fast_tangent(scores, lengths, ctx.multiroot, g, ctx.compiled), None, None
        out = torch.zeros_like(scores)
        if bool(log_space.any()):
            idx = log_space.nonzero().squeeze(1)
            hv = _log_space_marginals_tangent(scores[idx], lengths[idx], ctx.multiroot, g[idx])
            out = out.index_copy(0, idx, hv.to(out.dtype))
        if bool((~log_space).any()):  # the fast path, with the words swapped as in the forward
            idx = (~log_space).nonzero().squeeze(1)
            word = swap[idx]
            hv = _fast_tangent(_swap_words(scores[idx], word), lengths[idx], ctx.multiroot,
                               _swap_words(g[idx].to(scores.dtype), word), ctx.compiled)
            out = out.index_copy(0, idx, _swap_words(hv, word).to(out.dtype))
        return out, None, None


def _gth_route(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
               log_space: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the PyTorch GTH code is safe (no pivot below :data:`SAFE_PIVOT`), as is or with the
    words swapped as in :func:`_marginals`: the routing of its tangent when the forward took
    LAPACK. Returns the new ``log_space [B]`` and ``swap [B]``."""
    swap = torch.ones_like(lengths)
    with torch.no_grad():
        flag = log_space | (_factorize(scores, lengths, multiroot)[3].amin(1) < SAFE_PIVOT)
        if multiroot or not bool((flag & ~log_space).any()):
            return flag, swap
        idx = (flag & ~log_space).nonzero().squeeze(1)
        L = scores.shape[-1]
        pos = torch.arange(L, device=scores.device)
        valid = (pos >= 1) & (pos <= lengths[idx, None])
        best = torch.where(valid, scores[idx, 0].double(), -float("inf")).argmax(-1)
        pivots = _factorize(_swap_words(scores[idx], best), lengths[idx], multiroot)[3]
        ok = (pivots.amin(1) >= SAFE_PIVOT) & (best != 1)
        return flag.index_fill(0, idx[ok], False), swap.index_copy(0, idx[ok], best[ok])


def _fast_tangent(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, g: torch.Tensor,
                  compiled: bool) -> torch.Tensor:
    """The Hessian of ``log Z`` times ``g`` by forward-mode differentiation of the GTH code."""
    if compiled:
        return _compiled_marginals_tangent(scores, lengths, multiroot, g)
    with fwAD.dual_level(), warnings.catch_warnings():
        # (torch's first use of forward AD loads decompositions through torch.jit.script)
        warnings.simplefilter("ignore", DeprecationWarning)
        dual = fwAD.make_dual(scores, g.to(scores.dtype))
        mu = _gth_marginals(dual, lengths, multiroot)[1]
        return fwAD.unpack_dual(mu).tangent.to(scores.dtype)


class _MatrixTreeLogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the explicit adjoint of the elimination."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
        ctx.save_for_backward(scores, lengths)
        ctx.multiroot = multiroot
        ctx.compiled = use_numba(scores, lengths)
        log_z = _marginals(scores, lengths, multiroot, False, ctx.compiled)[0]
        return log_z.to(scores.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = MatrixTreeMarginals.apply(scores, lengths, ctx.multiroot)
        else:
            mu = _marginals(scores, lengths, ctx.multiroot, True, ctx.compiled)[1].to(scores.dtype)
        return mu * g[:, None, None], None, None


# ---------------------------------------------------------------------------------------------
# The distribution.
# ---------------------------------------------------------------------------------------------

class NonProjectiveDependencyCRF(ArcCRF):
    """Non-projective dependency trees (Matrix-Tree theorem), batched with per-sentence lengths.

    Arguments as :class:`~synattn.structs.arc_scores.ArcCRF`: ``scores [batch_size, n+1, n+1]``
    (``scores[b, h, d]`` for head ``h`` → dependent ``d``, ROOT = 0), ``lengths [batch_size]``
    and ``multiroot``.

    Example:
        >>> crf = NonProjectiveDependencyCRF(torch.randn(2, 6, 6), torch.tensor([5, 3]))
        >>> torch.allclose(crf.marginals.sum(1)[:, 1:4], torch.ones(2, 3))  # one head per word
        True

    ``log_partition`` and ``marginals`` are returned in the scores' float dtype (float32 for
    half inputs); the computation is float64.
    """

    log_partition_fn = _MatrixTreeLogPartition  # over all spanning arborescences
    marginals_fn = MatrixTreeMarginals

    @cached_property
    def argmax(self) -> torch.Tensor:
        """``[batch_size, n]`` heads of words ``1..n`` of the best tree; ``-1`` padding, and
        all ``-1`` for a sentence whose masks leave no tree."""
        scores = self.scores.detach().double().cpu().numpy()
        heads = np.full(scores.shape[:2], -1, dtype=np.int64)[:, 1:]
        for b, n in enumerate(self.lengths.tolist()):
            heads[b, :n] = best_tree(scores[b, :n + 1, :n + 1], self.multiroot)
        heads = torch.from_numpy(heads).to(self.scores.device)
        if self.masked:  # (CLE may only find trees with a masked arc or several root arcs)
            none = self.score(heads) == -float("inf")
            if not self.multiroot:
                none |= (heads == 0).sum(1) != 1
            heads = heads.masked_fill(none.unsqueeze(-1), -1)
        return heads

    @property
    def max(self) -> torch.Tensor:
        """``[batch_size]`` score of the best tree (not differentiable); ``-inf`` if none."""
        heads = self.argmax
        best = self.score(heads.clamp_min(0)).detach()
        return best.masked_fill(heads[:, 0] < 0, -float("inf"))
