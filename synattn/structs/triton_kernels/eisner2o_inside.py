"""Second-order Eisner as Triton kernels: the inside pass (the chart, bottom-up).

:func:`_inside` fills the chart ``CH [B, 5, L, L]`` of ``C←, C→, I←, I→, S`` (channels ``CL, CR,
IL, IR, SS``) width by width, one program per sentence, and gives ``log Z`` (or the best score,
``VITERBI``) and, on dual numbers (``DUAL``), its tangent in a direction ``(g, g_sib)``. The
device functions :func:`_sum`, :func:`_one`, :func:`_put` and :func:`_close` (a running online
``⊕`` over the terms of an item, and its store) are shared with the outside pass of
:mod:`synattn.structs.triton_kernels.eisner2o`, which launches both and documents the charts.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import NEG_INF, lse_accumulate, lse_finish, signature

CL, CR, IL, IR, SS = (tl.constexpr(c) for c in range(5))  # chart channels


@triton.jit
def _sum(xp, dxp, xs, yp, dyp, ys, zp, dzp, zs, ok, count, bound, m, acc, dacc, THREE: tl.constexpr,
         VITERBI: tl.constexpr, DUAL: tl.constexpr, BK: tl.constexpr):
    """Fold ``⊕_{k < count} X[k·xs] ⊗ Y[k·ys] (⊗ Z[k·zs] if THREE)`` into the running ``⊕`` of
    each row where ``ok``: ``xp, yp, zp [BI]`` point at each row's first term, ``dxp, dyp, dzp``
    at their tangents (read if ``DUAL``), ``count [BI] <= bound`` (a scalar)."""
    rk = tl.arange(0, BK).to(tl.int64)
    for k0 in range(0, bound, BK):
        k = (k0 + rk)[None, :]
        mask = ok[:, None] & (k < count[:, None])
        x, y = k * xs, k * ys
        t = tl.load(xp[:, None] + x, mask=mask, other=NEG_INF) + tl.load(yp[:, None] + y, mask=mask, other=0.0)
        if THREE:
            t += tl.load(zp[:, None] + k * zs, mask=mask, other=0.0)
        dt = t
        if DUAL:
            dt = tl.load(dxp[:, None] + x, mask=mask, other=0.0) + tl.load(dyp[:, None] + y, mask=mask, other=0.0)
            if THREE:
                dt += tl.load(dzp[:, None] + k * zs, mask=mask, other=0.0)
        m, acc, dacc = lse_accumulate(t, dt, m, acc, dacc, VITERBI, DUAL)
    return m, acc, dacc


@triton.jit
def _one(p, dp, ok, DTYPE: tl.constexpr, VITERBI: tl.constexpr, DUAL: tl.constexpr, BI: tl.constexpr):
    """The running ``⊕`` of one term per row, ``X`` at ``p [BI]`` (where ``ok``, else none)."""
    t = tl.load(p, mask=ok, other=NEG_INF)
    dt = t
    if DUAL:
        dt = tl.load(dp, mask=ok, other=0.0)
    zero = tl.zeros([BI], DTYPE)
    return lse_accumulate(t[:, None], dt[:, None], tl.full([BI], NEG_INF, DTYPE), zero, zero, VITERBI, DUAL)


@triton.jit
def _put(x, dx, offset, v, dv, ok, DUAL: tl.constexpr):
    tl.store(x + offset, v, mask=ok)
    if DUAL:
        tl.store(dx + offset, dv, mask=ok)


@triton.jit
def _close(x, dx, offset, m, acc, dacc, sp, gp, ok, ARC: tl.constexpr, VITERBI: tl.constexpr, DUAL: tl.constexpr):
    """Store the ``⊕`` of the running state (``⊗`` the arc score at ``sp``, tangent at ``gp``, if
    ``ARC``) at ``x + offset``, its tangent at ``dx + offset``."""
    v, dv = lse_finish(m, acc, dacc, VITERBI, DUAL)
    if ARC:
        v += tl.load(sp, mask=ok, other=0.0)
        if DUAL:
            dv += tl.load(gp, mask=ok, other=0.0)
    _put(x, dx, offset, v, dv, ok, DUAL)


@triton.jit
def _item(ch, dch, offset, x, xs, y, ys, ok, count, bound, VITERBI: tl.constexpr, DUAL: tl.constexpr,
          DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    """Store at ``offset`` the ``⊕_{k < count} CH[x + k·xs] ⊗ CH[y + k·ys]`` of each row."""
    zero = tl.zeros([BI], DTYPE)
    m, acc, dacc = _sum(ch + x, dch + x, xs, ch + y, dch + y, ys, ch, dch, 0, ok, count, bound,
                        tl.full([BI], NEG_INF, DTYPE), zero, zero, False, VITERBI, DUAL, BK)
    _close(ch, dch, offset, m, acc, dacc, ch, dch, ok, False, VITERBI, DUAL)


@triton.jit
def _inside(S, SIB, G, GSIB, LEN, CH, DCH, LOGZ, DLOGZ, L, MULTIROOT: tl.constexpr, VITERBI: tl.constexpr,
            DUAL: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    LL = L * L
    s, g, sib, gsib = S + b * LL, G + b * LL, SIB + b * LL * L, GSIB + b * LL * L
    ch, dch = CH + b * 5 * LL, DCH + b * 5 * LL
    ri = tl.arange(0, BI).to(tl.int64)  # (int64 offsets everywhere: the siblings have L³ per sentence)
    zero = tl.zeros([BI], DTYPE)
    for i0 in range(0, n + 1, BI):  # width 0: C(i, i) = 0
        i = i0 + ri
        for c in range(2):
            _put(ch, dch, i * L + i + c * LL, zero, zero, i <= n, DUAL)
    tl.debug_barrier()
    for w in range(1, n + 1):
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            j = i + w
            width = i * 0 + w
            sib_ok = ok
            if not MULTIROOT:
                sib_ok = ok & (i > 0)  # ROOT's only child has no sibling
            # S(i, j) = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
            _item(ch, dch, i * L + j + SS * LL, i * L + i + CR * LL, 1, (i + 1) * L + j + CL * LL, L, ok, width, w,
                  VITERBI, DUAL, DTYPE, BI, BK)
            # I→(i, j) = s[i, j] ⊗ ( C←(i+1, j)  ⊕  ⊕_{i<r<j} I→(i, r) ⊗ S(r, j) ⊗ sib[i, r, j] )
            q, x = (i + 1) * L + j + CL * LL, i * L + i + 1 + IR * LL
            y, z = (i + 1) * L + j + SS * LL, i * LL + (i + 1) * L + j
            m, acc, dacc = _one(ch + q, dch + q, ok, DTYPE, VITERBI, DUAL, BI)
            m, acc, dacc = _sum(ch + x, dch + x, 1, ch + y, dch + y, L, sib + z, gsib + z, L,
                                sib_ok, width - 1, w - 1, m, acc, dacc, True, VITERBI, DUAL, BK)
            _close(ch, dch, i * L + j + IR * LL, m, acc, dacc, s + i * L + j, g + i * L + j, ok, True, VITERBI, DUAL)
            # I←(i, j) = s[j, i] ⊗ ( C→(i, j-1)  ⊕  ⊕_{i<r<j} I←(r, j) ⊗ S(i, r) ⊗ sib[j, r, i] )
            q, x = i * L + j - 1 + CR * LL, (i + 1) * L + j + IL * LL
            y, z = i * L + i + 1 + SS * LL, j * LL + (i + 1) * L + i
            m, acc, dacc = _one(ch + q, dch + q, ok, DTYPE, VITERBI, DUAL, BI)
            m, acc, dacc = _sum(ch + x, dch + x, L, ch + y, dch + y, 1, sib + z, gsib + z, L, ok, width - 1, w - 1,
                                m, acc, dacc, True, VITERBI, DUAL, BK)
            _close(ch, dch, i * L + j + IL * LL, m, acc, dacc, s + j * L + i, g + j * L + i, ok, True, VITERBI, DUAL)
        tl.debug_barrier()
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            j = i + w
            width = i * 0 + w
            # C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)
            _item(ch, dch, i * L + j + CL * LL, i * L + i + CL * LL, 1, i * L + j + IL * LL, L, ok, width, w,
                  VITERBI, DUAL, DTYPE, BI, BK)
            # C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
            _item(ch, dch, i * L + j + CR * LL, i * L + i + 1 + IR * LL, 1, (i + 1) * L + j + CR * LL, L, ok, width, w,
                  VITERBI, DUAL, DTYPE, BI, BK)
        tl.debug_barrier()
    tl.store(LOGZ + b, tl.load(ch + CR * LL + n))  # log Z = C→(0, n)
    if DUAL:
        tl.store(DLOGZ + b, tl.load(dch + CR * LL + n))


# Variants compiled for a GPU by the tests (see :mod:`synattn.structs.triton_kernels.eisner2o`).
COMPILE_CHECKS = [
    (_inside, signature(_inside, LEN="*i32", L="i32"),
     {"DTYPE": tl.float32, "BI": 32, "BK": 32, **extra})
    for extra in [{"MULTIROOT": False, "VITERBI": False, "DUAL": True},
                  {"MULTIROOT": True, "VITERBI": True, "DUAL": False}]
]
