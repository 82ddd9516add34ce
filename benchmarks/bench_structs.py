"""Benchmark ``synattn.structs`` against torch-struct 0.5 and supar 1.1.4 on the same inputs.

Cases: Eisner and Matrix-Tree (dependency CRFs), CKY (constituency: ``TreeCRF`` against
torch-struct's ``TreeCRF`` with one label and supar's ``ConstituencyCRF``), the linear chain and
the semi-Markov CRF (torch-struct only; ``--only semimarkov``; ``--only dependency``, ``--only cky``
and ``--only chain`` take the rows of one structure), labelled arcs ``[B, N+1, N+1,
R]`` (torch-struct only; ``--only labelled``), ``AlignmentCRF`` (``--only alignment``), ``SentCFG``
(``--only cfg``), ``Autoregressive`` greedy and beam search (``--only autoregressive``),
the second-order ``Dependency2oCRF`` and ``DependencyMFVI``/``DependencyLBP`` against supar
(``--only secondorder``), supar's other approximate inference: ``ConstituencyMFVI``/``LBP`` and
``SemanticDependencyMFVI``/``LBP`` (``--only vi``).
For every case the same random scores go to all three libraries (converted to each one's layout
by ``synattn.structs.convert``); the script checks that the values agree, then times the libraries
in paired rounds (``--rounds``, 20 by default; every library called once per round, in a shuffled
order, after a warm-up round) and prints their median milliseconds and the speed-up of synattn
over the faster of the two others, round by round: its median, ``[min-max]`` and the number of
rounds. synattn runs twice:
with its default backend (compiled kernels on CPU when numba is installed) and with its
pure-PyTorch backend (column ``torch path``, the code that also runs on CUDA); the speed-up is
that of the default backend. The dependency CRFs also time the marginals with the backward of
a random direction through them (``marginals+backward``: what structured attention trains
through). It ends with the peak memory of Eisner marginals at ``(B, N) = (4, 160)``, each
library measured in a fresh process on the CPU and by the allocator's peak on CUDA (not with
``--only cky``). A library whose call raises is shown as ``fail`` with the error's text below the
row; one without the operation (NotImplementedError) as ``n/a``. The header gives the machine,
its load average (again at the end), the threads and the versions of torch, numba, triton and
the peers.

``--launches`` prints instead a table of device operations per call (no timing): for each
backend of synattn (``torch``, ``numba`` on the CPU, ``triton`` where
``synattn.structs.backend`` offers it) and each peer, what ``device.device_ops`` counts with
``torch.profiler`` — kernels and copies on CUDA; on the CPU the aten operators that would be
launches on CUDA — at growing ``N`` (``launches.py``; on the CPU the Triton kernels run under
Triton's interpreter, ``TRITON_INTERPRET=1`` is set for the table).

The code is split over this folder: ``structs_cases.py`` (each library's functions on the same
inputs), ``structs_common.py`` (paired timings, the table's line), ``structs_more.py`` and
``structs_alignment.py`` (the ``--only`` rows), ``harness.py`` (paired rounds, child processes),
``launches.py``.

``--device cuda`` puts every input on the GPU (the libraries run there; synattn's default backend
is then its pure-PyTorch path) and synchronises the device before starting and before stopping
each timing; ``--small`` takes smaller sizes (a quick check, e.g. ``benchmarks/gpu_check.sh``).

The peer libraries are installed only for this script (never for the package or its tests)::

    pip install --no-deps torch-struct==0.5 supar==1.1.4 nltk dill

torch-struct's ``AlignmentCRF`` also needs genbmm, which is not on PyPI (installed from its
source for the ``alignment`` case; see docs/structs.md, "Alignments").

Run (``--quick`` takes 8 rounds)::

    python benchmarks/bench_structs.py [--threads 2] [--quick | --rounds 20] [--small]
        [--only dependency|cky|chain|decoding|semimarkov|labelled|alignment|cfg|autoregressive|secondorder|vi]
        [--device cpu|cuda] [--launches]

The last rows time ``32`` exact samples and the ``8`` best structures (Eisner, Matrix-Tree,
CKY) against the peers' ``sample``/``topk`` where they have them (``n/a`` or ``fail`` where they raise).

Notes: torch-struct's Matrix-Tree adds ``eps = 1e-5`` to every arc weight, so its values differ
from the exact ones by up to ~1e-2; under torch 2.13 its ``DependencyCRF.partition`` needs inputs
with ``requires_grad``. Batched LAPACK LU/inverse can fail or hang on ``[4, 160, 160]`` with two
threads on some CPU builds, so the Matrix-Tree rows at ``N >= 150`` run in a child process
(``harness.run_in_child``: results through a file): a library that raises there is shown as
``fail`` with its error, one that makes no progress for ``GUARD_SECONDS`` as ``hang``, and the row
is rerun without it.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import torch
from structs_alignment import alignment_rows

from synattn.structs.dependency.arc_scores import usable_arcs

import structs_common as common
from device import add_device_argument, check_device, device_info, synchronize
from harness import run_in_child
from machine import load_average, machine_info, versions
from structs_cases import chain_fns, span_fns, tree_fns
from structs_common import QUICK_ROUNDS, ROUNDS, available_peers, max_diff, median_ms, probe, row
from structs_more import (
    autoregressive_rows,
    cfg_rows,
    decoding_rows,
    labelled_rows,
    second_order_rows,
    semi_markov_rows,
    vi_rows,
)

EISNER_SIZES = [(32, 20), (32, 40), (16, 80), (4, 160)]
CKY_SIZES = [(32, 20), (16, 40), (4, 80)]
CHAIN_SIZES = [(32, C, N) for C in (2, 16) for N in (50, 200)]
SEMI_MARKOV_SIZES = [(16, 4, 4, 50), (16, 8, 8, 100)]
"""``(B, K, C, N)`` of the semi-Markov rows."""
SMALL = {"eisner": [(8, 20), (4, 40)], "cky": [(8, 20)], "chain": [(8, 2, 50)],
         "semi_markov": [(8, 4, 4, 30)]}
"""``--small``: sizes of a quick check."""
GUARD_N = 150  # Matrix-Tree rows from this length on run in a child process (CPU only)
GUARD_SECONDS = 60
"""A child process making no progress for this long is a hang (``harness.run_in_child``)."""


# ---------------------------------------------------------------------------------------------
# Dependency rows; those where a peer may hang run in a child process.
# ---------------------------------------------------------------------------------------------

def tree_row(kind: str, scores: torch.Tensor, lengths: torch.Tensor, libs: list[str], reps: int):
    """One dependency-CRF row: ``(values, times, notes)``: each library's ``OPERATIONS`` values
    and timings ``{op: {lib: Timed}}`` (paired rounds), and ``fail: ...`` for a peer that raised."""
    fns = {lib: tree_fns(lib, kind, scores, lengths) for lib in libs}
    notes: dict[str, str] = {}
    values = probe(fns, notes)
    times = {op: median_ms({lib: f[i] for lib, f in fns.items()}, reps) for i, op in enumerate(OPERATIONS)}
    return values, times, notes


def _tree_row_child(kind, scores, lengths, libs, reps):
    """:func:`tree_row` in a child process (CPU)."""
    return tree_row(kind, scores, lengths, libs, reps)


def guarded_tree_row(kind: str, scores: torch.Tensor, lengths: torch.Tensor, libs: list[str],
                     reps: int, threads: int):
    """:func:`tree_row` in a child process: a library during whose call the child stops making
    progress for ``GUARD_SECONDS`` (``hang: ...``) or dies (``fail: ...``) is noted and the row
    rerun without it."""
    libs, notes = list(libs), {}
    while True:
        result = run_in_child(_tree_row_child, (kind, scores, lengths, libs, reps), GUARD_SECONDS, threads)
        if result.status == "ok":
            values, times, more = result.value
            return values, times, {**notes, **more}
        culprit = next((lib for lib in libs if result.running.startswith(f"{lib} (")), None)
        if culprit in (None, "synattn", "torch path"):
            raise RuntimeError(f"{kind} row (B={scores.shape[0]}, N={scores.shape[-1] - 1}) in a child "
                               f"process: {result.label(300)}")
        notes[culprit] = result.label(300)
        libs.remove(culprit)


# ---------------------------------------------------------------------------------------------
# Peak memory in a fresh process.
# ---------------------------------------------------------------------------------------------

def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _memory_child(lib, batch, n):
    """Peak resident memory above the state before the call, sampled every millisecond."""
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
    return max(peak[0], _rss_mib()) - before


def peak_memory_mib(lib: str, batch: int, n: int, threads: int) -> float | str:
    """MiB of Eisner marginals at ``(batch, n)`` above the state before (``fail: ...`` where the
    library raised in its child process)."""
    if common.DEVICE.type == "cuda":  # the allocator's peak above the state before, in this process
        gen = torch.Generator().manual_seed(0)
        scores = torch.randn(batch, n + 1, n + 1, generator=gen).to(common.DEVICE)
        marg = tree_fns(lib, "eisner", scores, torch.full((batch,), n, device=common.DEVICE))[1]
        synchronize(common.DEVICE)
        before = torch.cuda.memory_allocated(common.DEVICE)
        torch.cuda.reset_peak_memory_stats(common.DEVICE)
        marg()
        synchronize(common.DEVICE)
        return (torch.cuda.max_memory_allocated(common.DEVICE) - before) / 2**20
    result = run_in_child(_memory_child, (lib, batch, n), GUARD_SECONDS * 2, threads)
    return result.value if result.status == "ok" else result.label(200)  # type: ignore[return-value]


OPERATIONS = ("part", "marg", "grad")
"""The timed operations of the dependency CRFs: log Z, marginals, marginals with their backward."""


def op_rows(names: list[str], fns: dict[str, tuple], reps: int, compare=None) -> None:
    """One row per operation of ``fns`` (``{lib: (fn of operation 0, ...)}``, synattn first),
    named ``names``: one call of each to compare the values with synattn's (``compare(i, ours,
    theirs)``, default :func:`max_diff`), then paired timings of each operation."""
    notes: dict[str, str] = {}
    values = probe(fns, notes)
    for i, name in enumerate(names):
        diffs = {lib: compare(i, values["synattn"][i], v[i]) if compare else max_diff(values["synattn"][i], v[i])
                 for lib, v in values.items() if lib != "synattn"}
        times: dict[str, object] = dict(median_ms({lib: f[i] for lib, f in fns.items()}, reps))
        row(name, times.pop("synattn"), {**times, **notes}, diffs)


def dependency_rows(peers: list[str], sizes, reps: int, threads: int) -> None:
    """Eisner and Matrix-Tree rows (log Z, marginals, marginals+backward); the Matrix-Tree rows at
    ``N >= GUARD_N`` on the CPU in a child process (:func:`guarded_tree_row`)."""
    for kind, label in (("eisner", "Eisner"), ("matrix_tree", "Matrix-Tree")):
        for batch, n in sizes:
            gen = torch.Generator().manual_seed(batch * 1000 + n)
            scores = torch.randn(batch, n + 1, n + 1, generator=gen)
            lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen)
            lengths[0] = n
            libs = ["synattn", "torch path", *peers]
            if common.DEVICE.type == "cpu" and kind == "matrix_tree" and n >= GUARD_N:
                values, times, notes = guarded_tree_row(kind, scores, lengths, libs, reps, threads)
            else:
                scores, lengths = scores.to(common.DEVICE), lengths.to(common.DEVICE)
                values, times, notes = tree_row(kind, scores, lengths, libs, reps)
            usable = usable_arcs(lengths, n + 1).to(common.DEVICE)  # (gradients compared on usable arcs only)
            for i, (op, what) in enumerate(zip(OPERATIONS, ("partition", "marginals", "marginals+backward"))):
                keep = usable if op == "grad" else True
                diffs = {lib: max_diff(values["synattn"][i] * keep, v[i].to(common.DEVICE) * keep)
                         for lib, v in values.items() if lib != "synattn"}
                ms: dict[str, object] = dict(times[op])
                row(f"{label} {what} B={batch} N={n}", ms.pop("synattn"), {**ms, **notes}, diffs)


def cky_rows(peers: list[str], sizes, reps: int) -> None:
    for batch, n in sizes:
        gen = torch.Generator().manual_seed(7 * 1000 + n)
        scores = torch.randn(batch, n, n, generator=gen)
        lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen)
        lengths[0] = n
        scores, lengths = scores.to(common.DEVICE), lengths.to(common.DEVICE)
        fns = {lib: span_fns(lib, scores, lengths) for lib in ["synattn", "torch path", *peers]}
        op_rows([f"CKY partition B={batch} N={n}", f"CKY marginals B={batch} N={n}"], fns, reps)


def chain_rows(peers: list[str], sizes, reps: int) -> None:
    for batch, C, n in sizes:
        gen = torch.Generator().manual_seed(C * 1000 + n)
        unary = torch.randn(batch, n, C, generator=gen)
        trans = torch.randn(C, C, generator=gen)
        lengths = torch.randint(n // 2, n + 1, (batch,), generator=gen)
        lengths[0] = n
        unary, trans, lengths = unary.to(common.DEVICE), trans.to(common.DEVICE), lengths.to(common.DEVICE)
        valid = (torch.arange(n, device=common.DEVICE) < lengths[:, None]).unsqueeze(-1)
        fns = {lib: chain_fns(lib, unary, trans, lengths) for lib in ["synattn", "torch path", *peers]}
        op_rows([f"chain partition B={batch} C={C} N={n}", f"chain marginals B={batch} C={C} N={n}"], fns,
                reps, lambda i, ours, theirs: max_diff(ours, theirs * valid if i == 1 else theirs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ROUNDS} paired rounds per row instead of {ROUNDS}")
    parser.add_argument("--rounds", type=int, help=f"paired rounds per row (default {ROUNDS}; at least 3)")
    parser.add_argument("--small", action="store_true", help=f"small sizes only: {SMALL}")
    parser.add_argument("--only", choices=("dependency", "cky", "chain", "decoding", "semimarkov", "labelled",
                                            "alignment", "cfg", "autoregressive", "secondorder", "vi"),
                        help="only these rows: the dependency CRFs (Eisner, Matrix-Tree), CKY, the "
                             "linear chain, sampling and k-best, the semi-Markov chain, ...")
    parser.add_argument("--launches", action="store_true",
                        help="instead of timings: device operations per call of each backend and peer "
                             "(kernel launches on CUDA; see device.device_ops)")
    add_device_argument(parser)
    args = parser.parse_args()
    common.DEVICE = check_device(parser, args.device)
    if args.rounds is not None and args.rounds < 3:
        parser.error(f"--rounds: at least 3 paired rounds, got {args.rounds}")
    if args.threads < 1:
        parser.error(f"--threads: at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    reps = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    print(f"# {machine_info()}")
    print(f"# {versions('torch', 'numba', 'triton', 'torch-struct', 'supar', 'genbmm')}")
    if args.launches:
        from launches import launch_table
        launch_table(common.DEVICE, args.small)
        return
    print(f"# device {device_info(common.DEVICE)}; float32; ms: median of {reps} paired rounds (each library once "
          f"per round, shuffled{'; synchronised' if common.DEVICE.type == 'cuda' else ''}); speed-up: faster peer "
          "/ synattn per round, median [min-max] rounds")
    peers = available_peers()
    print(f"{'case':<40} | {'synattn':>9} | {'torch path':>12} | {'torch-struct':>12} | {'supar':>12} "
          f"| {'speed-up':>22} | max |difference| from synattn")
    run_rows(args, peers, reps)
    print(f"# load average at the end: {load_average()}")


def run_rows(args, peers: list[str], reps: int) -> None:
    """The rows that ``--only`` (or its absence) selects."""
    extra = {"decoding": lambda: decoding_rows(peers, reps),
             "labelled": lambda: labelled_rows(peers, reps, args.small),
             "alignment": lambda: alignment_rows(peers, reps, args.small),
             "secondorder": lambda: second_order_rows(peers, reps, args.small),
             "cfg": lambda: cfg_rows(peers, reps, args.small),
             "vi": lambda: vi_rows(peers, reps, args.small),
             "autoregressive": lambda: autoregressive_rows(peers, reps, args.small),
             "semimarkov": lambda: semi_markov_rows(peers, SMALL["semi_markov"] if args.small
                                                    else SEMI_MARKOV_SIZES, reps)}
    if args.only in extra:
        extra[args.only]()
        return
    if args.only == "dependency":
        dependency_rows(peers, SMALL["eisner"] if args.small else EISNER_SIZES, reps, args.threads)
        return
    if args.only == "chain":
        chain_rows(peers, SMALL["chain"] if args.small else CHAIN_SIZES, reps)
        return
    small = args.small
    if not args.only:
        dependency_rows(peers, SMALL["eisner"] if small else EISNER_SIZES, reps, args.threads)
    cky_rows(peers, SMALL["cky"] if small else CKY_SIZES, reps)
    if args.only:
        return
    chain_rows(peers, SMALL["chain"] if small else CHAIN_SIZES, reps)
    extra["semimarkov"]()
    extra["decoding"]()
    print("\n# peak memory of Eisner marginals, B=4 N=160 (MiB above the state before: "
          + ("the CUDA allocator's peak)" if common.DEVICE.type == "cuda" else "resident, fresh process each)"))
    for lib in ["synattn", "torch path", *peers]:
        mib = peak_memory_mib(lib, 4, 160, args.threads)
        print(f"{lib:<14} {mib:10.1f}" if isinstance(mib, float) else f"{lib:<14} {mib}", flush=True)


if __name__ == "__main__":
    main()
