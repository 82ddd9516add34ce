"""The Matrix-Tree theorem's robust path as one Triton kernel: the GTH elimination in log space,
its adjoint (the marginals) and both on dual numbers (the marginals' backward), each program
gated by a flag computed on the device.

The GPU path of :mod:`synattn.structs.dependency.matrix_tree_device` factorises Koo et al.'s
matrix by batched LU and certifies each sentence on the device. A sentence that fails the
certificate (extreme score scales, masks that starve a pivot) needs the elimination of
:mod:`synattn.structs.dependency.matrix_tree_log`, and deciding on the host which sentences those
are costs a read back per call. Here every sentence gets a program, and a program whose flag
says "certified" does nothing: the choice is made on the device, and the call is one launch
whatever the batch holds.

The elimination (Grassmann, Taksar & Heyman 1985; the matrix ``M [R, N]`` of
:func:`~synattn.structs.dependency.matrix_tree_log._log_weights`, logarithms of arc weights,
rows the heads, columns the dependents; ``R = N+1`` rows; single root: the last row is ROOT's
replaced row, kept out of the pivots) runs step ``k`` as

- pivot ``P_k = ⊕_{r>k} M[r, k]`` (the rows that may still head word ``k``);
- row ``M[k, c] -= P_k`` (``c > k``);
- ``M[r, c] = M[r, c] ⊕ (M[r, k] + M[k, c])`` (``r, c > k``), in place, so that after the loop
  column ``k`` below row ``k`` and row ``k`` right of it are as they were at step ``k``;

``log Z = Σ_k P_k`` (single root: plus the last entry of ROOT's row). Every value is a
log-sum of non-negative terms: exact at any scale.

The adjoint walks the steps backwards in *marginal units*: with ``G = ∂ log Z / ∂ exp(M)`` (kept
as ``log G``; ``G >= 0`` throughout), the terms ``q[r, c] = exp(M[r, k] + M[k, c] + log G[r, c])``
are the marginal mass of the reduced graph's arc ``r → c`` that passes through word ``k``, so
``U_r = Σ_c q``, ``V_c = Σ_r q`` and ``S = Σ q`` lie in ``[0, 1]``, ``[0, 1]`` and ``[0, N]``.
Then the reduced graph's marginals of word ``k``'s in-arcs and out-arcs are
``U_r + exp(M[r, k] - P_k)(1 - S)`` (rows ``r`` that feed the pivot) and ``V_c``; the original
arcs' marginals are these times ``exp(W - M)`` (the share of the original weight in the reduced
one). The one signed quantity, ``1 - S``, is bounded by ``N``: the marginals' rounding errors
are absolute, about ``N`` times float64's epsilon, as in the CPU elimination's adjoint
(:func:`~synattn.structs.dependency.matrix_tree_gth._gth_marginals`) — but nothing underflows.

On dual numbers (``DUAL``) each stored value carries its derivative in a direction ``v`` of
the scores: ``Ṁ`` (of the logarithms), ``Ṗ``, ``ġ`` (of ``log G``) and the marginals' ``μ̇``, the
Hessian of ``log Z`` times ``v`` — the marginals' backward, ``H`` being symmetric.

A program reads the scores ``[N+1, N+1]`` of its sentence and writes its ``log Z`` and its
marginals (or, under ``DUAL``, their tangents) ``[N+1, N+1]`` in the scores' layout; in between
it keeps ``W`` (the log weights), ``M``, ``G``, ``μ`` ``[R, N]``, the pivots ``[N]`` and their
tangents in scratch, everything it reads written first (``torch.empty``). A sentence whose masks
leave no tree gets ``log Z = 2·NEG`` and zeros, as on the CPU paths.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..constants import NEG
from .common import NEG_INF, fold, lse_finish, signature, tile

LOG0 = tl.constexpr(-1e30)
"""No arc (finite: sums of several stay finite, and ``exp`` of them is 0)."""
TINY_MU = tl.constexpr(1e-280)
"""A reduced marginal below this is taken as 0 (its ``log G`` is then :data:`LOG0`)."""


@triton.jit
def _with_tangent(x, dx, at, mask, other, DUAL: tl.constexpr):
    """``x[at]`` (``other`` outside ``mask``) and, under ``DUAL``, its tangent ``dx[at]`` (0 there)."""
    value = tl.load(x + at, mask=mask, other=other)
    d = value
    if DUAL:
        d = tl.load(dx + at, mask=mask, other=0.0)
    return value, d


@triton.jit
def _eliminate(m, dm, piv, dpiv, N, R, SINGLE: tl.constexpr, DUAL: tl.constexpr,
               BR: tl.constexpr, BC: tl.constexpr):
    """The elimination of one sentence (``M`` holds its log weights); returns ``(log Z, its tangent)``."""
    rr, cc = tl.arange(0, BR), tl.arange(0, BC)
    log_z = tl.zeros([], tl.float64)
    d_log_z = tl.zeros([], tl.float64)
    rows_end = R - SINGLE  # (single root: ROOT's replaced row feeds no pivot)
    for k in range(0, N - SINGLE):
        # P_k = ⊕_{k < r < rows_end} M[r, k]
        mx, acc, dacc = tl.full([], NEG_INF, tl.float64), tl.zeros([], tl.float64), tl.zeros([], tl.float64)
        for r0 in range(k + 1, rows_end, BR):
            r = r0 + rr
            ok = r < rows_end
            x, dx = _with_tangent(m, dm, r * N + k, ok, NEG_INF, DUAL)
            mx, acc, dacc = fold(x, dx, mx, acc, dacc, False, DUAL)
        p, dp = lse_finish(mx, acc, dacc, False, DUAL)
        tl.store(piv + k, p)
        log_z += p
        if DUAL:
            tl.store(dpiv + k, dp)
            d_log_z += dp
        for c0 in range(k + 1, N, BC):  # M[k, c] -= P_k
            c = c0 + cc
            ok = c < N
            tl.store(m + k * N + c, tl.load(m + k * N + c, mask=ok, other=0.0) - p, mask=ok)
            if DUAL:
                tl.store(dm + k * N + c, tl.load(dm + k * N + c, mask=ok, other=0.0) - dp, mask=ok)
        tl.debug_barrier()
        # M[r, c] = M[r, c] ⊕ (M[r, k] + M[k, c]);  Ṁ = (1 - π) Ṁ + π (Ṁ[r, k] + Ṁ[k, c])
        for r0 in range(k + 1, R, BR):
            r = r0 + rr
            rok = r < R
            col, dcol = _with_tangent(m, dm, r * N + k, rok, LOG0, DUAL)
            for c0 in range(k + 1, N, BC):
                c = c0 + cc
                cok = c < N
                mask = rok[:, None] & cok[None, :]
                off = r[:, None] * N + c[None, :]
                x = col[:, None] + tl.load(m + k * N + c, mask=cok, other=LOG0)[None, :]
                old = tl.load(m + off, mask=mask, other=LOG0)
                hi = tl.maximum(old, x)
                new = hi + tl.log(tl.exp(old - hi) + tl.exp(x - hi))
                tl.store(m + off, new, mask=mask)
                if DUAL:
                    pi = tl.exp(x - new)
                    step = dcol[:, None] + tl.load(dm + k * N + c, mask=cok, other=0.0)[None, :]
                    tl.store(dm + off, (1.0 - pi) * tl.load(dm + off, mask=mask, other=0.0) + pi * step,
                             mask=mask)
        tl.debug_barrier()
    if SINGLE:  # the last pivot: ROOT's row's last entry (Koo et al.'s Schur complement)
        log_z += tl.load(m + (R - 1) * N + N - 1)
        if DUAL:
            d_log_z += tl.load(dm + (R - 1) * N + N - 1)
    return log_z, d_log_z


@triton.jit
def _terms(m, g, dg, k, N, r, c, mask, col, dcol, DUAL: tl.constexpr):
    """``q[r, c] = exp(M[r, k] + M[k, c] + log G[r, c])`` (0 outside ``mask``) and, under
    ``DUAL``, ``q (Ṁ[r, k] + ġ[r, c])``: its tangent but for the row's part ``q Ṁ[k, c]``."""
    row = tl.load(m + k * N + c, mask=c < N, other=LOG0)
    off = r[:, None] * N + c[None, :]
    q = tl.where(mask, tl.exp(col[:, None] + row[None, :] + tl.load(g + off, mask=mask, other=LOG0)), 0.0)
    dq = q
    if DUAL:
        dq = q * (dcol[:, None] + tl.load(dg + off, mask=mask, other=0.0))
    return q, dq


@triton.jit
def _adjoint(a, v, m, dm, g, dg, piv, dpiv, mu, dmu, N, R, SINGLE: tl.constexpr, DUAL: tl.constexpr,
             BR: tl.constexpr, BC: tl.constexpr):
    """The marginals of one sentence (and their tangents) from the eliminated ``M``."""
    rr, cc = tl.arange(0, BR), tl.arange(0, BC)
    for j0 in range(0, N, BR):  # no self-arcs
        j = j0 + rr
        ok = j < N
        tl.store(g + j * N + j, tl.full([BR], LOG0, tl.float64), mask=ok)
        tl.store(mu + j * N + j, tl.zeros([BR], tl.float64), mask=ok)
        if DUAL:
            tl.store(dg + j * N + j, tl.zeros([BR], tl.float64), mask=ok)
            tl.store(dmu + j * N + j, tl.zeros([BR], tl.float64), mask=ok)
    if SINGLE:  # G = 1 / (last pivot): that arc's reduced marginal is 1
        at = (R - 1) * N + N - 1
        last = tl.load(m + at)
        root_share = tl.exp(tl.minimum(tl.load(a + at) - last, 0.0))
        tl.store(g + at, -last)
        tl.store(mu + at, root_share)
        if DUAL:
            d_last = tl.load(dm + at)
            tl.store(dg + at, -d_last)
            tl.store(dmu + at, root_share * (tl.load(v + at) - d_last))
    tl.debug_barrier()
    rows_end = R - SINGLE
    for k in range(N - SINGLE - 1, -1, -1):
        p = tl.load(piv + k)
        dp = p
        if DUAL:
            dp = tl.load(dpiv + k)
        # U_r = Σ_c q[r, c] (kept in μ[r, k] until S is known);  S = Σ_r U_r
        s, ds = tl.zeros([], tl.float64), tl.zeros([], tl.float64)
        for r0 in range(k + 1, R, BR):
            r = r0 + rr
            rok = r < R
            col, dcol = _with_tangent(m, dm, r * N + k, rok, LOG0, DUAL)
            u, du = tl.zeros([BR], tl.float64), tl.zeros([BR], tl.float64)
            for c0 in range(k + 1, N, BC):
                c = c0 + cc
                mask = rok[:, None] & (c < N)[None, :]
                q, dq = _terms(m, g, dg, k, N, r, c, mask, col, dcol, DUAL)
                u += tl.sum(q, 1)
                if DUAL:
                    dq += q * tl.load(dm + k * N + c, mask=c < N, other=0.0)[None, :]
                    du += tl.sum(dq, 1)
            tl.store(mu + r * N + k, u, mask=rok)
            s += tl.sum(u, 0)
            if DUAL:
                tl.store(dmu + r * N + k, du, mask=rok)
                ds += tl.sum(du, 0)
        # row k: the reduced marginal of k -> c is V_c = Σ_r q[r, c];  G[k, c] = V_c / exp(M[k, c] + P_k)
        for c0 in range(k + 1, N, BC):
            c = c0 + cc
            cok = c < N
            row, drow = _with_tangent(m, dm, k * N + c, cok, LOG0, DUAL)
            vc, dvc = tl.zeros([BC], tl.float64), tl.zeros([BC], tl.float64)
            for r0 in range(k + 1, R, BR):
                r = r0 + rr
                rok = r < R
                col, dcol = _with_tangent(m, dm, r * N + k, rok, LOG0, DUAL)
                mask = rok[:, None] & cok[None, :]
                q, dq = _terms(m, g, dg, k, N, r, c, mask, col, dcol, DUAL)
                vc += tl.sum(q, 0)
                if DUAL:
                    dvc += tl.sum(dq + q * drow[None, :], 0)
            keep = vc > TINY_MU
            safe = tl.where(keep, vc, 1.0)
            tl.store(g + k * N + c, tl.where(keep, tl.log(safe) - row - p, LOG0), mask=cok)
            # W / exp(M) <= 1 (the minimum: where both are LOG0, which absorbs P_k)
            share = tl.exp(tl.where(cok, tl.minimum(tl.load(a + k * N + c, mask=cok, other=0.0) - row - p, 0.0), LOG0))
            tl.store(mu + k * N + c, share * vc, mask=cok)
            if DUAL:
                tl.store(dg + k * N + c, tl.where(keep, dvc / safe - drow - dp, 0.0), mask=cok)
                dw = tl.load(v + k * N + c, mask=cok, other=0.0)
                tl.store(dmu + k * N + c, share * (dvc + vc * (dw - drow - dp)), mask=cok)
        tl.debug_barrier()
        # column k: the reduced marginal of r -> k is U_r + exp(M[r, k] - P_k)(1 - S) (rows feeding the pivot)
        for r0 in range(k + 1, R, BR):
            r = r0 + rr
            rok = r < R
            col = tl.load(m + r * N + k, mask=rok, other=LOG0)
            u = tl.load(mu + r * N + k, mask=rok, other=0.0)
            e = tl.exp(tl.where(r < rows_end, col - p, LOG0))
            red = tl.maximum(u + e * (1.0 - s), 0.0)
            keep = red > TINY_MU
            safe = tl.where(keep, red, 1.0)
            tl.store(g + r * N + k, tl.where(keep, tl.log(safe) - col, LOG0), mask=rok)
            share = tl.exp(tl.where(rok, tl.minimum(tl.load(a + r * N + k, mask=rok, other=0.0) - col, 0.0), LOG0))
            tl.store(mu + r * N + k, share * red, mask=rok)
            if DUAL:
                dcol = tl.load(dm + r * N + k, mask=rok, other=0.0)
                d_red = tl.load(dmu + r * N + k, mask=rok, other=0.0) + e * (dcol - dp) * (1.0 - s) - e * ds
                tl.store(dg + r * N + k, tl.where(keep, d_red / safe - dcol, 0.0), mask=rok)
                dw = tl.load(v + r * N + k, mask=rok, other=0.0)
                tl.store(dmu + r * N + k, share * (d_red + red * (dw - dcol)), mask=rok)
        tl.debug_barrier()


@triton.jit
def _node(i, N, SINGLE: tl.constexpr):
    """The node (0 = ROOT) of row or column ``i`` of the elimination's layout."""
    if SINGLE:  # words 2..N, word 1, ROOT
        return tl.where(i < N - 1, i + 2, tl.where(i == N - 1, 1, 0))
    return tl.where(i < N, i + 1, 0)  # words 1..N, ROOT


@triton.jit
def _place(j, N, SINGLE: tl.constexpr):
    """The row (or column) of node ``j`` in the elimination's layout (inverse of :func:`_node`)."""
    if SINGLE:
        return tl.where(j == 0, N, tl.where(j == 1, N - 1, j - 2))
    return tl.where(j == 0, N, j - 1)


@triton.jit
def _load(s, ds, w, v, m, dm, n, L, N, R, NEG: tl.constexpr, SINGLE: tl.constexpr, DUAL: tl.constexpr,
          BR: tl.constexpr, BC: tl.constexpr):
    """The log weights ``W`` (and ``M``, which starts as ``W``) of the scores ``s [L, L]`` in the
    elimination's layout, and their tangents from ``ds``: as
    :func:`~synattn.structs.dependency.matrix_tree_log._log_weights` (masked arcs at the
    sentence's ``soft`` score, padded words a unit arc); returns ``n·lo``, the floor of a tree."""
    rr, cc = tl.arange(0, BR), tl.arange(0, BC)
    nf = n.to(tl.float64)
    hi, lo = tl.zeros([], tl.float64), tl.zeros([], tl.float64)  # (hi >= 0 >= lo, as clamped there)
    for h0 in range(0, L, BR):
        h = h0 + rr
        for d0 in range(1, L, BC):
            d = d0 + cc
            usable = (h[:, None] <= n) & (d[None, :] <= n) & (h[:, None] != d[None, :])
            x = tl.load(s + h[:, None] * L + d[None, :], mask=usable, other=NEG).to(tl.float64)
            free = usable & (x > NEG)
            hi = tl.maximum(hi, tl.max(tl.max(tl.where(free, x, 0.0), 1), 0))
            lo = tl.minimum(lo, tl.min(tl.min(tl.where(free, x, 0.0), 1), 0))
    soft = nf * lo - (nf - 1.0) * hi - 1000.0 - nf * tl.log(nf + 1.0)
    unit_row = N - SINGLE  # (multi-root: ROOT's row; single root: word 1's)
    for r0 in range(0, R, BR):
        r = r0 + rr
        h = _node(r, N, SINGLE)
        for c0 in range(0, N, BC):
            c = c0 + cc
            d = _node(c, N, SINGLE)
            mask = (r[:, None] < R) & (c[None, :] < N)
            usable = mask & (h[:, None] <= n) & (d[None, :] <= n) & (h[:, None] != d[None, :])
            at = h[:, None] * L + d[None, :]
            x = tl.load(s + at, mask=usable, other=NEG).to(tl.float64)
            free = usable & (x > NEG)
            unit = (r[:, None] == unit_row) & (d[None, :] > n)
            value = tl.where(free, x, tl.where(usable, soft, tl.where(unit, 0.0, LOG0)))
            off = r[:, None] * N + c[None, :]
            tl.store(w + off, value, mask=mask)
            tl.store(m + off, value, mask=mask)
            if DUAL:
                dx = tl.where(free, tl.load(ds + at, mask=free, other=0.0).to(tl.float64), 0.0)
                tl.store(v + off, dx, mask=mask)
                tl.store(dm + off, dx, mask=mask)
    tl.debug_barrier()
    return nf * lo


@triton.jit
def _scatter(mu, out, none, n, L, N, SINGLE: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """``out [L, L]`` (the scores' layout) from ``mu`` (the elimination's): usable arcs only, 0
    elsewhere and everywhere if ``none``."""
    rr, cc = tl.arange(0, BR), tl.arange(0, BC)
    for h0 in range(0, L, BR):
        h = h0 + rr
        for d0 in range(0, L, BC):
            d = d0 + cc
            mask = (h[:, None] < L) & (d[None, :] < L)
            usable = mask & (h[:, None] <= n) & (d[None, :] <= n) & (h[:, None] != d[None, :]) & (d[None, :] > 0)
            at = _place(h, N, SINGLE)[:, None] * N + _place(d, N, SINGLE)[None, :]
            value = tl.where(none, 0.0, tl.load(mu + at, mask=usable, other=0.0))
            tl.store(out + h[:, None] * L + d[None, :], value, mask=mask)


@triton.jit
def _robust(S, DS, OK, LEN, W, V, M, DM, G, DG, PIV, DPIV, MU, DMU, OUT, DOUT, LOGZ, L, N, R,
            NEG: tl.constexpr, SINGLE: tl.constexpr, MARGINALS: tl.constexpr, DUAL: tl.constexpr,
            BR: tl.constexpr, BC: tl.constexpr):
    """One program per sentence; a sentence certified by LU (``OK``) returns at once."""
    b = tl.program_id(0).to(tl.int64)
    if tl.load(OK + b) == 0:
        n = tl.load(LEN + b).to(tl.int32)
        at = b * R * N
        w, v, m, dm, g, dg = W + at, V + at, M + at, DM + at, G + at, DG + at
        piv, dpiv = PIV + b * N, DPIV + b * N
        floor = _load(S + b * L * L, DS + b * L * L, w, v, m, dm, n, L, N, R, NEG, SINGLE, DUAL, BR, BC)
        log_z, d_log_z = _eliminate(m, dm, piv, dpiv, N, R, SINGLE, DUAL, BR, BC)
        none = log_z < floor - 500.0  # no tree without a masked arc (see _load)
        tl.store(LOGZ + b, tl.where(none, 2.0 * NEG, log_z))
        if MARGINALS:
            _adjoint(w, v, m, dm, g, dg, piv, dpiv, MU + at, DMU + at, N, R, SINGLE, DUAL, BR, BC)
            tl.debug_barrier()
            if DUAL:
                _scatter(DMU + at, DOUT + b * L * L, none, n, L, N, SINGLE, BR, BC)
            else:
                _scatter(MU + at, OUT + b * L * L, none, n, L, N, SINGLE, BR, BC)


def robust(scores: torch.Tensor, lengths: torch.Tensor, ok: torch.Tensor, multiroot: bool, marginals: bool,
           direction: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log Z [B]`` and (``marginals``) the marginals ``[B, N+1, N+1]`` (float64) of the arc
    scores ``[B, N+1, N+1]`` (checked as for the other paths), or with ``direction`` (same shape)
    the Hessian of ``log Z`` times it instead of the marginals, for the sentences where ``ok [B]``
    (bool) is False: the others' entries are left unwritten. A sentence whose masks leave no
    tree gets ``log Z = 2·NEG`` and zeros."""
    B, L, _ = scores.shape
    N, R = L - 1, L
    dual = direction is not None
    scores = scores.detach().contiguous()
    ds = direction.detach().contiguous() if direction is not None else scores
    w = torch.empty(B, R, N, dtype=torch.float64, device=scores.device)
    m, piv, log_z = torch.empty_like(w), w.new_empty(B, N), w.new_empty(B)
    g, mu = (torch.empty_like(w), torch.empty_like(w)) if marginals else (m, m)
    v, dm, dpiv = (torch.empty_like(w), torch.empty_like(w), torch.empty_like(piv)) if dual else (w, m, piv)
    dg, dmu = (torch.empty_like(w), torch.empty_like(w)) if dual and marginals else (g, mu)
    out = w.new_empty(B, L, L) if marginals else log_z
    _robust[(B,)](scores, ds, ok.contiguous(), lengths.contiguous(), w, v, m, dm, g, dg, piv, dpiv, mu, dmu,
                  out, out, log_z, L, N, R, NEG=NEG, SINGLE=int(not multiroot), MARGINALS=marginals, DUAL=dual,
                  BR=tile(R), BC=tile(N))
    return log_z, out if marginals else None


# Variants compiled for a GPU by the tests (no GPU needed: Triton compiles to a cubin on any
# machine). ``(kernel, argument types, constexprs)``.
COMPILE_CHECKS = [
    (_robust, signature(_robust, "*fp64", S=score, DS=score, OK="*i1", LEN="*i64", L="i32", N="i32", R="i32"),
     {"NEG": NEG, "SINGLE": single, "MARGINALS": marginals, "DUAL": dual, "BR": 32, "BC": 32})
    for single, marginals, dual, score in [(1, True, True, "*fp32"), (0, True, False, "*fp64"),
                                           (0, False, False, "*fp32")]
]
