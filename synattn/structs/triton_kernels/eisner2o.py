"""Second-order (adjacent-sibling) Eisner as Triton kernels: two launches for the marginals.

The recursions are those of :mod:`synattn.structs.dependency.eisner2o` (McDonald and Pereira 2006;
Zhang et al. 2020), over charts indexed by span start and end, one program per sentence, the span
widths in a loop inside the kernel (as :mod:`synattn.structs.triton_kernels.eisner`):

- :func:`~synattn.structs.triton_kernels.eisner2o_inside._inside` — ``log Z`` (or the best
  score, ``VITERBI``), and on dual numbers (``DUAL``) its tangent in a direction ``(g, g_sib)``
  (:mod:`synattn.structs.triton_kernels.eisner2o_inside`, with the device functions both passes
  share);
- :func:`_outside` — the outside scores of every item in log space, each *pulled* from the wider
  items that use it (no scatter, no atomics), the arc marginals ``exp(I + O_I - log Z)`` and the
  sibling marginals ``exp(O'_I + I + S + sib - log Z)`` of every sibling term, and under ``DUAL``
  their tangents: the Hessian-vector product that is the marginals' backward;
- :func:`_backtrack` — the best tree from the max-semiring chart, top-down, each used item routed
  to its first best term (the order of the other backends: the nearest dependent first).

Charts: ``CH [B, 5, L, L]`` holds ``C←, C→, I←, I→, S`` (``CL, CR, IL, IR, SS``); ``OUT`` the
outside scores of ``C←, C→, S`` and, for ``I``, ``O'_I = O_I ⊗ s``, the outside of the sum inside
the arc (what the sibling marginals and the items below ``I`` need). ``L = N + 1``, ROOT at 0.
Only items inside a sentence are read, so the charts need no initialisation (``torch.empty``).
Marginals are ``exp(min(·, 0))``: at most 1 even when rounding at masked magnitudes (``-1e9``)
would make them overflow. A third derivative (the marginals' backward differentiated again) runs
autograd on the PyTorch path (:func:`synattn.structs.dependency.eisner2o_inside.eisner2o_inside`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import NEG_INF, lse_finish, signature, tile, tl_dtype
from .eisner2o_inside import CL, CR, IL, IR, SS, _close, _inside, _one, _put, _sum


@triton.jit
def _sibling_marginals(ch, dch, sib, gsib, mus, dmus, p, dp, x0, xs, y0, ys, z0, zs, ok, count, log_z, dlog_z,
                       DUAL: tl.constexpr, BK: tl.constexpr):
    """``MUS[z0 + k·zs] = exp(p + CH[x0 + k·xs] + CH[y0 + k·ys] + SIB[z0 + k·zs] - log Z)`` for
    ``k < count`` (rows where ``ok``), and under ``DUAL`` its tangent (the sum of the parts')."""
    rk = tl.arange(0, BK).to(tl.int64)
    for k0 in range(0, count, BK):
        k = (k0 + rk)[None, :]
        mask = ok[:, None] & (k < count)
        x, y, z = x0[:, None] + k * xs, y0[:, None] + k * ys, z0[:, None] + k * zs
        t = (p[:, None] + tl.load(ch + x, mask=mask, other=0.0) + tl.load(ch + y, mask=mask, other=0.0)
             + tl.load(sib + z, mask=mask, other=0.0))
        mu = tl.exp(tl.minimum(t - log_z, 0.0))
        tl.store(mus + z, mu, mask=mask)
        if DUAL:
            dt = (dp[:, None] + tl.load(dch + x, mask=mask, other=0.0) + tl.load(dch + y, mask=mask, other=0.0)
                  + tl.load(gsib + z, mask=mask, other=0.0))
            tl.store(dmus + z, tl.where(mu > 0, mu * (dt - dlog_z), 0.0), mask=mask)


@triton.jit
def _outside(S, SIB, G, GSIB, LEN, CH, DCH, OUT, DOUT, LOGZ, DLOGZ, MU, DMU, MUS, DMUS, L,
             MULTIROOT: tl.constexpr, DUAL: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    LL = L * L
    s, g, mu, dmu = S + b * LL, G + b * LL, MU + b * LL, DMU + b * LL
    sib, gsib, mus, dmus = SIB + b * LL * L, GSIB + b * LL * L, MUS + b * LL * L, DMUS + b * LL * L
    ch, dch, out, dout = CH + b * 5 * LL, DCH + b * 5 * LL, OUT + b * 5 * LL, DOUT + b * 5 * LL
    log_z = tl.load(LOGZ + b)
    dlog_z = log_z
    if DUAL:
        dlog_z = tl.load(DLOGZ + b)
    ri = tl.arange(0, BI).to(tl.int64)
    zero, none = tl.zeros([BI], DTYPE), tl.full([BI], NEG_INF, DTYPE)  # (an empty ⊕: none, zero, zero)
    h0 = 0  # the first head with siblings: ROOT's only child has none
    if not MULTIROOT:
        h0 = 1
    for w in range(n, 0, -1):
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            e = i + w
            right, top = n - e, n - i0 - w  # (the j > e: how many, and at most)
            # O_C→(i, e) = O'_I←(i, e+1)  ⊕  ⊕_{j>e} O_S(i, j) ⊗ C←(e+1, j)  ⊕  ⊕_{h<i} O_C→(h, e) ⊗ I→(h, i)
            q, x, y = i * L + e + 1 + IL * LL, i * L + e + 1 + SS * LL, (e + 1) * L + e + 1 + CL * LL
            m, acc, dacc = _one(out + q, dout + q, ok & (e < n), DTYPE, False, DUAL, BI)
            m, acc, dacc = _sum(out + x, dout + x, 1, ch + y, dch + y, 1, ch, dch, 0, ok, right, top, m, acc, dacc,
                                False, False, DUAL, BK)
            x, y = e + CR * LL, i + IR * LL
            m, acc, dacc = _sum(out + x, dout + x, L, ch + y, dch + y, L, ch, dch, 0, ok, i, i0 + BI, m, acc, dacc,
                                False, False, DUAL, BK)
            v, dv = lse_finish(m, acc, dacc, False, DUAL)
            v = tl.where((i == 0) & (w == n), 0.0, v)  # C→(0, n) is log Z itself
            _put(out, dout, i * L + e + CR * LL, v, dv, ok, DUAL)
            # O_C←(i, e) = O'_I→(i-1, e)  ⊕  ⊕_{h<i} O_S(h, e) ⊗ C→(h, i-1)  ⊕  ⊕_{j>e} O_C←(i, j) ⊗ I←(e, j)
            q, x, y = (i - 1) * L + e + IR * LL, e + SS * LL, i - 1 + CR * LL
            m, acc, dacc = _one(out + q, dout + q, ok & (i > 0), DTYPE, False, DUAL, BI)
            m, acc, dacc = _sum(out + x, dout + x, L, ch + y, dch + y, L, ch, dch, 0, ok, i, i0 + BI, m, acc, dacc,
                                False, False, DUAL, BK)
            x, y = i * L + e + 1 + CL * LL, e * L + e + 1 + IL * LL
            m, acc, dacc = _sum(out + x, dout + x, 1, ch + y, dch + y, 1, ch, dch, 0, ok, right, top, m, acc, dacc,
                                False, False, DUAL, BK)
            _close(out, dout, i * L + e + CL * LL, m, acc, dacc, s, g, ok, False, False, DUAL)
            # O_S(i, e) = ⊕_{h<i} O'_I→(h, e) ⊗ I→(h, i) ⊗ sib[h, i, e]
            #           ⊕ ⊕_{j>e} O'_I←(i, j) ⊗ I←(e, j) ⊗ sib[j, e, i]
            x, y, z = h0 * L + e + IR * LL, h0 * L + i + IR * LL, i * L + e + h0 * LL
            m, acc, dacc = _sum(out + x, dout + x, L, ch + y, dch + y, L, sib + z, gsib + z, LL, ok, i - h0,
                                i0 + BI, none, zero, zero, True, False, DUAL, BK)
            x, y, z = i * L + e + 1 + IL * LL, e * L + e + 1 + IL * LL, (e + 1) * LL + e * L + i
            m, acc, dacc = _sum(out + x, dout + x, 1, ch + y, dch + y, 1, sib + z, gsib + z, LL, ok, right, top,
                                m, acc, dacc, True, False, DUAL, BK)
            _close(out, dout, i * L + e + SS * LL, m, acc, dacc, s, g, ok, False, False, DUAL)
        tl.debug_barrier()
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            ok = i <= n - w
            e = i + w
            right, top = n - e, n - i0 - w
            sib_ok = ok
            if not MULTIROOT:
                sib_ok = ok & (i > 0)
            # O_I→(i, e) = ⊕_{j>=e} O_C→(i, j) ⊗ C→(e, j)  ⊕  ⊕_{j>e} O'_I→(i, j) ⊗ S(e, j) ⊗ sib[i, e, j]
            x, y = i * L + e + CR * LL, e * L + e + CR * LL
            m, acc, dacc = _sum(out + x, dout + x, 1, ch + y, dch + y, 1, ch, dch, 0, ok, right + 1, top + 1,
                                none, zero, zero, False, False, DUAL, BK)
            x, y, z = i * L + e + 1 + IR * LL, e * L + e + 1 + SS * LL, i * LL + e * L + e + 1
            m, acc, dacc = _sum(out + x, dout + x, 1, ch + y, dch + y, 1, sib + z, gsib + z, 1, sib_ok, right, top,
                                m, acc, dacc, True, False, DUAL, BK)
            o_right, do_right = lse_finish(m, acc, dacc, False, DUAL)
            # O_I←(i, e) = ⊕_{h<=i} O_C←(h, e) ⊗ C←(h, i)  ⊕  ⊕_{h<i} O'_I←(h, e) ⊗ S(h, i) ⊗ sib[e, i, h]
            x, y = e + CL * LL, i + CL * LL
            m, acc, dacc = _sum(out + x, dout + x, L, ch + y, dch + y, L, ch, dch, 0, ok, i + 1, i0 + BI, none, zero,
                                zero, False, False, DUAL, BK)
            x, y, z = e + IL * LL, i + SS * LL, e * LL + i * L
            m, acc, dacc = _sum(out + x, dout + x, L, ch + y, dch + y, L, sib + z, gsib + z, 1, ok, i, i0 + BI,
                                m, acc, dacc, True, False, DUAL, BK)
            o_left, do_left = lse_finish(m, acc, dacc, False, DUAL)
            # O'_I→(i, e) = O_I→(i, e) ⊗ s[i, e],  O'_I←(i, e) = O_I←(i, e) ⊗ s[e, i]
            p_right = o_right + tl.load(s + i * L + e, mask=ok, other=0.0)
            p_left = o_left + tl.load(s + e * L + i, mask=ok, other=0.0)
            dp_right, dp_left = do_right, do_left
            if DUAL:
                dp_right += tl.load(g + i * L + e, mask=ok, other=0.0)
                dp_left += tl.load(g + e * L + i, mask=ok, other=0.0)
            _put(out, dout, i * L + e + IR * LL, p_right, dp_right, ok, DUAL)
            _put(out, dout, i * L + e + IL * LL, p_left, dp_left, ok, DUAL)
            # μ(i→e) = exp(I→(i, e) ⊗ O_I→(i, e) − log Z), μ(e→i) likewise (no arc into ROOT)
            in_right = tl.load(ch + IR * LL + i * L + e, mask=ok, other=0.0)
            in_left = tl.load(ch + IL * LL + i * L + e, mask=ok, other=0.0)
            mu_right = tl.exp(tl.minimum(in_right + o_right - log_z, 0.0))
            mu_left = tl.where(i > 0, tl.exp(tl.minimum(in_left + o_left - log_z, 0.0)), 0.0)
            tl.store(mu + i * L + e, mu_right, mask=ok)
            tl.store(mu + e * L + i, mu_left, mask=ok)
            if DUAL:
                d_right = tl.load(dch + IR * LL + i * L + e, mask=ok, other=0.0) + do_right - dlog_z
                d_left = tl.load(dch + IL * LL + i * L + e, mask=ok, other=0.0) + do_left - dlog_z
                tl.store(dmu + i * L + e, tl.where(mu_right > 0, mu_right * d_right, 0.0), mask=ok)
                tl.store(dmu + e * L + i, tl.where(mu_left > 0, mu_left * d_left, 0.0), mask=ok)
            # μ_sib[i, r, e] = exp(O'_I→(i, e) ⊗ I→(i, r) ⊗ S(r, e) ⊗ sib[i, r, e] − log Z),  i < r < e
            _sibling_marginals(ch, dch, sib, gsib, mus, dmus, p_right, dp_right, i * L + i + 1 + IR * LL, 1,
                               (i + 1) * L + e + SS * LL, L, i * LL + (i + 1) * L + e, L, sib_ok, w - 1,
                               log_z, dlog_z, DUAL, BK)
            # μ_sib[e, r, i] = exp(O'_I←(i, e) ⊗ I←(r, e) ⊗ S(i, r) ⊗ sib[e, r, i] − log Z),  i < r < e
            _sibling_marginals(ch, dch, sib, gsib, mus, dmus, p_left, dp_left, (i + 1) * L + e + IL * LL, L,
                               i * L + i + 1 + SS * LL, 1, e * LL + (i + 1) * L + i, L, ok & (i > 0), w - 1,
                               log_z, dlog_z, DUAL, BK)
        tl.debug_barrier()


@triton.jit
def _route(ch, sib, flag, item, ok, terms_ok, x0, xs, y0, ys, z0, zs, count, near,
           NEAR: tl.constexpr, THREE: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    """If the item at ``item [BI]`` is flagged (and ``ok``), flag the parts of its first best term:
    ``CH[near]`` if ``NEAR`` (the first term), else ``CH[x0 + k·xs]`` and ``CH[y0 + k·ys]`` at the
    first ``k < count`` (where ``terms_ok``) maximising them ``(+ SIB[z0 + k·zs])``, strictly
    better than the first term. Returns whether the item is used."""
    used = ok & (tl.load(flag + item, mask=ok, other=0.0) > 0)
    best = tl.full([BI], NEG_INF, DTYPE)
    where = tl.zeros([BI], tl.int32)
    if NEAR:
        best = tl.load(ch + near, mask=used, other=NEG_INF)
        where -= 1
    rk = tl.arange(0, BK).to(tl.int64)
    for k0 in range(0, count, BK):
        k = (k0 + rk)[None, :]
        mask = (used & terms_ok)[:, None] & (k < count)
        t = (tl.load(ch + x0[:, None] + k * xs, mask=mask, other=NEG_INF)
             + tl.load(ch + y0[:, None] + k * ys, mask=mask, other=0.0))
        if THREE:
            t += tl.load(sib + z0[:, None] + k * zs, mask=mask, other=0.0)
        chunk_best = tl.max(t, 1)
        better = chunk_best > best
        where = tl.where(better, tl.argmax(t, 1).to(tl.int32) + k0, where)
        best = tl.where(better, chunk_best, best)
    one = tl.full([BI], 1.0, DTYPE)
    if NEAR:
        tl.store(flag + near, one, mask=used & (where < 0))
    tl.store(flag + x0 + where * xs, one, mask=used & (where >= 0))  # (flags of empty spans are unread)
    tl.store(flag + y0 + where * ys, one, mask=used & (where >= 0))
    return used


@triton.jit
def _backtrack(SIB, LEN, CH, FLAG, ARCS, L, MULTIROOT: tl.constexpr, DTYPE: tl.constexpr, BI: tl.constexpr,
               BK: tl.constexpr):
    """The best tree from the max-semiring chart: ``FLAG [B, 5, L, L]`` (zeros on entry) marks the
    items used, ``ARCS [B, L, L]`` (zeros on entry) gets 1 at each arc ``h → d``."""
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b).to(tl.int32)
    LL = L * L
    sib, ch, flag, arcs = SIB + b * LL * L, CH + b * 5 * LL, FLAG + b * 5 * LL, ARCS + b * LL
    ri = tl.arange(0, BI).to(tl.int64)
    tl.store(flag + CR * LL + n, 1.0)  # C→(0, n) is used
    tl.debug_barrier()
    one = tl.full([BI], 1.0, DTYPE)
    for w in range(n, 0, -1):
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            e = i + w
            ok = i <= n - w
            # C→(i, e) = I→(i, r) ⊗ C→(r, e) at its first best r in (i, e]
            _route(ch, sib, flag, i * L + e + CR * LL, ok, ok, i * L + i + 1 + IR * LL, 1, (i + 1) * L + e + CR * LL,
                   L, i, 0, w, i, False, False, DTYPE, BI, BK)
            # C←(i, e) = C←(i, r) ⊗ I←(r, e) at its first best r in [i, e)
            _route(ch, sib, flag, i * L + e + CL * LL, ok, ok, i * L + i + CL * LL, 1, i * L + e + IL * LL, L,
                   i, 0, w, i, False, False, DTYPE, BI, BK)
            # S(i, e) = C→(i, r) ⊗ C←(r+1, e) at its first best r in [i, e)
            _route(ch, sib, flag, i * L + e + SS * LL, ok, ok, i * L + i + CR * LL, 1, (i + 1) * L + e + CL * LL,
                   L, i, 0, w, i, False, False, DTYPE, BI, BK)
        tl.debug_barrier()
        for i0 in range(0, n + 1 - w, BI):
            i = i0 + ri
            e = i + w
            ok = i <= n - w
            sib_ok = ok
            if not MULTIROOT:
                sib_ok = ok & (i > 0)
            # I→(i, e): the arc i → e; then its nearest inner dependent (C←(i+1, e)), or the first
            # best inner sibling r (I→(i, r) ⊗ S(r, e) ⊗ sib[i, r, e]) if that beats it strictly
            used = _route(ch, sib, flag, i * L + e + IR * LL, ok, sib_ok, i * L + i + 1 + IR * LL, 1,
                          (i + 1) * L + e + SS * LL, L, i * LL + (i + 1) * L + e, L, w - 1,
                          (i + 1) * L + e + CL * LL, True, True, DTYPE, BI, BK)
            tl.store(arcs + i * L + e, one, mask=used)
            # I←(i, e): the arc e → i; then C→(i, e-1), or the first best I←(r, e) ⊗ S(i, r) ⊗ sib[e, r, i]
            used = _route(ch, sib, flag, i * L + e + IL * LL, ok, ok, (i + 1) * L + e + IL * LL, L,
                          i * L + i + 1 + SS * LL, 1, e * LL + (i + 1) * L + i, L, w - 1,
                          i * L + e - 1 + CR * LL, True, True, DTYPE, BI, BK)
            tl.store(arcs + e * L + i, one, mask=used)
        tl.debug_barrier()


def _prepare(scores, siblings, lengths):
    scores = scores.detach().contiguous()
    return (scores, siblings.detach().to(scores.dtype).contiguous(),
            lengths.to(device=scores.device, dtype=torch.int32).contiguous())


def _launch_inside(scores, siblings, lengths, multiroot, viterbi=False, direction=None):
    B, L, _ = scores.shape
    block = tile(L)
    charts = torch.empty(B, 5, L, L, dtype=scores.dtype, device=scores.device)
    log_z = torch.empty(B, dtype=scores.dtype, device=scores.device)
    dual = direction is not None
    g, g_sib = direction if direction is not None else (scores, siblings)
    d_charts = torch.empty_like(charts) if dual else charts
    d_log_z = torch.empty_like(log_z) if dual else log_z
    _inside[(B,)](scores, siblings, g, g_sib, lengths, charts, d_charts, log_z, d_log_z, L, MULTIROOT=multiroot,
                  VITERBI=viterbi, DUAL=dual, DTYPE=tl_dtype(scores), BI=block, BK=block)
    return log_z, charts, d_log_z, d_charts


def log_partition(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
                  multiroot: bool) -> torch.Tensor:
    """``[B]`` ``log Z`` of checked scores ``[B, L, L]`` and siblings ``[B, L, L, L]`` (one launch)."""
    scores, siblings, lengths = _prepare(scores, siblings, lengths)
    return _launch_inside(scores, siblings, lengths, multiroot)[0]


def marginals(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
              direction: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    """``(log Z [B], μ [B, L, L], μ_sib [B, L, L, L])`` (two launches and the zeroed outputs), and
    with ``direction`` (tensors like ``scores`` and ``siblings``) also the marginals' derivatives
    in that direction, ``H·direction`` (the Hessian of ``log Z`` is symmetric: the vector-Jacobian
    product of the marginals)."""
    scores, siblings, lengths = _prepare(scores, siblings, lengths)
    B, L, _ = scores.shape
    dual = direction is not None
    if direction is not None:
        direction = tuple(d.detach().to(scores.dtype).contiguous() for d in direction)  # type: ignore[assignment]
    log_z, charts, d_log_z, d_charts = _launch_inside(scores, siblings, lengths, multiroot, direction=direction)
    g, g_sib = direction if direction is not None else (scores, siblings)
    outside = torch.empty_like(charts)
    mu, mu_sib = torch.zeros_like(scores), torch.zeros_like(siblings)
    d_outside = torch.empty_like(outside) if dual else outside
    d_mu, d_mu_sib = (torch.zeros_like(scores), torch.zeros_like(siblings)) if dual else (mu, mu_sib)
    block = tile(L)
    _outside[(B,)](scores, siblings, g, g_sib, lengths, charts, d_charts, outside, d_outside, log_z, d_log_z,
                   mu, d_mu, mu_sib, d_mu_sib, L, MULTIROOT=multiroot, DUAL=dual, DTYPE=tl_dtype(scores),
                   BI=block, BK=block)
    return (log_z, mu, mu_sib, d_mu, d_mu_sib) if dual else (log_z, mu, mu_sib)


def best(scores: torch.Tensor, siblings: torch.Tensor, lengths: torch.Tensor,
         multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(best score [B], arcs [B, L, L] as 0/1)``: the max-semiring inside pass and the backtrack."""
    scores, siblings, lengths = _prepare(scores, siblings, lengths)
    B, L, _ = scores.shape
    top, charts, _, _ = _launch_inside(scores, siblings, lengths, multiroot, viterbi=True)
    flags = torch.zeros_like(charts)
    arcs = torch.zeros_like(scores)
    block = tile(L)
    _backtrack[(B,)](siblings, lengths, charts, flags, arcs, L, MULTIROOT=multiroot, DTYPE=tl_dtype(scores),
                     BI=block, BK=block)
    return top, arcs


class LogPartition2o(torch.autograd.Function):
    """``log Z`` whose backward is the arc and sibling marginals of the outside kernel (computed
    with the inside pass when a gradient may be asked for)."""

    @staticmethod
    def forward(ctx, scores, siblings, lengths, multiroot):
        ctx.multiroot = multiroot
        if not any(ctx.needs_input_grad[:2]):
            return log_partition(scores, siblings, lengths, multiroot)
        log_z, mu, mu_sib = marginals(scores, siblings, lengths, multiroot)
        ctx.save_for_backward(scores, siblings, lengths, mu, mu_sib)
        return log_z

    @staticmethod
    def backward(ctx, g):
        scores, siblings, lengths, mu, mu_sib = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu, mu_sib = Marginals2o.apply(scores, siblings, lengths, ctx.multiroot)
        return mu * g[:, None, None], mu_sib * g[:, None, None, None], None, None


class Marginals2o(torch.autograd.Function):
    """Arc and sibling marginals; backward ``H (g, g_sib)`` by the inside and outside kernels on
    dual numbers (a third derivative falls back to autograd of the PyTorch path)."""

    @staticmethod
    def forward(ctx, scores, siblings, lengths, multiroot):
        ctx.multiroot = multiroot
        ctx.save_for_backward(scores, siblings, lengths)
        return marginals(scores, siblings, lengths, multiroot)[1:]

    @staticmethod
    def backward(ctx, g, g_sib):
        scores, siblings, lengths = ctx.saved_tensors
        if torch.is_grad_enabled():  # a third derivative: autograd's double backward of eisner2o_inside
            from ..dependency.eisner2o_inside import marginals_vjp_by_autograd

            return (*marginals_vjp_by_autograd(scores, siblings, lengths, ctx.multiroot, g, g_sib), None, None)
        _, _, _, h, h_sib = marginals(scores, siblings, lengths, ctx.multiroot, direction=(g, g_sib))
        return h, h_sib, None, None


# Variants compiled for a GPU by the tests (no GPU needed: Triton compiles to a cubin on any
# machine): each kernel in its most demanding settings. ``(kernel, argument types, constexprs)``.
COMPILE_CHECKS = [
    (kernel, signature(kernel, LEN="*i32", L="i32"),
     {"DTYPE": tl.float32, "BI": 32, "BK": 32, **extra})
    for kernel, extra in [(_outside, {"MULTIROOT": False, "DUAL": True}), (_backtrack, {"MULTIROOT": False})]
]
