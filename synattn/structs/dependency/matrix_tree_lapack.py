"""Matrix-Tree ``log Z`` and marginals on the CPU by LAPACK's blocked LU, certified sentence by
sentence, with the compiled GTH elimination for the sentences the certificate refuses.

The compiled GTH elimination (:mod:`synattn.structs.dependency._matrix_tree_kernels`) is exact at
any scale but an unblocked ``O(n³)`` loop: LAPACK's blocked LU of the same matrices runs 2–4×
faster from ``n = 40``. This path builds Koo et al.'s (2007) matrix of the column-scaled weights
in one compiled pass (:func:`~synattn.structs.dependency._matrix_tree_lapack_kernels.koo_load`),
factorises the batch with ``torch.linalg.lu_factor_ex`` (and, for the marginals, inverts it with
``lu_solve``), and keeps a sentence only when the LU passes the certificate of
:func:`~synattn.structs.dependency.matrix_tree_gth._lapack_inverse` (every pivot at least
:data:`~synattn.structs.dependency.matrix_tree_gth.CERTIFICATE` times its column's largest entry,
a positive determinant, marginals in ``[0, 1]`` whose columns sum to 1 within ``1e-9``): where the
LU's subtractions may have cancelled, the sentence is recomputed by the GTH kernel. Outputs are
those of :func:`~synattn.structs.dependency.matrix_tree_gth._compiled_marginals` (``log Z`` NaN
for a sentence that needs the log-space elimination), so the two are interchangeable.

Batched LU with two threads fails inside oneMKL (``DLASWP`` parameter errors, then a hang) for
``[4, N, N]`` with ``N >= 150`` on some CPU builds; from
:data:`~synattn.structs.dependency.matrix_tree_gth.LAPACK_MAX_N` the LAPACK calls run on one thread.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np
import torch

from ..backend import as_array, kernels as backend_kernels, one_thread, set_threads
from ..constants import SERIAL_WORK
from .matrix_tree_gth import CERTIFICATE, LAPACK_MAX_N, _compiled_marginals, _work

_Outputs = tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]

LAPACK_FROM = 64
"""From this padded length the compiled path takes LAPACK's LU (certified); below, the GTH kernel
alone, which costs less than the LAPACK call and the passes around it at these sizes."""

LAPACK_FILL = 0.6
"""``log Z`` alone takes LAPACK only when the sentences fill at least this fraction of the padded
batch's ``Σ (N+1)³`` work: LAPACK factorises the padded matrices, the GTH kernel each sentence at
its own length (with the marginals, LAPACK's inverse pays at any fill measured, 0.5 and up)."""


def lapack_pays(lengths: torch.Tensor, N: int, need_marginals: bool) -> bool:
    """Whether :func:`compiled_marginals` takes LAPACK (:data:`LAPACK_FROM`, :data:`LAPACK_FILL`)."""
    if N < LAPACK_FROM:
        return False
    return need_marginals or _work(lengths) >= LAPACK_FILL * len(lengths) * (N + 1) ** 3


@overload
def compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                       inverse: Literal[False] = False) -> tuple[torch.Tensor, torch.Tensor | None]: ...
@overload
def compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                       inverse: Literal[True]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]: ...
def compiled_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                       inverse: bool = False) -> _Outputs:
    """The compiled path's ``log Z``, marginals and (with ``inverse``) inverses: :func:`certified_marginals`
    where :func:`lapack_pays`, :func:`_compiled_marginals` (GTH) elsewhere."""
    if lapack_pays(lengths, scores.shape[-1] - 1, need_marginals):
        if inverse:
            return certified_marginals(scores, lengths, multiroot, need_marginals, inverse=True)
        return certified_marginals(scores, lengths, multiroot, need_marginals)
    if inverse:
        return _compiled_marginals(scores, lengths, multiroot, need_marginals, inverse=True)
    return _compiled_marginals(scores, lengths, multiroot, need_marginals)


@overload
def certified_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                        inverse: Literal[False] = False) -> tuple[torch.Tensor, torch.Tensor | None]: ...
@overload
def certified_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                        inverse: Literal[True]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]: ...
def certified_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, need_marginals: bool,
                        inverse: bool = False) -> _Outputs:
    """``log Z [B]`` (float64; NaN where the log-space elimination is needed), the marginals
    ``[B, N+1, N+1]`` (the scores' dtype, or None) and, with ``inverse``, the inverses
    ``X [B, N, N]`` (float64) of Koo's matrices: as :func:`_compiled_marginals`, by LAPACK where
    certified and the GTH kernel elsewhere."""
    kernels = backend_kernels("dependency._matrix_tree_lapack_kernels")
    s, n = as_array(scores), as_array(lengths)
    batch, L, _ = s.shape
    N = L - 1
    E, shifts = np.empty((batch, N + 1, N)), np.empty((batch, N))
    set_threads(_work(lengths), SERIAL_WORK)
    log_z = kernels.koo_exponents(s, n, E, shifts)
    weights = torch.from_numpy(E).exp_()  # [B, N+1, N]: rows ROOT, words
    W, K, scale = weights.numpy(), np.empty((batch, N, N)), np.empty((batch, N))
    kernels.koo_load(W, n, multiroot, K, scale)
    with one_thread(N >= LAPACK_MAX_N):  # (see the module)
        lu, pivots, info = torch.linalg.lu_factor_ex(torch.from_numpy(K))
    u = as_array(lu.diagonal(dim1=1, dim2=2))  # (LAPACK's factors are column-major: no full copy)
    ok = kernels.certify(scale, u, as_array(pivots), as_array(info), CERTIFICATE, log_z)
    wide = np.isnan(log_z)
    mu = x = None
    if need_marginals:
        with one_thread(N >= LAPACK_MAX_N):  # (see the module)
            # X^T in column-major order, i.e. X itself row-major (no copy for the kernels)
            x = torch.linalg.lu_solve(lu, pivots, torch.eye(N, dtype=torch.float64).expand(batch, N, N),
                                      adjoint=True).mT
        out = np.zeros(s.shape, dtype=s.dtype)
        ok &= ~wide
        kernels.koo_marginals(W, n, multiroot, as_array(x), out, ok)
        mu = torch.from_numpy(out)
    redo = np.flatnonzero(~ok & ~wide)
    if len(redo):  # the certificate refused these: the GTH elimination, exact at any scale
        idx = torch.from_numpy(redo)
        again = _compiled_marginals(scores[idx], lengths[idx], multiroot, need_marginals, inverse=True)
        log_z[redo] = again[0].numpy()
        if mu is not None and again[1] is not None:
            mu[idx] = again[1]
        if x is not None and inverse:
            x = x.index_copy(0, idx, again[2])
    z = torch.from_numpy(log_z)
    if inverse:
        return z, mu, x if x is not None else torch.zeros(0, 0, 0, dtype=torch.float64)
    return z, mu
