"""Compiled CPU kernels (numba) for :class:`synattn.structs.TreeCRF` (CKY inside-outside).

They compute what the PyTorch path of :mod:`synattn.structs.cky` computes, with the same
recursion, up to rounding (the tests compare the two):

- the inside pass (log semiring) → ``log Z``; without derivatives by :func:`_log_z`, the same
  operations (the same numbers) on flat charts reused across the sentences, on one thread below
  ``SERIAL_WORK`` without numba's parallel launch;
- the outside pass, its adjoint → span marginals ``d log Z / d s``;
- both on dual numbers (value and tangent in a direction ``g``) → the Hessian-vector product
  ``H g``, the backward of the marginals;
- the max semiring with the adjoint routed to the first best split → the best tree.

Per sentence of ``n`` words the charts are width-major: ``A[w, i] = beta(i, i+w)`` by span start
and ``Bc[w, j] = beta(j-w, j)`` by span end, so that for one width ``w`` and one split the terms
``A[q, i] + Bc[w-1-q, i+w]`` of all starts ``i`` are two contiguous rows: the innermost loop runs
over ``i`` and vectorises. The split sums and their adjoints are those of the Eisner kernels
(:func:`~synattn.structs.dependency._eisner_kernels._split_sums`, ``_split_adjoints``; polynomial
exponential, a zero adjoint passes nothing). ``numba.prange`` over the sentences; float64 inside.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._numba_math import exp as _exp
from ..backend import as_array, set_threads
from ..constants import IMPOSSIBLE, NEG, SERIAL_WORK
from ..dependency._eisner_kernels import DUAL, LOG, VITERBI, _split_adjoints, _split_sums

CA, CB, CS = 0, 1, 2  # chart channels: beta by start, beta by end, split sums S by start

_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _inside(s, ds, n, mode, K, dK, tmp):
    """Fill ``K [3, n, n]`` (tangents ``dK`` if DUAL) for span scores ``s[i, j]``; afterwards
    ``K[CA, n-1, 0]`` is ``log Z`` (or the best score). Without tangents ``ds``/``dK`` may alias."""
    dual = mode == DUAL
    K[:] = NEG
    if dual:
        dK[:] = 0.0
    for i in range(n):
        K[CA, 0, i] = K[CB, 0, i] = s[i, i]
        if dual:
            dK[CA, 0, i] = dK[CB, 0, i] = ds[i, i]
    v, dv, acc = tmp[0], tmp[1], tmp[2]
    for w in range(1, n):
        c = n - w
        # S(i, i+w) = ⊕_{q<w} beta(i, i+q) ⊗ beta(i+q+1, i+w) = A[q, i] + Bc[w-1-q, i+w]
        _split_sums(mode, K[CA], K[CB], dK[CA], dK[CB], 0, w - 1, w, c, v, dv, acc)
        for i in range(c):
            K[CS, w, i] = v[i]
            K[CA, w, i] = K[CB, w, i + w] = s[i, i + w] + v[i]
            if dual:
                dK[CS, w, i] = dv[i]
                dK[CA, w, i] = dK[CB, w, i + w] = ds[i, i + w] + dv[i]


@_jit
def _outside(n, mode, K, dK, G, dG, tmp, out):
    """Adjoint of :func:`_inside` from ``d/d log Z = 1``: ``out[i, j]`` receives the marginals,
    their tangents if DUAL (the Hessian-vector product) or the best tree's spans as 0/1."""
    dual = mode == DUAL
    G[:] = 0.0
    G[CA, n - 1, 0] = 1.0
    if dual:
        dG[:] = 0.0
    src = dG if dual else G
    a, da, shift = tmp[3], tmp[4], tmp[5]
    for w in range(n - 1, 0, -1):
        c = n - w
        for i in range(c):
            a[i] = G[CA, w, i] + G[CB, w, i + w]
            da[i] = dG[CA, w, i] + dG[CB, w, i + w] if dual else 0.0
            out[i, i + w] = src[CA, w, i] + src[CB, w, i + w]
        _split_adjoints(mode, a, da, K[CS, w], dK[CS, w], K[CA], K[CB], dK[CA], dK[CB],
                        G[CA], G[CB], dG[CA], dG[CB], 0, w - 1, w, c, shift)
    for i in range(n):
        out[i, i] = src[CA, 0, i] + src[CB, 0, i]


@numba.njit(cache=True, parallel=True, fastmath=False)
def _batch(s, ds, lengths, mode, outside):
    """``log_z [B]`` and, if ``outside``, the span adjoints ``[B, N, N]`` (0 past each length)."""
    batch, N = s.shape[0], s.shape[1]
    dual = mode == DUAL
    log_z = np.empty(batch)
    out = np.zeros((batch, N, N) if outside else (batch, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        K = np.empty((3, n, n))
        dK = np.empty((3, n, n)) if dual else K
        tmp = np.empty((6, n))
        _inside(s[b], ds[b], n, mode, K, dK, tmp)
        log_z[b] = K[CA, n - 1, 0]
        if outside:
            G = np.empty((2, n, n))
            dG = np.empty((2, n, n)) if dual else G
            _outside(n, mode, K, dK, G, dG, tmp, out[b])
    return log_z, out


def _run(scores: torch.Tensor, tangent: torch.Tensor, lengths: torch.Tensor, mode: int,
         outside: bool) -> tuple[torch.Tensor, torch.Tensor]:
    set_threads(int((lengths ** 3).sum()) if torch.get_num_threads() > 1 else None, SERIAL_WORK)
    s = as_array(scores.double())
    log_z, out = _batch(s, s if tangent is scores else as_array(tangent.double()),
                        as_array(lengths.long()), mode, outside)
    return torch.from_numpy(log_z).to(scores.dtype), torch.from_numpy(out).to(scores.dtype)


@_jit
def _log_z(s, n, A, B, v, acc):
    """``log Z`` of one sentence by :func:`_inside`'s LOG recursion with the same operations in
    the same order (the same numbers), on flat charts ``A[w*n + i]``, ``B[w*n + j]`` (scratch of
    ``n*n`` or more, ``v`` and ``acc`` of ``n``): no fill (every entry read is written before),
    one view per row read (an index ``A[x + i]`` of unknown sign would not vectorise)."""
    for i in range(n):
        A[i] = B[i] = s[i, i]
    for w in range(1, n):
        c = n - w
        y = (w - 1) * n + w
        a, b = A[:c], B[y:y + c]
        for i in range(c):
            v[i] = a[i] + b[i]
        for q in range(1, w):
            x, y = q * n, (w - 1 - q) * n + w
            a, b = A[x:x + c], B[y:y + c]
            for i in range(c):
                t = a[i] + b[i]
                if t > v[i]:
                    v[i] = t
        for i in range(c):
            acc[i] = 0.0
        for q in range(w):
            x, y = q * n, (w - 1 - q) * n + w
            a, b = A[x:x + c], B[y:y + c]
            for i in range(c):
                acc[i] += _exp(a[i] + b[i] - v[i])
        x = w * n
        a, b = A[x:x + c], B[x + w:x + w + c]
        for i in range(c):
            a[i] = b[i] = s[i, i + w] + (v[i] + math.log(acc[i]))
    return A[(n - 1) * n]


@_jit
def _store(out, b, z):
    """``out[b] = z`` in ``out``'s dtype, ``-inf`` if below ``IMPOSSIBLE`` there (no tree)."""
    out[b] = z
    if out[b] < IMPOSSIBLE:
        out[b] = -np.inf


@_jit
def _log_z_serial(s, lengths, out):
    """``out[b] = log Z`` of each sentence on one thread, one set of charts for all."""
    N = s.shape[1]
    A, B, v, acc = np.empty(N * N), np.empty(N * N), np.empty(N), np.empty(N)
    for b in range(lengths.shape[0]):
        _store(out, b, _log_z(s[b], lengths[b], A, B, v, acc))


@numba.njit(cache=True, parallel=True, fastmath=False)
def _log_z_parallel(s, lengths, out):
    """:func:`_log_z_serial` with ``numba.prange`` over the sentences."""
    for b in numba.prange(lengths.shape[0]):
        n = lengths[b]
        _store(out, b, _log_z(s[b], n, np.empty(n * n), np.empty(n * n), np.empty(n), np.empty(n)))


def log_partition(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[batch_size]`` ``log Z`` (inside pass only) of checked span scores ``[B, N, N]`` (CPU) in
    their dtype, ``-inf`` for a sentence whose every tree uses a forbidden span. Float64 inside
    (float32 scores are read as they are: no copy); one thread below ``SERIAL_WORK``, without
    numba's parallel launch."""
    out = torch.empty(scores.shape[0], dtype=scores.dtype)
    s, n = as_array(scores), as_array(lengths.long())
    if torch.get_num_threads() > 1 and set_threads(int((n ** 3).sum()), SERIAL_WORK) > 1:
        _log_z_parallel(s, n, out.numpy())
    else:
        _log_z_serial(s, n, out.numpy())
    return out


def marginals(scores: torch.Tensor, lengths: torch.Tensor,
              viterbi: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_z [B]`` and span marginals ``[B, N, N]``; with ``viterbi`` the best score and the
    best tree's spans as 0/1."""
    return _run(scores, scores, lengths, VITERBI if viterbi else LOG, True)


def marginals_jvp(scores: torch.Tensor, lengths: torch.Tensor,
                  tangent: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` derivative of the span marginals in the direction ``tangent``: the
    Hessian-vector product of ``log Z``, equal to the vector-Jacobian product (``H`` symmetric)."""
    return _run(scores, tangent, lengths, DUAL, True)[1]
