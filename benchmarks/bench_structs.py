"""Benchmark ``synattn.structs`` against torch-struct 0.5 and supar 1.1.4 on the same inputs.

Cases: Eisner and Matrix-Tree (dependency CRFs), CKY (constituency: ``TreeCRF`` against
torch-struct's ``TreeCRF`` with one label and supar's ``ConstituencyCRF``), the linear chain and
the semi-Markov CRF (torch-struct only; ``--only semimarkov``), labelled arcs ``[B, N+1, N+1,
R]`` (torch-struct only; ``--only labelled``), ``AlignmentCRF`` (``--only alignment``), ``SentCFG``
(``--only cfg``), ``Autoregressive`` greedy and beam search (``--only autoregressive``),
the second-order ``Dependency2oCRF`` and ``DependencyMFVI``/``DependencyLBP`` against supar
(``--only secondorder``), supar's other approximate inference: ``ConstituencyMFVI``/``LBP`` and
``SemanticDependencyMFVI``/``LBP`` (``--only vi``).
For every case the same random scores go to all three libraries (converted to each one's layout
by ``synattn.structs.convert``); the script checks that the values agree, then prints median
milliseconds and the speed-up of synattn over the faster of the two others. synattn runs twice:
with its default backend (compiled kernels on CPU when numba is installed) and with its
pure-PyTorch backend (column ``torch path``, the code that also runs on CUDA); the speed-up is
that of the default backend. The dependency CRFs also time the marginals with the backward of
a random direction through them (``marginals+backward``: what structured attention trains
through). It ends with the peak memory of Eisner marginals at ``(B, N) = (4, 160)``, each
library measured in a fresh process on the CPU and by the allocator's peak on CUDA (not with
``--only cky``).

``--device cuda`` puts every input on the GPU (the libraries run there; synattn's default backend
is then its pure-PyTorch path) and synchronises the device before starting and before stopping
each timing; ``--small`` takes smaller sizes (a quick check, e.g. ``benchmarks/gpu_check.sh``).

The peer libraries are installed only for this script (never for the package or its tests)::

    pip install --no-deps torch-struct==0.5 supar==1.1.4 nltk dill

torch-struct's ``AlignmentCRF`` also needs genbmm, which is not on PyPI (installed from its
source for the ``alignment`` case; see docs/structs.md, "Alignments").

Run (``--quick`` takes fewer repetitions)::

    python benchmarks/bench_structs.py [--threads 2] [--quick] [--small]
        [--only cky|decoding|semimarkov|labelled|alignment|cfg|autoregressive|secondorder|vi]
        [--device cpu|cuda]

The last rows time ``32`` exact samples and the ``8`` best structures (Eisner, Matrix-Tree,
CKY) against the peers' ``sample``/``topk`` where they have them (``n/a`` where they raise).

Notes: torch-struct's Matrix-Tree adds ``eps = 1e-5`` to every arc weight, so its values differ
from the exact ones by up to ~1e-2; under torch 2.13 its ``DependencyCRF.partition`` needs inputs
with ``requires_grad``. Batched LAPACK LU/inverse can fail or hang on ``[4, 160, 160]`` with two
threads on some CPU builds, so the peers' Matrix-Tree at ``N >= 150`` runs in a child process with
a time limit and is reported as ``fail``/``hang`` when it does.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import multiprocessing as mp
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable

import torch

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF, SemiMarkovCRF, TreeCRF, convert
from synattn.structs.backend import use_backend
from synattn.structs.cky.dp import span_mask
from synattn.structs.dependency.arc_scores import usable_arcs

from device import add_device_argument, check_device, device_info, seconds, synchronize
from machine import cpu_name

EISNER_SIZES = [(32, 20), (32, 40), (16, 80), (4, 160)]
CKY_SIZES = [(32, 20), (16, 40), (4, 80)]
CHAIN_SIZES = [(32, C, N) for C in (2, 16) for N in (50, 200)]
SEMI_MARKOV_SIZES = [(16, 4, 4, 50), (16, 8, 8, 100)]
"""``(B, K, C, N)`` of the semi-Markov rows."""
SMALL = {"eisner": [(8, 20), (4, 40)], "cky": [(8, 20)], "chain": [(8, 2, 50)],
         "semi_markov": [(8, 4, 4, 30)]}
"""``--small``: sizes of a quick check."""
GUARD_N = 150  # peers' Matrix-Tree from this length on runs in a child process (CPU only)
GUARD_SECONDS = 60
DEVICE = torch.device("cpu")
"""Where the inputs live and the timed work runs (``--device``)."""
# (torch-struct's distributions do not declare arg_constraints: one warning per instance)
warnings.filterwarnings("ignore", message=".*does not define `arg_constraints`")


# ---------------------------------------------------------------------------------------------
# Timing helpers.
# ---------------------------------------------------------------------------------------------

def median_ms(fns: dict[str, Callable[[], object]], reps: int,
              budget_s: float = 30.0) -> dict[str, float]:
    """Median milliseconds per function; the functions take turns, two calls at a time.

    Taking turns spreads the machine's load changes over all libraries alike (so the ratios of
    one run stay comparable when absolute numbers are noisy); two consecutive calls let each
    library run with warm caches, as inside a training loop.
    """
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in fns}
    start = time.perf_counter()
    while min(map(len, times.values())) < reps:
        if min(map(len, times.values())) >= 2 and time.perf_counter() - start > budget_s:
            break
        for name, fn in fns.items():
            for _ in range(2):
                times[name].append(seconds(fn, DEVICE))  # (CUDA: synchronised)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def max_diff(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return float("nan")
    return (a.double() - b.double()).abs().max().item()


# ---------------------------------------------------------------------------------------------
# The libraries on the same inputs (layouts: synattn.structs.convert).
# ---------------------------------------------------------------------------------------------

def on_torch_path(fns):
    """The same functions run with synattn's pure-PyTorch backend."""
    def wrap(fn):
        def run():
            with use_backend("torch"):
                return fn()
        return run
    return tuple(wrap(fn) for fn in fns)


def direction(scores: torch.Tensor) -> torch.Tensor:
    """A fixed random direction ``[B, N+1, N+1]`` for the backward of the marginals."""
    gen = torch.Generator().manual_seed(1)
    return torch.randn(scores.shape, generator=gen).to(scores.device)


def tree_fns(lib: str, kind: str, scores: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, marginals_fn, marginals_backward_fn)`` of one library; each returns
    ours-layout tensors (the last: the gradient of ``<marginals, direction(scores)>``)."""
    if lib == "torch path":
        return on_torch_path(tree_fns("synattn", kind, scores, lengths))
    g = direction(scores)
    if lib == "synattn":
        cls = DependencyCRF if kind == "eisner" else NonProjectiveDependencyCRF

        def part():
            with torch.no_grad():
                return cls(scores, lengths, multiroot=True).log_partition

        def marg():
            with torch.no_grad():
                return cls(scores, lengths, multiroot=True).marginals

        def grad():
            x = scores.clone().requires_grad_()
            cls(x, lengths, multiroot=True).marginals.backward(g)
            return x.grad
        return part, marg, grad
    if lib == "torch-struct":
        import torch_struct
        cls = torch_struct.DependencyCRF if kind == "eisner" else torch_struct.NonProjectiveDependencyCRF
        ts_scores, ts_g = convert.arcs_to_torch_struct(scores), convert.arcs_to_torch_struct(g)

        def part():
            x = ts_scores.clone().requires_grad_()
            return cls(x, lengths=lengths, multiroot=True).partition.detach()

        def marg():
            x = ts_scores.clone().requires_grad_()
            marginals = cls(x, lengths=lengths, multiroot=True).marginals.detach()
            return convert.arcs_from_torch_struct(marginals)

        def grad():
            x = ts_scores.clone().requires_grad_()
            cls(x, lengths=lengths, multiroot=True).marginals.backward(ts_g)
            return convert.arcs_from_torch_struct(x.grad)
        return part, marg, grad
    from supar.structs import DependencyCRF as SuparDep, MatrixTree
    cls = SuparDep if kind == "eisner" else MatrixTree
    dep_head, sp_g = convert.arcs_to_supar(scores), convert.arcs_to_supar(g)  # supar: [b, dependent, head]

    def part():
        return cls(dep_head.clone(), lengths, multiroot=True).log_partition.detach()

    def marg():
        marginals = cls(dep_head.clone(), lengths, multiroot=True).marginals.detach()
        return convert.arcs_from_supar(marginals)

    def grad():
        x = dep_head.clone().requires_grad_()
        cls(x, lengths, multiroot=True).marginals.backward(sp_g)
        return convert.arcs_from_supar(x.grad)
    return part, marg, grad


def span_fns(lib: str, scores: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, marginals_fn)`` of the constituency CRFs (CKY), ours-layout results."""
    if lib == "torch path":
        return on_torch_path(span_fns("synattn", scores, lengths))
    if lib == "synattn":
        def part():
            with torch.no_grad():
                return TreeCRF(scores, lengths).log_partition

        def marg():
            with torch.no_grad():
                return TreeCRF(scores, lengths).marginals
        return part, marg
    if lib == "torch-struct":
        import torch_struct
        ts_scores = convert.spans_to_torch_struct(scores)  # [B, N, N, 1]

        def part():
            x = ts_scores.clone().requires_grad_()
            return torch_struct.TreeCRF(x, lengths=lengths).partition.detach()

        def marg():
            x = ts_scores.clone().requires_grad_()
            mu = torch_struct.TreeCRF(x, lengths=lengths).marginals.detach()
            return convert.span_marginals_from_torch_struct(mu)
        return part, marg
    from supar.structs import ConstituencyCRF
    fenceposts = convert.spans_to_supar(scores)  # [B, N+1, N+1]

    def part():
        return ConstituencyCRF(fenceposts.clone().requires_grad_(), lengths).log_partition.detach()

    def marg():
        x = fenceposts.clone().requires_grad_()
        return convert.spans_from_supar(ConstituencyCRF(x, lengths).marginals.detach())
    return part, marg


def chain_fns(lib: str, unary: torch.Tensor, trans: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, node_marginals_fn)``; the chain scores unary[i, y_i] + trans[y_i, y_{i+1}]."""
    if lib == "torch path":
        return on_torch_path(chain_fns("synattn", unary, trans, lengths))
    if lib == "synattn":
        def part():
            with torch.no_grad():
                return LinearChainCRF(unary=unary, transition=trans, lengths=lengths).log_partition

        def marg():
            with torch.no_grad():
                return LinearChainCRF(unary=unary, transition=trans, lengths=lengths).marginals
        return part, marg
    if lib == "torch-struct":
        import torch_struct
        edge = trans + unary[:, 1:, None, :]  # [B, N-1, C(prev), C(next)]
        edge[:, 0] += unary[:, 0, :, None]
        edge = edge.transpose(-1, -2).contiguous()  # torch-struct: phi(n, z_{n+1}, z_n)

        def part():
            x = edge.clone().requires_grad_()
            return torch_struct.LinearChainCRF(x, lengths=lengths).partition.detach()

        def marg():  # edge marginals, summed to node marginals
            x = edge.clone().requires_grad_()
            m = torch_struct.LinearChainCRF(x, lengths=lengths).marginals.detach()  # [B, N-1, next, prev]
            first = m[:, :1].sum(-2)
            return torch.cat((first, m.sum(-1)), 1)
        return part, marg
    from supar.structs import LinearChainCRF as SuparChain
    C = unary.shape[-1]
    full = unary.new_zeros(C + 1, C + 1)  # supar adds start/end transitions: zero here
    full[:C, :C] = trans

    def part():
        return SuparChain(unary.clone(), full, lengths).log_partition.detach()

    def marg():
        return SuparChain(unary.clone(), full, lengths).marginals.detach()
    return part, marg


def semi_markov_fns(lib: str, edge: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, marginals_fn)`` of the semi-Markov CRF (torch-struct only: supar has none)."""
    if lib == "torch path":
        return on_torch_path(semi_markov_fns("synattn", edge, lengths))
    if lib == "synattn":
        def part():
            with torch.no_grad():
                return SemiMarkovCRF(edge, lengths).log_partition

        def marg():
            with torch.no_grad():
                return SemiMarkovCRF(edge, lengths).marginals
        return part, marg
    if lib == "torch-struct":
        import torch_struct
        theirs = convert.semi_markov_to_torch_struct(edge)

        def part():
            x = theirs.clone().requires_grad_()
            return torch_struct.SemiMarkovCRF(x, lengths=lengths).partition.detach()

        def marg():
            x = theirs.clone().requires_grad_()
            mu = torch_struct.SemiMarkovCRF(x, lengths=lengths).marginals.detach()
            return convert.semi_markov_from_torch_struct(mu)
        return part, marg
    raise NotImplementedError("supar has no semi-Markov CRF")


def semi_markov_rows(peers: list[str], sizes, reps: int) -> None:
    """Rows for :class:`SemiMarkovCRF` at ``(B, K, C, N)``, every sequence of length ``N``
    (torch-struct 0.5's log Z is wrong for the longer sequences of a ragged batch)."""
    for batch, K, C, n in sizes:
        gen = torch.Generator().manual_seed(13 * 1000 + n)
        edge = torch.randn(batch, n - 1, K, C, C, generator=gen).to(DEVICE)
        lengths = torch.full((batch,), n, device=DEVICE)
        libs = ["synattn", "torch path", *(p for p in peers if p == "torch-struct")]
        fns = {lib: semi_markov_fns(lib, edge, lengths) for lib in libs}
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {"part": {}, "marg": {}}, {"part": {}, "marg": {}}
        for lib in libs[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        ours = (times["part"].pop("synattn"), times["marg"].pop("synattn"))
        row(f"semi-Markov log Z B={batch} K={K} C={C} N={n}", ours[0], times["part"], diffs["part"])
        row(f"semi-Markov marg B={batch} K={K} C={C} N={n}", ours[1], times["marg"], diffs["marg"])


def labelled_rows(peers: list[str], reps: int, small: bool) -> None:
    """Labelled projective arcs ``[B, N+1, N+1, R]`` (log Z, labelled marginals) against
    torch-struct's ``DependencyCRF`` on ``[B, N, N, R]`` (equal lengths)."""
    for batch, n, R in [(8, 20, 8)] if small else [(16, 20, 16), (8, 40, 16)]:
        gen = torch.Generator().manual_seed(17 * 1000 + n)
        scores = torch.randn(batch, n + 1, n + 1, R, generator=gen).to(DEVICE)
        lengths = torch.full((batch,), n, device=DEVICE)
        theirs = convert.arcs_to_torch_struct(scores.permute(3, 0, 1, 2).reshape(-1, n + 1, n + 1))
        theirs = theirs.view(R, batch, n, n).permute(1, 2, 3, 0).contiguous()

        def ours(torch_path=False):
            def part():
                with torch.no_grad():
                    return DependencyCRF(scores, lengths).log_partition

            def marg():
                with torch.no_grad():
                    return DependencyCRF(scores, lengths).marginals
            return on_torch_path((part, marg)) if torch_path else (part, marg)

        def peer():
            import torch_struct

            def part():
                x = theirs.clone().requires_grad_()
                return torch_struct.DependencyCRF(x, lengths).partition.detach()

            def marg():
                x = theirs.clone().requires_grad_()
                mu = torch_struct.DependencyCRF(x, lengths).marginals.detach()  # [B, N, N, R]
                return convert.arcs_from_torch_struct(mu.permute(3, 0, 1, 2).reshape(-1, n, n)
                                                      ).view(R, batch, n + 1, n + 1).permute(1, 2, 3, 0)
            return part, marg
        fns = {"synattn": ours(), "torch path": ours(True)}
        if "torch-struct" in peers:
            fns["torch-struct"] = peer()
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {}, {"part": {}, "marg": {}}
        for lib in list(fns)[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        row(f"labelled Eisner log Z B={batch} N={n} R={R}", times["part"].pop("synattn"),
            times["part"], diffs["part"])
        row(f"labelled Eisner marg B={batch} N={n} R={R}", times["marg"].pop("synattn"),
            times["marg"], diffs["marg"])
    labelled_span_rows(peers, reps, small)


def labelled_span_rows(peers: list[str], reps: int, small: bool) -> None:
    """Labelled spans ``[B, N, N, NT]`` (log Z, labelled marginals, argmax) against torch-struct's
    ``TreeCRF`` on the same scores (ragged lengths; theirs are compared inside the sentences)."""
    for batch, n, NT in [(8, 20, 8)] if small else [(16, 20, 16), (8, 40, 16)]:
        gen = torch.Generator().manual_seed(19 * 1000 + n)
        scores = torch.randn(batch, n, n, NT, generator=gen).to(DEVICE)
        lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen).to(DEVICE)
        lengths[0] = n
        within = span_mask(lengths, n).unsqueeze(-1)

        def ours(torch_path=False):
            def part():
                with torch.no_grad():
                    return TreeCRF(scores, lengths).log_partition

            def marg():
                with torch.no_grad():
                    return TreeCRF(scores, lengths).marginals

            def best():
                return TreeCRF(scores, lengths).argmax
            return on_torch_path((part, marg, best)) if torch_path else (part, marg, best)

        def peer():
            import torch_struct

            def part():
                return torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths).partition.detach()

            def marg():
                mu = torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths).marginals
                return mu.detach() * within

            def best():
                return torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths).argmax.detach() * within
            return part, marg, best
        fns = {"synattn": ours(), "torch path": ours(True)}
        if "torch-struct" in peers:
            fns["torch-struct"] = peer()
        values = {lib: tuple(fn() for fn in fns_) for lib, fns_ in fns.items()}
        for which, index in (("log Z", 0), ("marg", 1), ("argmax", 2)):
            diffs = {lib: max_diff(values["synattn"][index], values[lib][index]) for lib in list(fns)[1:]}
            ms = median_ms({lib: fns_[index] for lib, fns_ in fns.items()}, reps)
            row(f"labelled CKY {which} B={batch} N={n} NT={NT}", ms.pop("synattn"), ms, diffs)


def second_order_rows(peers: list[str], reps: int, small: bool) -> None:
    """:class:`Dependency2oCRF` (log Z, arc marginals) against supar's ``Dependency2oCRF``, and
    :class:`DependencyMFVI` / :class:`DependencyLBP` (3 iterations) against supar's modules, on
    the same arc and sibling scores (equal lengths, multiroot)."""
    from synattn.structs import Dependency2oCRF, DependencyLBP, DependencyMFVI

    for batch, n in [(8, 20)] if small else [(16, 20), (8, 40)]:
        gen = torch.Generator().manual_seed(19 * 1000 + n)
        scores = torch.randn(batch, n + 1, n + 1, generator=gen).to(DEVICE)
        siblings = torch.randn(batch, n + 1, n + 1, n + 1, generator=gen).to(DEVICE)
        lengths = torch.full((batch,), n, device=DEVICE)
        s_arc, s_sib = convert.arcs_to_supar(scores), convert.siblings_to_supar(siblings)

        def ours(torch_path=False):
            def part():
                with torch.no_grad():
                    return Dependency2oCRF(scores, siblings, lengths).log_partition

            def marg():
                with torch.no_grad():
                    return Dependency2oCRF(scores, siblings, lengths).marginals
            return on_torch_path((part, marg)) if torch_path else (part, marg)

        def peer():
            from supar.structs import Dependency2oCRF as Supar2o

            def part():
                with torch.no_grad():
                    return Supar2o((s_arc, s_sib), lengths, multiroot=True).log_partition

            def marg():
                x = s_arc.clone().requires_grad_()
                return convert.arcs_from_supar(Supar2o((x, s_sib), lengths, multiroot=True).marginals.detach())
            return part, marg
        fns = {"synattn": ours(), "torch path": ours(True)}
        if "supar" in peers:
            fns["supar"] = peer()
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {}, {"part": {}, "marg": {}}
        for lib in list(fns)[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        row(f"2nd-order Eisner log Z B={batch} N={n}", times["part"].pop("synattn"), times["part"],
            diffs["part"])
        row(f"2nd-order Eisner marg B={batch} N={n}", times["marg"].pop("synattn"), times["marg"],
            diffs["marg"])
        for cls in (DependencyMFVI, DependencyLBP):
            fns = {"synattn": lambda: cls()((scores, siblings), lengths).detach()}
            if "supar" in peers:
                import supar.structs

                pos = torch.arange(n + 1, device=DEVICE)
                arc = s_arc.masked_fill(pos[:, None] == pos[None, :], -1e32)  # no self-loops
                sib = s_sib.clone()
                root = 0.0 if cls is DependencyMFVI else -1e32  # no factor with ROOT as a sibling
                sib[:, 0], sib[..., 0] = root, root
                mask = (pos >= 1).expand(batch, n + 1)
                module = getattr(supar.structs, cls.__name__)()
                fns["supar"] = lambda: convert.arcs_from_supar(module((arc, sib), mask).detach())
            diff = {lib: max_diff(fns["synattn"]()[:, :, 1:], fn()[:, :, 1:]) for lib, fn in fns.items()
                    if lib != "synattn"}
            times = median_ms(fns, reps)
            row(f"{cls.__name__[10:]} B={batch} N={n}", times.pop("synattn"), times, diff)


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
    if "align vect." in variants and DEVICE.type == "cpu" and not small:
        slow.add("alignment")  # genbmm's CPU loops
    for batch, n, m in [(8, 10, 12)] if small else [(16, 20, 24), (8, 40, 48)]:
        gen = torch.Generator().manual_seed(19 * 1000 + n)
        s = torch.randn(batch, n, m, 3, generator=gen).to(DEVICE)

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


def cfg_rows(peers: list[str], reps: int, small: bool) -> None:
    """SentCFG log Z and marginals against torch-struct's ``SentCFG`` (ragged lengths)."""
    from synattn.structs import SentCFG
    for batch, n, NT, T in [(4, 10, 4, 4)] if small else [(8, 20, 8, 8), (4, 30, 10, 10)]:
        gen = torch.Generator().manual_seed(23 * 1000 + n)
        S = NT + T
        terms = torch.randn(batch, n, T, generator=gen).to(DEVICE)
        rules = torch.randn(batch, NT, S, S, generator=gen).to(DEVICE)
        roots = torch.randn(batch, NT, generator=gen).to(DEVICE)
        lengths = torch.randint(max(2, n // 2), n + 1, (batch,), generator=gen).to(DEVICE)
        lengths[0] = n

        def part():
            with torch.no_grad():
                return SentCFG(terms, rules, roots, lengths).log_partition

        def marg():
            return SentCFG(terms, rules, roots, lengths).marginals[1]
        fns = {"synattn": (part, marg)}
        if "torch-struct" in peers:
            import torch_struct

            def peer_part():
                return torch_struct.SentCFG((terms, rules, roots), lengths).partition.detach()

            def peer_marg():
                return torch_struct.SentCFG((terms, rules, roots), lengths).marginals[1].detach()
            fns["torch-struct"] = (peer_part, peer_marg)
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {}, {"part": {}, "marg": {}}
        for lib in list(fns)[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        row(f"SentCFG log Z B={batch} N={n} NT={NT} T={T}", times["part"].pop("synattn"),
            times["part"], diffs["part"])
        row(f"SentCFG marg B={batch} N={n} NT={NT} T={T}", times["marg"].pop("synattn"),
            times["marg"], diffs["marg"])
        decode = {"synattn": (lambda: SentCFG(terms, rules, roots, lengths).sample(SAMPLES),
                              lambda: SentCFG(terms, rules, roots, lengths).kbest(KBEST))}
        if "torch-struct" in peers:
            decode["torch-struct"] = (
                lambda: torch_struct.SentCFG((terms, rules, roots), lengths).sample((SAMPLES,)),
                lambda: torch_struct.SentCFG((terms, rules, roots), lengths).topk(KBEST))
        for which, index in ((f"{SAMPLES} samples", 0), (f"{KBEST}-best", 1)):
            runnable, others = {}, {}
            for lib, pair in decode.items():
                try:
                    pair[index]()
                    runnable[lib] = pair[index]
                except Exception:  # the peer lacks it (torch-struct's SentCFG.sample raises)
                    others[lib] = "n/a"
            ms = median_ms(runnable, max(2, reps // 2), budget_s=20.0)
            row(f"SentCFG {which} B={batch} N={n}", ms.pop("synattn"), {**ms, **others}, {})


def autoregressive_rows(peers: list[str], reps: int, small: bool) -> None:
    """Greedy decoding and beam search (``K = 8``) of a small GRU through ``Autoregressive``
    against torch-struct's ``greedy_max`` / ``beam_topk`` (the same model calls in both)."""
    from synattn.structs import Autoregressive
    torch.manual_seed(0)
    C, H = 50, 32
    emb, cell, out = torch.nn.Embedding(C, H), torch.nn.GRUCell(H, H), torch.nn.Linear(H, C)

    def model(tokens, state):
        h, logits = state[0], []
        for t in range(tokens.shape[1]):
            h = cell(emb(tokens[:, t]), h)
            logits.append(out(h))
        return torch.stack(logits, 1), (h,)
    for batch, n in [(4, 10)] if small else [(16, 20)]:
        init = (torch.randn(batch, H),)
        ours = Autoregressive(model, init, C, n)
        fns = {"synattn": (lambda: ours.greedy()[0], lambda: ours.beam_search(8)[0])}
        fns["torch path"] = on_torch_path(fns["synattn"])  # the beam step's topk in PyTorch
        if "torch-struct" in peers:
            import torch_struct
            peer = torch_struct.Autoregressive(model, init, C, n)
            fns["torch-struct"] = (lambda: peer.greedy_max()[1].detach(),
                                   lambda: peer._beam_max(8).detach())
        for index, what in ((0, "greedy"), (1, "beam K=8")):
            values = {lib: pair[index]() for lib, pair in fns.items()}
            diffs = {lib: max_diff(values["synattn"].double(), v.double().reshape(values["synattn"].shape))
                     for lib, v in values.items() if lib != "synattn" and index == 0}
            times = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
            row(f"autoregressive {what} B={batch} N={n} C={C}", times.pop("synattn"), times, diffs)


# ---------------------------------------------------------------------------------------------
# Peers that may hang: run in a child process.
# ---------------------------------------------------------------------------------------------

def _child(queue, lib, kind, scores, lengths, reps, threads):
    torch.set_num_threads(threads)
    try:
        fns = tree_fns(lib, kind, scores, lengths)
        values = tuple(fn() for fn in fns)
        ms = median_ms(dict(zip(OPERATIONS, fns)), reps)
        queue.put(("ok", [ms[op] for op in OPERATIONS], values))
    except Exception as error:  # report the failure in the table
        queue.put(("fail", repr(error)[:60], None))


def guarded(lib, kind, scores, lengths, reps, threads):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, lib, kind, scores, lengths, reps, threads))
    proc.start()
    try:
        status, ms, values = queue.get(timeout=GUARD_SECONDS)
    except Exception:
        proc.kill()
        return None, None, "hang"
    proc.join()
    if status != "ok":
        return None, None, "fail: " + ms
    return ms, values, ""


# ---------------------------------------------------------------------------------------------
# Peak memory in a fresh process.
# ---------------------------------------------------------------------------------------------

def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _memory_child(queue, lib, batch, n, threads):
    """Peak resident memory above the state before the call, sampled every millisecond."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(batch, n + 1, n + 1, generator=gen)
    lengths = torch.full((batch,), n)
    marg = tree_fns(lib, "eisner", scores, lengths)[1]
    small = tree_fns(lib, "eisner", scores[:, :4, :4], torch.full((batch,), 3))[1]
    small()  # load code paths
    before, peak, done = _rss_mib(), [0.0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    marg()
    done.set()
    sampler.join()
    queue.put(max(peak[0], _rss_mib()) - before)


def peak_memory_mib(lib: str, batch: int, n: int, threads: int) -> float:
    if DEVICE.type == "cuda":  # the allocator's peak above the state before, in this process
        gen = torch.Generator().manual_seed(0)
        scores = torch.randn(batch, n + 1, n + 1, generator=gen).to(DEVICE)
        marg = tree_fns(lib, "eisner", scores, torch.full((batch,), n, device=DEVICE))[1]
        synchronize(DEVICE)
        before = torch.cuda.memory_allocated(DEVICE)
        torch.cuda.reset_peak_memory_stats(DEVICE)
        marg()
        synchronize(DEVICE)
        return (torch.cuda.max_memory_allocated(DEVICE) - before) / 2**20
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_memory_child, args=(queue, lib, batch, n, threads))
    proc.start()
    value = queue.get(timeout=GUARD_SECONDS * 2)
    proc.join()
    return value


# ---------------------------------------------------------------------------------------------
# Sampling and k-best.
# ---------------------------------------------------------------------------------------------

SAMPLES = 32
KBEST = 8
DECODING_SIZES = [(16, 20)]


def decoding_fns(lib: str, kind: str, scores: torch.Tensor, lengths: torch.Tensor):
    """``(sample_fn, kbest_fn)`` of one library (``None`` where it has none): ``SAMPLES`` exact
    samples and the ``KBEST`` best structures. supar draws one sample per call (so ``SAMPLES``
    calls); its ``topk`` exists for some structures only."""
    if lib == "synattn":
        def make():
            if kind == "cky":
                return TreeCRF(scores, lengths)
            cls = {"eisner": DependencyCRF, "matrix_tree": NonProjectiveDependencyCRF}[kind]
            return cls(scores, lengths, multiroot=True)
        return (lambda: make().sample(SAMPLES)), (lambda: make().kbest(KBEST))
    if lib == "torch-struct":
        import torch_struct
        if kind == "cky":
            x = convert.spans_to_torch_struct(scores)
            make = lambda: torch_struct.TreeCRF(x.clone().requires_grad_(), lengths=lengths)  # noqa: E731
        else:
            cls = torch_struct.DependencyCRF if kind == "eisner" else torch_struct.NonProjectiveDependencyCRF
            x = convert.arcs_to_torch_struct(scores)
            make = lambda: cls(x.clone().requires_grad_(), lengths=lengths, multiroot=True)  # noqa: E731
        return (lambda: make().sample((SAMPLES,))), (lambda: make().topk(KBEST))
    from supar.structs import ConstituencyCRF, DependencyCRF as SuparDep, MatrixTree
    if kind == "cky":
        x = convert.spans_to_supar(scores)
        make = lambda: ConstituencyCRF(x.clone().requires_grad_(), lengths)  # noqa: E731
    else:
        cls = SuparDep if kind == "eisner" else MatrixTree
        x = convert.arcs_to_supar(scores)
        make = lambda: cls(x.clone().requires_grad_(), lengths, multiroot=True)  # noqa: E731
    return (lambda: [make().sample() for _ in range(SAMPLES)]), (lambda: make().topk(KBEST))


def decoding_rows(peers: list[str], reps: int) -> None:
    """Rows for ``SAMPLES`` samples and the ``KBEST`` best structures: a peer that lacks the
    operation (raises) is shown as ``n/a``; timings take turns as in :func:`median_ms`."""
    for batch, n in DECODING_SIZES:
        gen = torch.Generator().manual_seed(11 * 1000 + n)
        lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen)
        lengths[0] = n
        for kind, label in (("eisner", "Eisner"), ("matrix_tree", "Matrix-Tree"), ("cky", "CKY")):
            shape = (batch, n, n) if kind == "cky" else (batch, n + 1, n + 1)
            scores = torch.randn(*shape, generator=gen).to(DEVICE)
            fns = {lib: decoding_fns(lib, kind, scores, lengths.to(DEVICE)) for lib in ["synattn", *peers]}
            for which, index in ((f"{SAMPLES} samples", 0), (f"{KBEST}-best", 1)):
                runnable, others = {}, {}
                for lib, pair in fns.items():
                    try:
                        pair[index]()
                        runnable[lib] = pair[index]
                    except Exception:  # the peer lacks it (NotImplementedError and the like)
                        others[lib] = "n/a"
                ms = median_ms(runnable, max(2, reps // 2), budget_s=20.0)
                ours = ms.pop("synattn")
                row(f"{label} {which} B={batch} N={n}", ours, {**ms, **others}, {})


# ---------------------------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------------------------

def vi_rows(peers: list[str], reps: int, small: bool) -> None:
    """:class:`ConstituencyMFVI` / :class:`ConstituencyLBP` (span + span-pair scores) and
    :class:`SemanticDependencyMFVI` / :class:`SemanticDependencyLBP` (edge + sibling, co-parent,
    grandparent scores) against supar's modules, 3 iterations, the same factors (supar's LBP given
    them in the orientation it reads; the graph LBP with sibling factors only, where supar's
    agrees; the work is the same)."""
    from synattn.structs import ConstituencyLBP, ConstituencyMFVI, SemanticDependencyLBP, SemanticDependencyMFVI
    from synattn.structs.cky.dp import span_mask
    from synattn.structs.dependency.semantic_vi import FACTORS, second_arcs

    for batch, n in [(8, 20)] if small else [(16, 20), (8, 40)]:
        gen = torch.Generator().manual_seed(23 * 1000 + n)
        lengths = torch.full((batch,), n, device=DEVICE)
        spans = torch.randn(batch, n, n, generator=gen).to(DEVICE)
        pairs = torch.randn(batch, n, n, n, generator=gen).to(DEVICE)
        usable = span_mask(lengths, n)
        pairs = pairs * (usable.unsqueeze(3) & usable.unsqueeze(2))
        arcs = usable_arcs(lengths, n + 1)
        masks = second_arcs(arcs)
        edges = torch.randn(batch, n + 1, n + 1, generator=gen).to(DEVICE)
        weights = [torch.randn(batch, n + 1, n + 1, n + 1, generator=gen).to(DEVICE) * masks[name]
                   for name in FACTORS]
        weights[1][:, :, 0] = 0  # ROOT as a co-parent: no factor in supar
        zero = torch.zeros_like(weights[0])
        cases = [(ConstituencyMFVI, (spans, pairs), usable), (ConstituencyLBP, (spans, pairs), usable),
                 (SemanticDependencyMFVI, (edges, *weights), arcs),
                 (SemanticDependencyLBP, (edges, weights[0], zero, zero), arcs)]
        pos = torch.arange(n + 1, device=DEVICE)
        fences = (pos[:, None] < pos[None, :]).expand(batch, n + 1, n + 1)
        for cls, scores, keep in cases:
            fns = {"synattn": lambda: cls()(scores, lengths).detach()}
            if "supar" in peers:
                import supar.structs

                module = getattr(supar.structs, cls.__name__)()
                if cls is ConstituencyMFVI:
                    args = (convert.spans_to_supar(spans), convert.span_pairs_to_supar(pairs))
                    fns["supar"] = lambda: convert.spans_from_supar(module(args, fences).detach())
                elif cls is ConstituencyLBP:
                    args = (convert.spans_to_supar(spans).transpose(1, 2),
                            convert.span_pairs_to_supar(pairs).permute(0, 3, 1, 2))
                    fns["supar"] = lambda: convert.spans_from_supar(module(args, fences).detach().transpose(1, 2))
                else:
                    lbp = cls is SemanticDependencyLBP
                    args = (convert.arcs_to_supar(scores[0]),
                            *[convert.siblings_to_supar(w.transpose(2, 3) if lbp else w) for w in scores[1:]])
                    mask = convert.arcs_to_supar(arcs)
                    fns["supar"] = lambda: convert.arcs_from_supar(module(args, mask).detach())
            diff = {lib: max_diff(fns["synattn"]() * keep, fn() * keep) for lib, fn in fns.items()
                    if lib != "synattn"}
            times = median_ms(fns, reps)
            row(f"{cls.__name__} B={batch} N={n}", times.pop("synattn"), times, diff)


def available_peers() -> list[str]:
    peers = []
    for lib, module in (("torch-struct", "torch_struct"), ("supar", "supar.structs")):
        try:
            __import__(module)
            peers.append(lib)
        except ImportError as error:
            print(f"# {lib} not available ({error}); its columns are empty")
    return peers


def row(name, ours, others, diffs):
    cols = [f"{name:<34}", f"{ours:9.2f}"]
    for lib in ("torch path", "torch-struct", "supar"):
        value = others.get(lib)
        cols.append(f"{value:12.2f}" if isinstance(value, float) else f"{value or '-':>12}")
    timed = [v for lib, v in others.items() if isinstance(v, float) and lib != "torch path"]
    cols.append(f"{min(timed) / ours:8.1f}x" if timed else f"{'-':>9}")
    cols.append("  ".join(f"{lib}: {d:.1e}" for lib, d in diffs.items()))
    print(" | ".join(cols), flush=True)


OPERATIONS = ("part", "marg", "grad")
"""The timed operations of the dependency CRFs: log Z, marginals, marginals with their backward."""


def main() -> None:
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 repetitions instead of 8")
    parser.add_argument("--small", action="store_true", help=f"small sizes only: {SMALL}")
    parser.add_argument("--only", choices=("cky", "decoding", "semimarkov", "labelled",
                                            "alignment", "cfg", "autoregressive", "secondorder", "vi"),
                        help="only the constituency (CKY) rows, only sampling and k-best, or only "
                             "the semi-Markov rows")
    add_device_argument(parser)
    args = parser.parse_args()
    DEVICE = check_device(parser, args.device)
    torch.set_num_threads(args.threads)
    reps = 4 if args.quick else 8
    eisner_sizes, cky_sizes, chain_sizes = ((SMALL["eisner"], SMALL["cky"], SMALL["chain"]) if args.small
                                            else (EISNER_SIZES, CKY_SIZES, CHAIN_SIZES))
    cpu = cpu_name()
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, {cpu}, device "
          f"{device_info(DEVICE)}, float32, median of up to {reps} runs (ms"
          f"{', synchronised' if DEVICE.type == 'cuda' else ''}); speed-up = faster peer / synattn")
    peers = available_peers()
    print(f"{'case':<34} | {'synattn':>9} | {'torch path':>12} | {'torch-struct':>12} | {'supar':>12} "
          "| speed-up | max |difference| from synattn (log Z, marginals)")

    if args.only == "decoding":
        decoding_rows(peers, reps)
        return
    if args.only == "labelled":
        labelled_rows(peers, reps, args.small)
        return
    if args.only == "alignment":
        alignment_rows(peers, reps, args.small)
        return
    if args.only == "secondorder":
        second_order_rows(peers, reps, args.small)
        return
    if args.only == "cfg":
        cfg_rows(peers, reps, args.small)
        return
    if args.only == "vi":
        vi_rows(peers, reps, args.small)
        return
    if args.only == "autoregressive":
        autoregressive_rows(peers, reps, args.small)
        return
    semi_sizes = SMALL["semi_markov"] if args.small else SEMI_MARKOV_SIZES
    if args.only == "semimarkov":
        semi_markov_rows(peers, semi_sizes, reps)
        return
    trees = () if args.only else (("eisner", "Eisner"), ("matrix_tree", "Matrix-Tree"))
    for kind, label in trees:
        for batch, n in eisner_sizes:
            gen = torch.Generator().manual_seed(batch * 1000 + n)
            scores = torch.randn(batch, n + 1, n + 1, generator=gen)
            lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen)
            lengths[0] = n
            guard = DEVICE.type == "cpu" and kind == "matrix_tree" and n >= GUARD_N
            scores, lengths = scores.to(DEVICE), lengths.to(DEVICE)
            usable = usable_arcs(lengths, n + 1)  # (gradients compared on usable arcs only)
            fns = {"synattn": tree_fns("synattn", kind, scores, lengths)}
            times: dict[str, dict] = {op: {} for op in OPERATIONS}
            diffs: dict[str, dict] = {op: {} for op in OPERATIONS}
            values = tuple(fn() for fn in fns["synattn"])
            for lib in ["torch path", *peers]:
                if guard and lib != "torch path":
                    ms, peer_values, note = guarded(lib, kind, scores, lengths, reps, args.threads)
                    for i, op in enumerate(OPERATIONS):
                        times[op][lib] = ms[i] if ms is not None else note
                else:
                    fns[lib] = tree_fns(lib, kind, scores, lengths)
                    peer_values = tuple(fn() for fn in fns[lib])
                if peer_values is not None:
                    for i, op in enumerate(OPERATIONS):
                        keep = usable if op == "grad" else True
                        diffs[op][lib] = max_diff(values[i] * keep, peer_values[i] * keep)
            for index, which in enumerate(OPERATIONS):
                ms = median_ms({lib: fns3[index] for lib, fns3 in fns.items()}, reps)
                times[which].update({lib: v for lib, v in ms.items() if lib != "synattn"})
                times[which]["synattn"] = ms["synattn"]
            for which, what in zip(OPERATIONS, ("partition", "marginals", "marginals+backward")):
                row(f"{label} {what} B={batch} N={n}", times[which].pop("synattn"), times[which],
                    diffs[which])

    for batch, n in cky_sizes:
        gen = torch.Generator().manual_seed(7 * 1000 + n)
        scores = torch.randn(batch, n, n, generator=gen)
        lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen)
        lengths[0] = n
        scores, lengths = scores.to(DEVICE), lengths.to(DEVICE)
        fns = {lib: span_fns(lib, scores, lengths) for lib in ["synattn", "torch path", *peers]}
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {"part": {}, "marg": {}}, {"part": {}, "marg": {}}
        for lib in ["torch path", *peers]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        ours = (times["part"].pop("synattn"), times["marg"].pop("synattn"))
        row(f"CKY partition B={batch} N={n}", ours[0], times["part"], diffs["part"])
        row(f"CKY marginals B={batch} N={n}", ours[1], times["marg"], diffs["marg"])

    for batch, C, n in ([] if args.only else chain_sizes):
        gen = torch.Generator().manual_seed(C * 1000 + n)
        unary = torch.randn(batch, n, C, generator=gen)
        trans = torch.randn(C, C, generator=gen)
        lengths = torch.randint(n // 2, n + 1, (batch,), generator=gen)
        lengths[0] = n
        unary, trans, lengths = unary.to(DEVICE), trans.to(DEVICE), lengths.to(DEVICE)
        fns = {lib: chain_fns(lib, unary, trans, lengths) for lib in ["synattn", "torch path", *peers]}
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {"part": {}, "marg": {}}, {"part": {}, "marg": {}}
        valid = (torch.arange(n, device=DEVICE) < lengths[:, None]).unsqueeze(-1)
        for lib in ["torch path", *peers]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1] * valid)
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        ours = (times["part"].pop("synattn"), times["marg"].pop("synattn"))
        row(f"chain partition B={batch} C={C} N={n}", ours[0], times["part"], diffs["part"])
        row(f"chain marginals B={batch} C={C} N={n}", ours[1], times["marg"], diffs["marg"])

    if args.only:
        return
    semi_markov_rows(peers, semi_sizes, reps)
    decoding_rows(peers, reps)
    print("\n# peak memory of Eisner marginals, B=4 N=160 (MiB above the state before: "
          + ("the CUDA allocator's peak)" if DEVICE.type == "cuda" else "resident, fresh process each)"))
    for lib in ["synattn", "torch path", *peers]:
        print(f"{lib:<14} {peak_memory_mib(lib, 4, 160, args.threads):10.1f}", flush=True)


if __name__ == "__main__":
    main()
