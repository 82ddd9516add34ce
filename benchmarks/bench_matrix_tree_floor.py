"""How close synattn's Matrix-Tree is to the LAPACK call its peers are built on.

torch-struct and supar compute a non-projective CRF's log Z as a log-determinant (one batched LU
factorisation) and its marginals from an inverse (an LU and a solve). That LU is the floor of
their approach: this script times it alone, on Koo et al.'s matrices of the same sizes as
``bench_structs.py`` (float32, as the peers run, and float64), against synattn's
``NonProjectiveDependencyCRF`` log Z and marginals, and the peers' log Z where they are installed
(torch-struct 0.5, supar 1.1.4), in interleaved rounds (each call once per round, shuffled), and
prints median milliseconds and ``library / floor`` per round (median [min-max]).

    python benchmarks/bench_matrix_tree_floor.py [--threads 1] [--rounds 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from synattn.structs import NonProjectiveDependencyCRF

from machine import machine_info
from structs_cases import tree_fns

SIZES = [(32, 20), (32, 40), (16, 80), (4, 160)]


def laplacian(scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Koo et al.'s multi-root matrix of the arc scores (ROOT's row on the diagonal)."""
    w = scores.to(dtype).exp()
    words = w[:, 1:, 1:] * (1 - torch.eye(w.shape[-1] - 1, dtype=dtype))
    return torch.diag_embed(words.sum(1) + w[:, 0, 1:]) - words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_info())
    print(f"# {args.rounds} interleaved rounds; ms: median; ratio: synattn / LU per round, median [min-max]")
    peers = []
    for name, module in (("torch-struct", "torch_struct"), ("supar", "supar")):
        try:
            __import__(module)
            peers.append(name)
        except ImportError:
            print(f"# {name} not installed: its column is left out")
    print(f"{'case':<12}| {'LU f32':>8} | {'LU f64':>8} | {'LU+inv f64':>10} | {'log Z':>8} | {'marginals':>9} "
          f"| {'log Z / LU f32':>18} | {'marg. / LU+inv f64':>18}"
          + "".join(f" | {p + ' log Z / LU f32':>28}" for p in peers))
    gen = torch.Generator().manual_seed(0)
    for B, N in SIZES:
        scores = torch.randn(B, N + 1, N + 1, generator=gen)
        lengths = torch.full((B,), N)
        m32, m64 = laplacian(scores, torch.float32), laplacian(scores, torch.float64)
        eye = torch.eye(N, dtype=torch.float64).expand(B, N, N)

        def lu_inverse():
            lu, piv = torch.linalg.lu_factor(m64)
            return torch.linalg.lu_solve(lu, piv, eye)

        calls = {"LU f32": lambda: torch.linalg.lu_factor(m32), "LU f64": lambda: torch.linalg.lu_factor(m64),
                 "LU+inv f64": lu_inverse,
                 "log Z": lambda: NonProjectiveDependencyCRF(scores, lengths, multiroot=True).log_partition,
                 "marginals": lambda: NonProjectiveDependencyCRF(scores, lengths, multiroot=True).marginals}
        for peer in peers:
            calls[peer] = tree_fns(peer, "matrix_tree", scores, lengths)[0]
        times: dict[str, list[float]] = {name: [] for name in calls}
        for fn in calls.values():
            fn()  # warm-up (and numba's compilation)
        for _ in range(args.rounds):
            order = list(calls)
            random.shuffle(order)
            for name in order:
                start = time.perf_counter()
                calls[name]()
                times[name].append((time.perf_counter() - start) * 1e3)

        def ratio(a: str, b: str) -> str:
            r = [x / y for x, y in zip(times[a], times[b])]
            return f"{statistics.median(r):.2f}x [{min(r):.2f}-{max(r):.2f}]"

        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"B={B:<3} N={N:<4}| {med['LU f32']:8.2f} | {med['LU f64']:8.2f} | {med['LU+inv f64']:10.2f} | "
              f"{med['log Z']:8.2f} | {med['marginals']:9.2f} | {ratio('log Z', 'LU f32'):>18} | "
              f"{ratio('marginals', 'LU+inv f64'):>18}"
              + "".join(f" | {med[p]:7.2f} ms {ratio(p, 'LU f32'):>17}" for p in peers))


if __name__ == "__main__":
    main()
