"""The alignment rows of ``bench_structs.py --only alignment``: synattn's ``AlignmentCRF`` against
torch-struct's, whose scan multiplies banded matrices with genbmm, once as installed and once with
that product vectorised in PyTorch (what a CPU user of torch-struct could write).
"""

from __future__ import annotations

import contextlib
import importlib.util
import time

import torch

import structs_common as common
from structs_common import max_diff, median_ms, row

PEER_ONCE_S, PEER_SKIP_S = 5.0, 30.0
"""A peer call slower than ``PEER_ONCE_S`` seconds is timed once, not repeated; after a log Z
slower than ``PEER_SKIP_S`` its marginals and larger sizes are not run (genbmm's CPU loops)."""


def _banded_log_product(self, other):
    """genbmm's ``BandedMatrix.multiply_log`` vectorised in PyTorch (its CPU path,
    ``multiply_log_simple``, loops in Python over rows, result offsets and inner offsets):
    ``out[x, i, j] = logsumexp_k self[x, i, k] + other[x, o, k2]`` with ``o = i + j - lu``,
    ``k2 = k - j + other.width - 1``, over the in-range ``k``; ``[X, n, w]`` band data.
    Entries with no in-range ``k`` get the fill (genbmm gives ``-inf`` or the fill there)."""
    import genbmm
    X, n, _ = self.data.shape
    lu, ld = self.lu + other.ld, self.ld + other.lu
    i = torch.arange(n, device=self.data.device).view(n, 1, 1)
    j = torch.arange(lu + ld + 1, device=self.data.device).view(1, -1, 1)
    k = torch.arange(self.width, device=self.data.device).view(1, 1, -1)
    o, pos, k2 = i + j - lu, i + k - self.lu, k - j + other.width - 1
    ok = (o >= 0) & (o < n) & (pos >= 0) & (pos < n) & (k2 >= 0) & (k2 < other.width)
    index = (o.clamp(0, n - 1) * other.width + k2.clamp(0, other.width - 1)).expand(ok.shape)
    terms = self.data.unsqueeze(2) + other.data.flatten(1)[:, index.flatten()].view(X, *ok.shape)
    out = torch.where(ok, terms, terms.new_full((), -1e10)).logsumexp(-1)
    out = torch.where(ok.any(-1), out, out.new_full((), self.fill))
    return genbmm.BandedMatrix(out, lu, ld, self.fill)


@contextlib.contextmanager
def _band_product(product):
    """genbmm's ``BandedMatrix.multiply_log`` replaced by ``product`` inside (None: unchanged)."""
    if product is None:
        yield
        return
    import genbmm
    saved = genbmm.BandedMatrix.multiply_log
    genbmm.BandedMatrix.multiply_log = product
    try:
        yield
    finally:
        genbmm.BandedMatrix.multiply_log = saved


def _alignment_peer(s: torch.Tensor, ours: dict[str, torch.Tensor], product):
    """torch-struct's ``AlignmentCRF`` on ``s`` with genbmm's band product ``product`` (None: as
    installed): ``(peer, notes, diffs)``, each keyed by ``"part"``/``"marg"``: the functions to
    time, or the ms of one call each when one took more than ``PEER_ONCE_S`` (no marginals
    after a log Z over ``PEER_SKIP_S``: ``slow``); ``notes`` ``n/a`` where it raises; the max
    differences from ``ours``."""
    import torch_struct

    def peer_part():
        return torch_struct.AlignmentCRF(s.clone().requires_grad_()).partition.detach()

    def peer_marg():
        return torch_struct.AlignmentCRF(s.clone().requires_grad_()).marginals.detach()
    with _band_product(product):
        try:
            start = time.perf_counter()
            value = peer_part()
            took = time.perf_counter() - start
        except Exception as error:  # torch-struct 0.5's Alignment needs genbmm
            print(f"# torch-struct AlignmentCRF: {type(error).__name__}: {error}")
            return {}, {"part": "n/a", "marg": "n/a"}, {}
        diffs = {"part": max_diff(ours["part"], value)}
        if took > PEER_SKIP_S:
            return {"part": 1e3 * took}, {"marg": "slow"}, diffs
        start = time.perf_counter()
        value = peer_marg()
        took_marg = time.perf_counter() - start
        diffs["marg"] = max_diff(ours["marg"], value)
        if took > PEER_ONCE_S or took_marg > PEER_ONCE_S:
            return {"part": 1e3 * took, "marg": 1e3 * took_marg}, {}, diffs
        return {"part": peer_part, "marg": peer_marg}, {}, diffs


def alignment_rows(peers: list[str], reps: int, small: bool) -> None:
    """AlignmentCRF (global) log Z and marginals against torch-struct's ``AlignmentCRF``.

    torch-struct 0.5's scan multiplies banded matrices with genbmm (not on PyPI; ``n/a`` where it
    is not installed), whose CPU path is a Python loop per entry: a call slower than
    ``PEER_ONCE_S`` is timed once; after a log Z slower than ``PEER_SKIP_S``, the marginals and
    the larger sizes are not run (``slow``). On the CPU those loops run at the ``--small`` size
    only: one log Z at ``B=16 N=20 M=24`` took 28 s and 7 GB (the autograd graph of its
    per-entry operations), its marginals far more.
    A second pair of rows (``align vect.``) times torch-struct's scan with that product
    vectorised (:func:`_banded_log_product`), what a CPU user of torch-struct could write."""
    from synattn.structs import AlignmentCRF
    variants = {"alignment": None}
    if "torch-struct" in peers and importlib.util.find_spec("genbmm") is not None:
        variants["align vect."] = _banded_log_product
    slow: set[str] = set()  # the variants too slow at a smaller size
    if "align vect." in variants and common.DEVICE.type == "cpu" and not small:
        slow.add("alignment")  # genbmm's CPU loops
    for batch, n, m in [(8, 10, 12)] if small else [(16, 20, 24), (8, 40, 48)]:
        gen = torch.Generator().manual_seed(19 * 1000 + n)
        s = torch.randn(batch, n, m, 3, generator=gen).to(common.DEVICE)

        def part():
            with torch.no_grad():
                return AlignmentCRF(s).log_partition

        def marg():
            return AlignmentCRF(s).marginals
        ours = {"part": part(), "marg": marg()}
        for label, product in variants.items():
            peer, notes, diffs = {}, {}, {}
            if label in slow:
                notes = {"part": "slow", "marg": "slow"}
            elif "torch-struct" in peers:
                peer, notes, diffs = _alignment_peer(s, ours, product)
                if notes.get("marg") == "slow":
                    slow.add(label)
            for which, ours_fn in (("part", part), ("marg", marg)):
                fns = {"synattn": ours_fn}
                if callable(peer.get(which)):
                    fns["torch-struct"] = peer[which]
                with _band_product(product):
                    times = median_ms(fns, reps)
                if which in notes:
                    times["torch-struct"] = notes[which]
                elif isinstance(peer.get(which), float):
                    times["torch-struct"] = peer[which]
                name = "log Z" if which == "part" else "marg"
                row(f"{label} {name} B={batch} N={n} M={m}", times.pop("synattn"), times,
                    {"torch-struct": diffs[which]} if which in diffs else {})
