"""Compiled exact k-best CKY (numba): the ``k`` best (labelled) binary bracketings in one pass.

A bracketing of ``n`` words with one label per span is one derivation of the CKY recursion (the
split of each span and the label of each span determine it, and it determines them), so the ``k``
best derivations are the ``k`` best trees, and the k-best semiring computes them bottom-up
(Huang and Chiang 2005, "Better k-best parsing", algorithm 2):

- a one-word span keeps its allowed labels, best first (at most ``k``);
- a wider span ``(i, j)`` merges, over its splits ``i <= q < j``, the sums ``L_q[a] + R_q[r]`` of
  the sorted lists of ``(i, q)`` and ``(q+1, j)`` with a heap: it starts at ``(q, 0, 0)`` for
  every split, and each entry popped pushes ``(q, a, r+1)`` and, when ``r = 0``, ``(q, a+1, 0)``
  (so each pair is pushed once, after one that is no worse), until ``k`` are popped; the best
  ``k`` labels of the span are then merged with these the same way (with one label the label's
  score is added to each);
- the ``k`` best trees of a sentence are read back from the whole sentence's list (each entry
  holds its label, split and the ranks in the two halves' lists).

A span's list holds at most ``min(k, C_w · L^(2w+1))`` entries (``C_w`` the Catalan number: the
trees of ``w + 1`` words), the memory of a pass ``O(n² k)`` per sentence. Forbidden spans and
labels (scores ``<= NEG``) have no entries, so trees through them never appear. A tree's score is
added up in float64 in the order of the CKY Viterbi kernels (``s(i, j) + (left + right)``), so it
equals bit for bit the best score the masked argmax of Lawler's scheme gives the same tree.

Ties: entries are ordered by score, then split, then the left rank, then the right rank (then the
label's rank and the rank in the splits' list, for labels), so the first tree is the one the
Viterbi argmax returns (first best split and label).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ...limits import check_memory
from ..arguments import kbest_count
from ..backend import as_array, set_threads
from ..constants import NEG, SERIAL_WORK

_jit = numba.njit(cache=True, fastmath=False)


@_jit
def _first(hv, hq, ha, hr, x, y):
    """Whether heap entry ``x`` comes before entry ``y``: higher score, then lower split and ranks."""
    if hv[x] != hv[y]:
        return hv[x] > hv[y]
    if hq[x] != hq[y]:
        return hq[x] < hq[y]
    if ha[x] != ha[y]:
        return ha[x] < ha[y]
    return hr[x] < hr[y]


@_jit
def _swap(hv, hq, ha, hr, x, y):
    hv[x], hv[y] = hv[y], hv[x]
    hq[x], hq[y] = hq[y], hq[x]
    ha[x], ha[y] = ha[y], ha[x]
    hr[x], hr[y] = hr[y], hr[x]


@_jit
def _push(hv, hq, ha, hr, size, v, q, a, r):
    """Add ``(v, q, a, r)`` to the heap of ``size`` entries; returns the new size."""
    x = size
    hv[x], hq[x], ha[x], hr[x] = v, q, a, r
    while x > 0:
        parent = (x - 1) // 2
        if not _first(hv, hq, ha, hr, x, parent):
            break
        _swap(hv, hq, ha, hr, x, parent)
        x = parent
    return size + 1


@_jit
def _drop_top(hv, hq, ha, hr, size):
    """Remove the first entry of the heap of ``size`` entries; returns the new size."""
    size -= 1
    _swap(hv, hq, ha, hr, 0, size)
    x = 0
    while True:
        best, left = x, 2 * x + 1
        if left < size and _first(hv, hq, ha, hr, left, best):
            best = left
        if left + 1 < size and _first(hv, hq, ha, hr, left + 1, best):
            best = left + 1
        if best == x:
            return size
        _swap(hv, hq, ha, hr, x, best)
        x = best


@_jit
def _merge(lv, loff, lcnt, rv, roff, rcnt, sources, k, hv, hq, ha, hr, ov, oq, oa, orr, base):
    """The ``k`` best sums ``lv[loff[q] + a] + rv[roff[q] + r]`` (``a < lcnt[q]``, ``r < rcnt[q]``,
    ``q < sources``) of lists sorted best first, best first, written to ``ov/oq/oa/orr[base:]``
    (ties: lower ``q``, then ``a``, then ``r`` first). Returns how many were written."""
    size = 0
    for q in range(sources):
        if lcnt[q] > 0 and rcnt[q] > 0:
            size = _push(hv, hq, ha, hr, size, lv[loff[q]] + rv[roff[q]], q, 0, 0)
    found = 0
    while size > 0 and found < k:
        v, q, a, r = hv[0], hq[0], ha[0], hr[0]
        ov[base + found], oq[base + found], oa[base + found], orr[base + found] = v, q, a, r
        found += 1
        size = _drop_top(hv, hq, ha, hr, size)
        if r + 1 < rcnt[q]:
            size = _push(hv, hq, ha, hr, size, lv[loff[q] + a] + rv[roff[q] + r + 1], q, a, r + 1)
        if r == 0 and a + 1 < lcnt[q]:
            size = _push(hv, hq, ha, hr, size, lv[loff[q] + a + 1] + rv[roff[q]], q, a + 1, 0)
    return found


@_jit
def _sorted_labels(s, i, j, cap, vals, ids):
    """The allowed labels of span ``(i, j)``, best first (ties: lower label first), at most ``cap``:
    their scores in ``vals``, labels in ``ids``; returns how many."""
    L = s.shape[2]
    if L == 1:
        if s[i, j, 0] > NEG:
            vals[0], ids[0] = s[i, j, 0], 0
            return 1
        return 0
    order = np.argsort(-s[i, j], kind="mergesort")  # (stable: equal scores keep label order)
    m = 0
    for t in range(min(cap, L)):
        label = order[t]
        if s[i, j, label] <= NEG:
            break
        vals[m], ids[m] = s[i, j, label], label
        m += 1
    return m


@_jit
def _sentence(s, n, caps, scores, charts):
    """The k-best lists of one sentence ``s [N, N, L]`` of ``n`` words; writes its trees' scores
    ``scores [K]`` and charts ``[K, N, N, L]``, returns how many trees there are (at most K)."""
    L = s.shape[2]
    off = np.zeros(n + 1, np.int64)
    for w in range(n):
        off[w + 1] = off[w] + (n - w) * caps[w]
    top = caps[:n].max()
    val, spl = np.empty(off[n]), np.empty(off[n], np.int64)
    lab, ra, rb = np.empty(off[n], np.int64), np.empty(off[n], np.int64), np.empty(off[n], np.int64)
    cnt = np.zeros((n, n), np.int64)  # [w, i]: entries of span (i, i+w)
    hv = np.empty(n + top + 1)
    hq, ha, hr = np.empty(n + top + 1, np.int64), np.empty(n + top + 1, np.int64), np.empty(n + top + 1, np.int64)
    loff, lcnt = np.empty(n, np.int64), np.empty(n, np.int64)
    roff, rcnt = np.empty(n, np.int64), np.empty(n, np.int64)
    lvals, lids = np.empty(min(L, top)), np.empty(min(L, top), np.int64)
    tv, tq, ta, tr = np.empty(top), np.empty(top, np.int64), np.empty(top, np.int64), np.empty(top, np.int64)
    zero, mm, cc = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
    for w in range(n):
        cap = caps[w]
        for i in range(n - w):
            base = off[w] + i * cap
            m = _sorted_labels(s, i, i + w, cap, lvals, lids)
            if m == 0:
                continue
            if w == 0:
                for t in range(m):
                    val[base + t], lab[base + t], spl[base + t] = lvals[t], lids[t], -1
                cnt[0, i] = m
                continue
            for q in range(w):
                loff[q], lcnt[q] = off[q] + i * caps[q], cnt[q, i]
                right = w - 1 - q
                roff[q], rcnt[q] = off[right] + (i + q + 1) * caps[right], cnt[right, i + q + 1]
            if L == 1:
                c = _merge(val, loff, lcnt, val, roff, rcnt, w, cap, hv, hq, ha, hr,
                           val, spl, ra, rb, base)
                for t in range(c):
                    val[base + t] = lvals[0] + val[base + t]
                    lab[base + t] = 0
            else:
                inner = _merge(val, loff, lcnt, val, roff, rcnt, w, cap, hv, hq, ha, hr,
                               tv, tq, ta, tr, 0)
                mm[0], cc[0] = m, inner
                c = _merge(lvals, zero, mm, tv, zero, cc, 1, cap, hv, hq, ha, hr,
                           val, lab, ra, rb, base)  # (lab: the label's rank, ra/rb: scratch)
                for t in range(c):
                    e = rb[base + t]
                    lab[base + t] = lids[ra[base + t]]
                    spl[base + t], ra[base + t], rb[base + t] = tq[e], ta[e], tr[e]
            cnt[w, i] = c
    found = cnt[n - 1, 0]
    stack = np.empty((2 * n + 2, 3), np.int64)
    for t in range(found):
        scores[t] = val[off[n - 1] + t]
        depth = 1
        stack[0, 0], stack[0, 1], stack[0, 2] = n - 1, 0, t
        while depth > 0:
            depth -= 1
            w, i, rank = stack[depth, 0], stack[depth, 1], stack[depth, 2]
            p = off[w] + i * caps[w] + rank
            charts[t, i, i + w, lab[p]] = 1
            if w > 0:
                q = spl[p]
                stack[depth, 0], stack[depth, 1], stack[depth, 2] = q, i, ra[p]
                stack[depth + 1, 0], stack[depth + 1, 1], stack[depth + 1, 2] = w - 1 - q, i + q + 1, rb[p]
                depth += 2
    return found


@numba.njit(cache=True, parallel=True, fastmath=False)
def _batch(s, lengths, caps, scores, charts, counts):
    for b in numba.prange(s.shape[0]):
        counts[b] = _sentence(s[b], lengths[b], caps, scores[b], charts[b])


def list_sizes(N: int, labels: int, k: int) -> list[int]:
    """``[N]`` the most entries a span of width ``w`` (``w + 1`` words) can need:
    ``min(k, C_w · labels^(2w+1))``, ``C_w`` the Catalan number (its binary bracketings)."""
    caps, catalan = [], [1]  # (Catalan numbers saturated at k: past it only "k" matters)
    for w in range(N):
        if w:
            catalan.append(min(k, sum(catalan[q] * catalan[w - 1 - q] for q in range(w))))
        caps.append(min(k, catalan[w] * labels ** min(2 * w + 1, 64)))
    return caps


def kbest(scores: torch.Tensor, lengths: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best labelled bracketings of checked CPU scores ``[B, N, N, L]`` (forbidden
    entries ``<= NEG``; one label for the unlabelled CRF), best first.

    Returns:
        ``scores [B, K]`` (float64 holding the scores' dtype's values, as Lawler's scheme gives
        them; ``-inf`` where fewer than ``K`` exist) and 0/1 charts ``[B, K, N, N, L]`` in the
        scores' dtype, all 0 for the missing ones. ``K = k`` unless every sentence has fewer
        trees: then the most any has.

    Raises:
        ValueError: ``k`` is not a whole number >= 1, or the lists or results would not fit in
            memory.
    """
    batch, N, _, L = scores.shape
    k = kbest_count(k, batch, N * N * L * scores.element_size())
    caps = list_sizes(N, L, k)
    longest = int(lengths.max()) if batch else 1
    pool = sum((longest - w) * caps[w] for w in range(longest))
    threads = set_threads(int((lengths.double() ** 3).sum()) * min(k, 64), SERIAL_WORK)
    check_memory("kbest: k", k, 40 * pool * min(threads, max(batch, 1)),
                 "the k-best lists of the CKY spans")
    width = max((caps[n - 1] for n in lengths.tolist()), default=0)
    best = np.full((batch, width), -np.inf)
    charts = torch.zeros(batch, width, N, N, L, dtype=scores.dtype)
    counts = np.zeros(batch, np.int64)
    if batch:
        _batch(as_array(scores.double()), as_array(lengths.long()), np.array(caps, np.int64),
               best, charts.numpy(), counts)
    found = int(counts.max(initial=0))
    width = k if found == k else found
    out = torch.from_numpy(best[:, :width]).to(scores.dtype).double()
    return out, charts[:, :width].contiguous()
