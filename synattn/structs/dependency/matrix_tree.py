"""Non-projective dependency CRF: the Matrix-Tree theorem (Koo et al. 2007) and Chu-Liu-Edmonds.

Score layout as in :mod:`synattn.structs.dependency.arc_scores` (``scores[b, h, d]``, head → dependent,
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
every sentence takes the GTH way in compiled code (:mod:`synattn.structs.dependency._matrix_tree_kernels`,
the backward in :mod:`~synattn.structs.dependency._matrix_tree_tangent_kernels`: whole sentences
spread over threads, each at its own length): ``log Z``, the adjoint for the marginals, and for
their backward the forward-mode derivative of both, written out. It needs no
certificate and no LAPACK call and gives the pure-PyTorch GTH numbers to float64 rounding. From
:data:`~synattn.structs.dependency.matrix_tree_lapack.LAPACK_FROM` words, where LAPACK's blocked LU
beats the unblocked elimination, the compiled path factorises the batch with LAPACK instead and
keeps the sentences that pass the certificate, the GTH kernel taking the others
(:mod:`synattn.structs.dependency.matrix_tree_lapack`). The
adjoint also determines the inverse ``X`` of Koo's matrix entry by entry (LAPACK's path has it from
``lu_solve``), which the forward keeps for the backward: ``H v = v * mu - w * K(X P X)`` (``P``
Koo's matrix of the weights ``v * w``,
``K`` the closed form's contraction), two ``n × n`` matrix products per sentence instead of the
forward-mode elimination (about 1.7× faster at ``n = 80``). A sentence is kept only if the
result's columns sum to 0 and the marginals ``w * K(X)`` to 1 (to
:data:`~synattn.structs.dependency.matrix_tree_gth.TANGENT_RESIDUAL`); otherwise the forward-mode kernel
recomputes it.

**Extreme scales and masks.** A sentence whose GTH pivots fall below :data:`SAFE_PIVOT` (weights
underflowed, or a pivot made of masked arcs only) or whose columns span more than
:data:`~synattn.structs.dependency.matrix_tree_log.SAFE_SPREAD` is recomputed by the same elimination in log
space (:mod:`synattn.structs.dependency.matrix_tree_log`), exact at any scale; whether masks leave a tree at
all is then decided by reachability.

``argmax`` is Chu-Liu-Edmonds (:mod:`synattn.structs.dependency.chu_liu_edmonds`), per sentence on the CPU.
For a single root, every root arc gets a penalty larger than any difference of tree scores, so
the best tree has exactly one root arc and is the best such tree.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import torch

from ..backend import kernels, requested_backend, use_numba
from ..constants import NEG
from ..distribution import check_count
from ..forward_mode import forward_derivative
from ..registry import Implementation, numba_applies, register
from .arc_scores import ArcCRF, usable_arcs
from .chu_liu_edmonds import best_tree
from .matrix_tree_gth import (
    CERTIFICATE,
    LAPACK_MAX_N,
    SAFE_PIVOT,
    TINY,
    _compiled_closed_form_tangent,
    _compiled_marginals_tangent,
    _factorize,
    _gth_marginals,
    _lapack_marginals,
)
from .matrix_tree_lapack import compiled_marginals
from .matrix_tree_log import (
    _has_tree,
    _log_space_log_z,
    _log_space_marginals,
    _log_space_marginals_tangent,
    _wide_columns,
)
from .matrix_tree_sample import matrix_tree_sample

__all__ = ["CERTIFICATE", "LAPACK_MAX_N", "SAFE_PIVOT", "TINY", "NonProjectiveDependencyCRF",
           "best_tree", "matrix_tree_log_partition"]


def _marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
               need_marginals: bool = True, compiled: bool = False, with_inverse: bool = False
               ) -> (tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]
                     | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]):
    """``log Z``, (optionally) marginals, ``[B]`` True for the sentences computed in log space,
    and ``[B]`` the word that played word 1 (1: none; see below). ``with_inverse`` (compiled
    marginals only) adds a fifth output: the inverses ``[B, N, N]`` of Koo's matrices, valid for
    the sentences neither in log space nor with words swapped (for the closed-form backward,
    :func:`~synattn.structs.dependency.matrix_tree_gth._compiled_closed_form_tangent`).

    The compiled GTH kernels if ``compiled``, else LAPACK where certified and GTH elimination
    elsewhere. A single-root sentence flagged there (a pivot below :data:`SAFE_PIVOT`: the
    elimination lets word 1 play ROOT, which fails if word 1 cannot head the others, e.g. when
    another word's head is fixed to ROOT) is tried again with word 1 swapped with the word of the
    best root arc. Every sentence still flagged, or with a column wider than ``SAFE_SPREAD``, is
    computed by the log-space elimination."""
    if with_inverse:
        log_z, mu, inverse = compiled_marginals(scores, lengths, multiroot, True, inverse=True)
        unsafe = log_z.isnan()
    else:
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
                assert mu is not None and m is not None
                mu = mu.index_copy(0, idx, _swap_words(m[ok], best).to(mu.dtype))
            unsafe = unsafe.index_fill(0, idx, False)
            swap = swap.index_copy(0, idx, best)
    if bool(unsafe.any()):
        redo = unsafe.nonzero().squeeze(1)
        z, m = _log_space_marginals(scores[redo], lengths[redo], multiroot, need_marginals)
        none = ~_has_tree(scores[redo], lengths[redo], multiroot)  # (soft masks hide this)
        z = z.masked_fill(none, 2 * NEG)
        log_z = log_z.index_copy(0, redo, z)
        if need_marginals:
            assert mu is not None and m is not None
            m = m.masked_fill(none[:, None, None], 0.0)
            mu = mu.index_copy(0, redo, m.to(mu.dtype))
    if with_inverse:
        return log_z, mu, unsafe, swap, inverse
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
        log_z, mu = compiled_marginals(scores, lengths, multiroot, need_marginals)
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
        assert mu is not None
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
            (see :func:`~synattn.structs.dependency.arc_scores.check_arc_scores`).
        lengths: ``[batch_size]`` word counts in ``1..N``.
        multiroot: allow several words to attach to ROOT.
    """
    return _marginals(scores, lengths, multiroot, False, use_numba(scores, lengths))[0]


def marginals_vjp_by_autograd(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                              g: torch.Tensor) -> torch.Tensor:
    """``g^T d mu / d scores`` by autograd's double backward of the log-space elimination (exact at
    any scale), itself differentiable: every path's marginals' backward when a third derivative is
    asked for. On ``scores`` itself: the result must stay a function of the scores."""
    log_z = _log_space_log_z(scores, lengths, multiroot)
    (mu,) = torch.autograd.grad(log_z.sum(), scores, create_graph=True)
    mu = torch.where(usable_arcs(lengths, mu.shape[-1]), mu, 0.0)
    return torch.autograd.grad(mu, scores, g.to(mu.dtype), create_graph=True)[0]


class MatrixTreeMarginals(torch.autograd.Function):
    """Arc marginals; backward ``H g`` by forward-mode differentiation (``H``: Hessian of log Z),
    compiled or by PyTorch's forward-mode AD, whichever path ran the forward."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                compiled: bool | None = None) -> torch.Tensor:
        ctx.multiroot = multiroot
        ctx.compiled = use_numba(scores, lengths) if compiled is None else compiled
        out = _marginals(scores, lengths, multiroot, True, ctx.compiled, with_inverse=ctx.compiled)
        _, mu, log_space, swap = out[:4]
        ctx.inverse = out[4] if len(out) == 5 else None  # (compiled: for the closed-form backward)
        ctx.save_for_backward(scores, lengths, log_space, swap)
        assert mu is not None
        return mu.to(scores.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, log_space, swap = ctx.saved_tensors
        if torch.is_grad_enabled():  # a third derivative is coming: autograd throughout
            return marginals_vjp_by_autograd(scores, lengths, ctx.multiroot, g), None, None, None
        if not ctx.compiled:  # the forward may have used LAPACK: route for the GTH tangent
            log_space, swap = _gth_route(scores, lengths, ctx.multiroot, log_space)
        swapped = bool((swap != 1).any())
        if not bool(log_space.any()) and not swapped:
            return (_fast_tangent(scores, lengths, ctx.multiroot, g, ctx.compiled, ctx.inverse),
                    None, None, None)
        out = torch.zeros_like(scores)
        if bool(log_space.any()):
            idx = log_space.nonzero().squeeze(1)
            hv = _log_space_marginals_tangent(scores[idx], lengths[idx], ctx.multiroot, g[idx])
            none = ~_has_tree(scores[idx], lengths[idx], ctx.multiroot)  # (the forward gave 0 there)
            out = out.index_copy(0, idx, hv.masked_fill(none[:, None, None], 0.0).to(out.dtype))
        if bool((~log_space).any()):  # the fast path, with the words swapped as in the forward
            idx = (~log_space).nonzero().squeeze(1)
            word = swap[idx]
            hv = _fast_tangent(_swap_words(scores[idx], word), lengths[idx], ctx.multiroot,
                               _swap_words(g[idx].to(scores.dtype), word), ctx.compiled)
            out = out.index_copy(0, idx, _swap_words(hv, word).to(out.dtype))
        return out, None, None, None


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
                  compiled: bool, inverse: torch.Tensor | None = None) -> torch.Tensor:
    """The Hessian of ``log Z`` times ``g``: in closed form from the inverses of Koo's matrices
    when the compiled forward gave them (the sentences that fail its check, and all without
    ``inverse``, by forward-mode differentiation of the GTH code)."""
    if inverse is not None:
        return _compiled_closed_form_tangent(scores, lengths, multiroot, g, inverse)
    if compiled:
        return _compiled_marginals_tangent(scores, lengths, multiroot, g)
    tangent = forward_derivative(lambda x: _gth_marginals(x, lengths, multiroot)[1], scores, g)
    return tangent.to(scores.dtype)


class _MatrixTreeLogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the explicit adjoint of the elimination."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                compiled: bool | None = None) -> torch.Tensor:
        ctx.save_for_backward(scores, lengths)
        ctx.multiroot = multiroot
        ctx.compiled = use_numba(scores, lengths) if compiled is None else compiled
        log_z = _marginals(scores, lengths, multiroot, False, ctx.compiled)[0]
        return log_z.to(scores.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = MatrixTreeMarginals.apply(scores, lengths, ctx.multiroot, ctx.compiled)
        else:
            mu = _marginals(scores, lengths, ctx.multiroot, True, ctx.compiled)[1]
            assert mu is not None
            mu = mu.to(scores.dtype)
        return mu * g[:, None, None], None, None, None


# The two accelerations of the reference :func:`synattn.structs.reference.matrix_tree_log_partition`:
# the compiled GTH elimination, and LAPACK where certified with the PyTorch GTH elsewhere; both
# fall back to the log-space elimination per sentence.
register("nonprojective", Implementation(
    "numba",
    lambda s, lengths, multiroot: _MatrixTreeLogPartition.apply(s, lengths, multiroot, True),
    lambda s, lengths, multiroot: MatrixTreeMarginals.apply(s, lengths, multiroot, True),
    applies=numba_applies))
register("nonprojective", Implementation(
    "torch",
    lambda s, lengths, multiroot: _MatrixTreeLogPartition.apply(s, lengths, multiroot, False),
    lambda s, lengths, multiroot: MatrixTreeMarginals.apply(s, lengths, multiroot, False)))
# The GPU path (:mod:`synattn.structs.dependency.matrix_tree_device`, imported on first use) for
# CUDA tensors, ahead of the PyTorch path.
register("nonprojective", Implementation(
    "device", lambda *args: kernels("dependency.matrix_tree_device").DeviceLogPartition.apply(*args),
    lambda *args: kernels("dependency.matrix_tree_device").DeviceMarginals.apply(*args),
    applies=lambda scores, lengths, multiroot: scores.device.type == "cuda"
    and requested_backend() in ("auto", "torch", "triton")), before="torch")


# ---------------------------------------------------------------------------------------------
# The distribution.
# ---------------------------------------------------------------------------------------------

class NonProjectiveDependencyCRF(ArcCRF):
    """Non-projective dependency trees (Matrix-Tree theorem), batched with per-sentence lengths.

    Arguments as :class:`~synattn.structs.dependency.arc_scores.ArcCRF`: ``scores [batch_size, n+1, n+1]``
    (``scores[b, h, d]`` for head ``h`` → dependent ``d``, ROOT = 0), ``lengths [batch_size]``
    and ``multiroot``.

    Example:
        >>> crf = NonProjectiveDependencyCRF(torch.randn(2, 6, 6), torch.tensor([5, 3]))
        >>> torch.allclose(crf.marginals.sum(1)[:, 1:4], torch.ones(2, 3))  # one head per word
        True

    ``log_partition`` and ``marginals`` are returned in the scores' float dtype (float32 for
    half inputs); the computation is float64.
    """

    structure = "nonprojective"  # log_partition and marginals: synattn.structs.registry

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, batch_size, n]`` exact samples of non-projective trees as heads (``-1``
        padding, all ``-1`` where no tree exists): word by word from the conditional marginals,
        the inverse Laplacian updated by Sherman-Morrison (``O(n³)`` per sample; see
        :mod:`synattn.structs.dependency.matrix_tree_sample`). Not differentiable."""
        check_count(count, 8 * self.scores[..., 0, 0].numel() * self.scores.shape[-1])
        return matrix_tree_sample(self, count, generator)

    @cached_property
    def argmax(self) -> torch.Tensor:
        """``[batch_size, n]`` heads of words ``1..n`` of the best tree; ``-1`` padding, and
        all ``-1`` for a sentence whose masks leave no tree."""
        scores = self.scores.detach().double().cpu().numpy()
        found = np.full(scores.shape[:2], -1, dtype=np.int64)[:, 1:]
        for b, n in enumerate(self.lengths.tolist()):
            found[b, :n] = best_tree(scores[b, :n + 1, :n + 1], self.multiroot)
        heads = torch.from_numpy(found).to(self.scores.device)
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
