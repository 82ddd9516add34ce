"""Benchmark: vectorised batched tree relation labels vs the slow BFS reference.

Labels = tree distance + tree traversal (docs/methods.md §1), computed for random dependency trees of
10-60 words (half projective, 1-2 root words, seeded). The vectorised path sorts the sentences by
length, pads each chunk of ``--chunk`` sentences to its longest one and calls
``batch_relation_labels``; the baseline is ``synattn.trees._reference.reference_labels``
(breadth-first path search per word pair) on a subset, scaled to sentences per second.

Usage:
    python benchmarks/bench_relations.py [--sentences 20000] [--reference 500] [--repeats 5]

Wall time and CPU time (of this process) are both printed: on a shared machine the CPU time is
the steadier of the two.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from synattn.trees._reference import random_heads, reference_labels
from synattn.trees.relations import batch_relation_labels

from machine import machine_info


def make_corpus(n_sentences: int, seed: int = 0) -> list[np.ndarray]:
    """Random trees of 10-60 words: half projective, one or two root words."""
    rng = np.random.default_rng(seed)
    return [random_heads(rng, int(rng.integers(10, 61)), roots=int(rng.integers(1, 3)),
                         projective=bool(k % 2)) for k in range(n_sentences)]


def vectorised(corpus: list[np.ndarray], chunk: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Labels of every sentence in length-sorted chunks: one (distance, traversal) per chunk."""
    order = np.argsort([len(h) for h in corpus], kind="stable")
    out = []
    for start in range(0, len(order), chunk):
        members = [corpus[k] for k in order[start:start + chunk]]
        lengths = np.array([len(h) for h in members])
        heads = np.zeros((len(members), lengths.max()), dtype=np.int64)  # [B, n]
        for row, h in enumerate(members):
            heads[row, :len(h)] = h
        out.append(batch_relation_labels(heads, lengths))
    return out


def check(corpus: list[np.ndarray], chunk: int) -> None:
    """The vectorised labels of the first sentences equal the reference (sanity, not timed)."""
    sample = corpus[:50]
    order = np.argsort([len(h) for h in sample], kind="stable")
    results = vectorised(sample, chunk)
    flat = [(d[r], t[r]) for d, t in results for r in range(len(d))]
    for (dist, trav), k in zip(flat, order):
        n = len(sample[k])
        ref_dist, ref_trav = reference_labels(sample[k])
        assert (dist[:n, :n] == ref_dist).all() and (trav[:n, :n] == ref_trav).all(), k


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds (this process, all threads) of ``repeats`` calls."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--reference", type=int, default=500, help="sentences for the baseline")
    parser.add_argument("--chunk", type=int, default=512, help="sentences per padded batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    print(machine_info())
    corpus = make_corpus(args.sentences)
    words = sum(len(h) for h in corpus)
    print(f"{len(corpus)} sentences, {words} words (mean length {words / len(corpus):.1f})")
    check(corpus, args.chunk)

    fast = timed(lambda: vectorised(corpus, args.chunk), args.repeats)
    subset = corpus[:args.reference]
    slow = tuple(t * len(corpus) / len(subset)
                 for t in timed(lambda: [reference_labels(h) for h in subset], 1))
    print(f"{'method':<32} {'wall s':>8} {'CPU s':>8} {'sent/s wall':>12} {'sent/s CPU':>11} "
          f"{'speed-up':>9}")
    for name, (wall, cpu) in [("reference (BFS per pair)", slow),
                              (f"vectorised, chunks of {args.chunk}", fast)]:
        print(f"{name:<32} {wall:>8.3f} {cpu:>8.3f} {len(corpus) / wall:>12.0f} "
              f"{len(corpus) / cpu:>11.0f} {slow[0] / wall:>8.1f}x")
    print(f"(medians of {args.repeats} runs over the corpus; the reference ran once on "
          f"{len(subset)} sentences, scaled to {len(corpus)}; load average after: "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
