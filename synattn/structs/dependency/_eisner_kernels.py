"""Compiled CPU kernels (numba) for :class:`synattn.structs.DependencyCRF`.

They compute what the pure-PyTorch path of :mod:`synattn.structs.dependency.eisner` computes, with the same
recursions (Eisner 1996; see that module), the same single-root rule and the same charts, up to
rounding (the tests compare the two):

- the inside pass (log semiring) → ``log Z``;
- the explicit outside pass, the adjoint of the inside pass → arc marginals ``d log Z / d s``;
- both passes on dual numbers (value and tangent in a direction ``g``) → the Hessian-vector
  product ``H g``, the backward of the marginals. A log-sum-exp carries the tangent
  ``Σ_k softmax(t)_k ṫ_k``; an adjoint's share ``p = a·exp(t - T)`` of a term ``t`` of a sum
  ``T`` carries ``ṗ = exp(t - T)·(ȧ + a·(ṫ - Ṫ))``: bounded numbers, no logarithm of a signed one;
- the max semiring (Viterbi) with the adjoint routed to the first best split → the best tree;
- exact samples (:func:`sample`): the inside chart, then per sample a top-down walk in which each
  span draws one split with its posterior weight. The same distribution as the PyTorch path's
  sampled outside pass, not the same draws: each path reproduces its own samples for a given
  generator.

Loop structure: ``numba.prange`` over the sentences of the batch, one sentence per iteration
(on as many threads as PyTorch's intra-op pool); per sentence of ``n`` words, span widths in
increasing (inside) or decreasing (outside) order, then the split points, then the innermost loop
over the span starts. The charts are width-major as in the PyTorch path: a span ``(i, i+w)`` is
stored at ``[w, i]`` (by start) and, where a recursion reads it by its end ``j = i+w``, at
``[w, j]`` (by end), so for one width and one split point the innermost loop reads and writes
contiguous rows, and the compiler vectorises it (with :func:`synattn.structs._numba_math.exp`, a
polynomial exponential, since a call to the C library's ``exp`` would not vectorise). Per sentence the work is ``O(n³)``
and the memory ``O((n+1)²)``; all arithmetic is float64, whatever the input dtype, and
impossible items hold the finite ``NEG``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._numba_math import exp as _exp
from ..backend import as_array, set_threads
from ..constants import NEG, SERIAL_WORK

# Channels of the chart K [7, n+1, n+1], named as in synattn.structs.dependency.eisner (C/I complete/
# incomplete, R/L headed at the left/right end, S the split sum ⊕ C→ ⊗ C←; A_ stored by span
# start at [w, i], B_ by span end at [w, j]). The adjoints G [6, n+1, n+1] use the same names
# for the first six; a complete span's adjoint is the sum of those of its two copies.
A_CR, B_CR, A_CL, B_CL, A_IR, B_IL, A_S = 0, 1, 2, 3, 4, 5, 6

LOG, DUAL, VITERBI = 0, 1, 2  # log semiring; log semiring on dual numbers; max semiring

_jit = numba.njit(cache=True, fastmath=False)


# ---------------------------------------------------------------------------------------------
# One width: the sums over split points q < w of the terms X[x0+q, i] + Y[y0-q, w+i], for all
# span starts i < c at once, and their adjoints.
# ---------------------------------------------------------------------------------------------

@_jit
def _split_sums(mode, X, Y, dX, dY, x0, y0, w, c, v, dv, acc):
    """``v[i] = ⊕_{q<w} X[x0+q, i] ⊗ Y[y0-q, w+i]`` for ``i < c``; its tangent ``dv`` if DUAL."""
    for i in range(c):
        v[i] = X[x0, i] + Y[y0, w + i]
    for q in range(1, w):
        xq, yq = X[x0 + q, :c], Y[y0 - q, w:w + c]
        for i in range(c):
            t = xq[i] + yq[i]
            if t > v[i]:
                v[i] = t
    if mode == VITERBI:
        return
    acc[:c] = 0.0
    if mode == DUAL:
        dv[:c] = 0.0
        for q in range(w):
            xq, yq, dxq, dyq = X[x0 + q, :c], Y[y0 - q, w:w + c], dX[x0 + q, :c], dY[y0 - q, w:w + c]
            for i in range(c):
                e = _exp(xq[i] + yq[i] - v[i])
                acc[i] += e
                dv[i] += e * (dxq[i] + dyq[i])
        for i in range(c):
            dv[i] /= acc[i]
    else:
        for q in range(w):
            xq, yq = X[x0 + q, :c], Y[y0 - q, w:w + c]
            for i in range(c):
                acc[i] += _exp(xq[i] + yq[i] - v[i])
    for i in range(c):
        v[i] += math.log(acc[i])


@_jit
def _split_adjoints(mode, a, da, T, dT, X, Y, dX, dY, GX, GY, dGX, dGY, x0, y0, w, c, shift):
    """Adjoint of :func:`_split_sums` with totals ``T`` (tangents ``dT``) and adjoints ``a``
    (tangents ``da``): add each term's share to ``GX[x0+q, i]`` and ``GY[y0-q, w+i]`` (tangents
    to ``dGX``, ``dGY``). Spans with no adjoint (among them every impossible one) pass nothing.
    """
    if mode == VITERBI:  # all of it to the first best split
        for i in range(c):
            if a[i] != 0.0:
                best, arg = X[x0, i] + Y[y0, w + i], 0
                for q in range(1, w):
                    t = X[x0 + q, i] + Y[y0 - q, w + i]
                    if t > best:
                        best, arg = t, q
                GX[x0 + arg, i] += a[i]
                GY[y0 - arg, w + i] += a[i]
        return
    if mode == DUAL:
        for i in range(c):
            shift[i] = -T[i] if (a[i] != 0.0 or da[i] != 0.0) else 2 * NEG
        for q in range(w):
            xq, yq, dxq, dyq = X[x0 + q, :c], Y[y0 - q, w:w + c], dX[x0 + q, :c], dY[y0 - q, w:w + c]
            gxq, gyq = GX[x0 + q, :c], GY[y0 - q, w:w + c]
            dgxq, dgyq = dGX[x0 + q, :c], dGY[y0 - q, w:w + c]
            for i in range(c):
                e = _exp(xq[i] + yq[i] + shift[i])
                p = a[i] * e
                dp = e * (da[i] + a[i] * (dxq[i] + dyq[i] - dT[i]))
                gxq[i] += p
                gyq[i] += p
                dgxq[i] += dp
                dgyq[i] += dp
        return
    for i in range(c):  # share = exp(term + log(a) - T)
        shift[i] = math.log(a[i]) - T[i] if a[i] > 0.0 else 2 * NEG
    for q in range(w):
        xq, yq, gxq, gyq = X[x0 + q, :c], Y[y0 - q, w:w + c], GX[x0 + q, :c], GY[y0 - q, w:w + c]
        for i in range(c):
            p = _exp(xq[i] + yq[i] + shift[i])
            gxq[i] += p
            gyq[i] += p


# ---------------------------------------------------------------------------------------------
# One sentence.
# ---------------------------------------------------------------------------------------------

@_jit
def _inside(s, ds, n, multiroot, mode, K, dK, tmp):
    """Fill the chart ``K`` (tangents ``dK`` if DUAL) for arc scores ``s[h, d]`` (tangents ``ds``).

    Afterwards ``K[A_CR, n, 0]`` is ``log Z`` (or the best score). Without tangents, ``ds`` and
    ``dK`` may be ``s`` and ``K`` themselves: they are not written.
    """
    dual = mode == DUAL
    K[:] = NEG
    K[A_CR, 0] = K[B_CR, 0] = K[A_CL, 0] = K[B_CL, 0] = 0.0  # complete spans of width 0
    if dual:
        dK[:] = 0.0
    v, dv, acc = tmp[0], tmp[1], tmp[2]
    for w in range(1, n + 1):
        c = n + 1 - w
        # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j);  I→ = s[i, j] ⊗ S,  I← = s[j, i] ⊗ S
        _split_sums(mode, K[A_CR], K[B_CL], dK[A_CR], dK[B_CL], 0, w - 1, w, c, v, dv, acc)
        for i in range(c):
            K[A_S, w, i] = v[i]
            K[A_IR, w, i] = s[i, i + w] + v[i]
            K[B_IL, w, i + w] = s[i + w, i] + v[i]
            if dual:
                dK[A_S, w, i] = dv[i]
                dK[A_IR, w, i] = ds[i, i + w] + dv[i]
                dK[B_IL, w, i + w] = ds[i + w, i] + dv[i]
        # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
        _split_sums(mode, K[A_IR], K[B_CR], dK[A_IR], dK[B_CR], 1, w - 1, w, c, v, dv, acc)
        if not multiroot and w < n:  # single root: ROOT's complete span covers the sentence
            v[0], dv[0] = NEG, 0.0
        for i in range(c):
            K[A_CR, w, i] = K[B_CR, w, i + w] = v[i]
            if dual:
                dK[A_CR, w, i] = dK[B_CR, w, i + w] = dv[i]
        # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)  (never used with i = 0, ROOT)
        _split_sums(mode, K[A_CL], K[B_IL], dK[A_CL], dK[B_IL], 0, w, w, c, v, dv, acc)
        for i in range(c):
            K[A_CL, w, i] = K[B_CL, w, i + w] = v[i]
            if dual:
                dK[A_CL, w, i] = dK[B_CL, w, i + w] = dv[i]


@_jit
def _outside(n, mode, K, dK, G, dG, tmp, out):
    """Adjoint of :func:`_inside` from ``d/d log Z = 1``; writes the arc adjoints into ``out``.

    ``out[h, d]`` receives ``d log Z / d s[h, d]`` (the marginals), their tangents if DUAL (the
    Hessian-vector product) or the best tree's arcs as 0/1 if VITERBI; arcs into ROOT are left
    alone. Without tangents, ``dK`` and ``dG`` may be ``K`` and ``G`` themselves (not written).
    """
    dual = mode == DUAL
    G[:] = 0.0
    G[A_CR, n, 0] = 1.0
    if dual:
        dG[:] = 0.0
    src = dG if dual else G
    a, da, shift = tmp[3], tmp[4], tmp[5]
    for w in range(n, 0, -1):
        c = n + 1 - w
        for i in range(c):  # C→
            a[i] = G[A_CR, w, i] + G[B_CR, w, i + w]
            da[i] = dG[A_CR, w, i] + dG[B_CR, w, i + w] if dual else 0.0
        _split_adjoints(mode, a, da, K[A_CR, w], dK[A_CR, w], K[A_IR], K[B_CR], dK[A_IR], dK[B_CR],
                        G[A_IR], G[B_CR], dG[A_IR], dG[B_CR], 1, w - 1, w, c, shift)
        for i in range(c):  # C←
            a[i] = G[A_CL, w, i] + G[B_CL, w, i + w]
            da[i] = dG[A_CL, w, i] + dG[B_CL, w, i + w] if dual else 0.0
        _split_adjoints(mode, a, da, K[A_CL, w], dK[A_CL, w], K[A_CL], K[B_IL], dK[A_CL], dK[B_IL],
                        G[A_CL], G[B_IL], dG[A_CL], dG[B_IL], 0, w, w, c, shift)
        for i in range(c):  # the incomplete spans are done: arcs i → i+w, i+w → i; then S
            out[i, i + w] = src[A_IR, w, i]
            if i > 0:
                out[i + w, i] = src[B_IL, w, i + w]
            a[i] = G[A_IR, w, i] + G[B_IL, w, i + w]
            da[i] = dG[A_IR, w, i] + dG[B_IL, w, i + w] if dual else 0.0
        _split_adjoints(mode, a, da, K[A_S, w], dK[A_S, w], K[A_CR], K[B_CL], dK[A_CR], dK[B_CL],
                        G[A_CR], G[B_CL], dG[A_CR], dG[B_CL], 0, w - 1, w, c, shift)


# ---------------------------------------------------------------------------------------------
# Batches.
# ---------------------------------------------------------------------------------------------

@numba.njit(cache=True, parallel=True, fastmath=False)
def _batch(s, ds, lengths, multiroot, mode, outside):
    """``log_z [B]`` and, if ``outside``, the arc adjoints ``[B, N+1, N+1]`` (0 past each length).

    ``s [B, N+1, N+1]`` float64 arc scores; ``ds`` their tangents (read only if DUAL).
    """
    batch, L = s.shape[0], s.shape[1]
    dual = mode == DUAL
    log_z = np.empty(batch)
    out = np.zeros((batch, L, L) if outside else (batch, 0, 0))
    for b in numba.prange(batch):
        n = lengths[b]
        K = np.empty((7, n + 1, n + 1))
        dK = np.empty((7, n + 1, n + 1)) if dual else K
        tmp = np.empty((6, n + 1))
        _inside(s[b], ds[b], n, multiroot, mode, K, dK, tmp)
        log_z[b] = K[A_CR, n, 0]
        if outside:
            G = np.empty((6, n + 1, n + 1))
            dG = np.empty((6, n + 1, n + 1)) if dual else G
            _outside(n, mode, K, dK, G, dG, tmp, out[b])
    return log_z, out


def _run(scores: torch.Tensor, tangent: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
         mode: int, outside: bool) -> tuple[torch.Tensor, torch.Tensor]:
    set_threads(int(((lengths + 1) ** 3).sum()), SERIAL_WORK)
    log_z, out = _batch(as_array(scores.double()), as_array(tangent.double()),
                        as_array(lengths.long()), multiroot, mode, outside)
    return torch.from_numpy(log_z).to(scores.dtype), torch.from_numpy(out).to(scores.dtype)


def log_partition(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """``[batch_size]`` ``log Z`` over projective trees (inside pass only).

    Args:
        scores: ``[batch_size, N+1, N+1]`` arc scores as :func:`~.arc_scores.check_arc_scores`
            returns them (CPU, float32/float64).
        lengths: ``[batch_size]`` word counts in ``1..N``.
        multiroot: allow several words to attach to ROOT.
    """
    return _run(scores, scores, lengths, multiroot, LOG, False)[0]


def marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
              viterbi: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_z [batch_size]`` and arc marginals ``[batch_size, N+1, N+1]`` (inside + outside).

    With ``viterbi``: the best tree's score and its arcs as 0/1 ``[batch_size, N+1, N+1]``.
    Arguments as for :func:`log_partition`; the results have the dtype of ``scores``.
    """
    return _run(scores, scores, lengths, multiroot, VITERBI if viterbi else LOG, True)


def marginals_jvp(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                  tangent: torch.Tensor) -> torch.Tensor:
    """``[batch_size, N+1, N+1]`` derivative of the arc marginals in the direction ``tangent``.

    That is the Hessian-vector product ``H g`` of ``log Z`` for ``g = tangent``
    (``[batch_size, N+1, N+1]``, read at the arcs trees use), which is also the vector-Jacobian
    product of the marginals (``H`` is symmetric): inside-outside on dual numbers.
    """
    return _run(scores, tangent, lengths, multiroot, DUAL, True)[1]


# ---------------------------------------------------------------------------------------------
# Exact samples: one inside pass per sentence, then a top-down walk per sample.
# ---------------------------------------------------------------------------------------------

@_jit
def _drawn(X, Y, x0, y0, w, i, total, u):
    """The split ``q < w`` of the sum ``total = ⊕_q X[x0+q, i] ⊗ Y[y0-q, w+i]`` (a chart entry,
    :func:`_split_sums`) drawn with its posterior weight ``exp(term - total)`` by the uniform
    ``u`` (inverse distribution function, stopping at the split drawn; a term of weight 0, such as
    a masked arc's, is never drawn: where rounding leaves ``u`` past the weights' sum, the last
    term of positive weight)."""
    acc, last = 0.0, 0
    for q in range(w):
        p = math.exp(X[x0 + q, i] + Y[y0 - q, w + i] - total)
        if p > 0.0:
            last = q
            acc += p
            if acc > u:
                return q
    return last


@_jit
def _sample_tree(n, K, u, heads, stack):
    """One tree drawn top-down from the inside chart ``K`` (:func:`_inside`): from ``C→(0, n)``,
    each nonempty span picks the split of its sum with its posterior weight and expands the two
    spans it joins, until only empty complete spans are left; an incomplete span ``I→(i, j)``
    (``I←(i, j)``) is the arc ``i → j`` (``j → i``), written into ``heads [n]``. ``u``: one uniform
    per expanded span (``2n``: each of the ``n`` arcs and the complete span that made it); ``stack
    [>= 4n + 1, 3]``: the spans still to expand (channel, start, width; each expansion pushes two)."""
    stack[0, 0], stack[0, 1], stack[0, 2] = A_CR, 0, n
    top, used = 1, 0
    while top > 0:
        top -= 1
        c, i, w = stack[top, 0], stack[top, 1], stack[top, 2]
        if w == 0:
            continue
        if c == A_CR:  # C→(i, j) = ⊕ I→(i, r) ⊗ C→(r, j), r = i+1+q
            q = _drawn(K[A_IR], K[B_CR], 1, w - 1, w, i, K[A_CR, w, i], u[used])
            a0, a1, a2, b0, b1, b2 = A_IR, i, q + 1, A_CR, i + q + 1, w - q - 1
        elif c == A_CL:  # C←(i, j) = ⊕ C←(i, r) ⊗ I←(r, j), r = i+q
            q = _drawn(K[A_CL], K[B_IL], 0, w, w, i, K[A_CL, w, i], u[used])
            a0, a1, a2, b0, b1, b2 = A_CL, i, q, B_IL, i + q, w - q
        else:  # I→(i, j) or I←(i, j): the arc, then S(i, j) = ⊕ C→(i, r) ⊗ C←(r+1, j), r = i+q
            if c == A_IR:
                heads[i + w - 1] = i
            else:
                heads[i - 1] = i + w
            q = _drawn(K[A_CR], K[B_CL], 0, w - 1, w, i, K[A_S, w, i], u[used])
            a0, a1, a2, b0, b1, b2 = A_CR, i, q, A_CL, i + q + 1, w - q - 1
        used += 1
        stack[top, 0], stack[top, 1], stack[top, 2] = a0, a1, a2
        stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = b0, b1, b2
        top += 2


@numba.njit(cache=True, parallel=True, fastmath=False)
def _sample_batch(s, lengths, multiroot, u, heads):
    """``heads [count, B, N]`` (filled with -1) of ``count`` trees per sentence: one inside pass
    per sentence (:func:`_inside`), then one top-down walk per sample (``u [count, B, >= 2N]``)."""
    count, batch, L = u.shape[0], s.shape[0], s.shape[1]
    K = np.empty((batch, 7, L, L))
    for b in numba.prange(batch):
        n = lengths[b]
        _inside(s[b], s[b], n, multiroot, LOG, K[b], K[b], np.empty((6, n + 1)))
    for z in numba.prange(count * batch):
        c, b = z // batch, z % batch
        n = lengths[b]
        _sample_tree(n, K[b], u[c, b], heads[c, b], np.empty((4 * n + 1, 3), np.int64))


def sample(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, count: int,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """``[count, batch_size, N]`` heads (``-1`` padding) of exact samples of projective trees
    (arguments as for :func:`log_partition`): one inside pass per sentence, then a top-down walk
    per sample (:func:`_sample_tree`) with uniforms drawn from ``generator`` (float64)."""
    batch, L = scores.shape[0], scores.shape[1]
    u = torch.rand(count, batch, 2 * L, generator=generator, dtype=torch.float64)
    heads = np.full((count, batch, L - 1), -1, dtype=np.int64)
    set_threads(int(((lengths + 1) ** 3).sum()) + count * int(((lengths + 1) ** 2).sum()), SERIAL_WORK)
    _sample_batch(as_array(scores.double()), as_array(lengths.long()), multiroot, as_array(u), heads)
    return torch.from_numpy(heads)
