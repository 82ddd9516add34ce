"""The Matrix-Tree GPU path with the robust kernel gated on the device, against the same path
reading one boolean back to the host (``use_backend("torch")``).

For each ``(B, N)``: marginals and their backward through the registry's ``device``
implementation, on scores of two scales: 1 (LU certifies every sentence; the gated kernel is
launched and every program returns at once) and 300 (most sentences fail the certificate: the
kernel computes them, where the read-back path sends them to the CPU-oriented PyTorch code).
Interleaved rounds (each call once per round, shuffled), synchronised on CUDA; prints median
milliseconds and the per-round ratio ``read back / gated`` (median [min-max]).

    python benchmarks/bench_matrix_tree_device.py --device cuda [--rounds 20] [--quick]

On the CPU the kernel runs under Triton's interpreter (``TRITON_INTERPRET=1`` is set here):
the numbers then only show that the script runs.
"""

from __future__ import annotations

import argparse
import os

import torch

from device import add_device_argument, check_device, device_info
from harness import format_spread, paired_ms, ratio_spread
from machine import machine_info

SIZES = [(32, 20), (32, 40), (16, 80), (4, 160)]
QUICK_SIZES = [(4, 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_argument(parser)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_SIZES} (a smoke run)")
    args = parser.parse_args()
    device = check_device(parser, args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from synattn.structs import NonProjectiveDependencyCRF, registry
    from synattn.structs.backend import use_backend
    from synattn.structs.dependency.arc_scores import check_arc_scores

    assert NonProjectiveDependencyCRF.structure == "nonprojective"  # (importing it registers its paths)
    impl = next(i for i in registry.implementations("nonprojective") if i.name == "device")
    print(machine_info())
    print(f"# {device_info(device)}; {args.rounds} interleaved rounds; ms: median; "
          "ratio: read back / gated per round, median [min-max] rounds")
    print(f"{'case':<20}| {'gated ms':>9} | {'read back ms':>12} | {'ratio':>22}")
    gen = torch.Generator().manual_seed(0)
    for B, N in QUICK_SIZES if args.quick else SIZES:
        for scale in (1.0, 300.0):
            raw = torch.randn(B, N + 1, N + 1, generator=gen) * scale
            scores, lengths = check_arc_scores(raw.to(device), torch.full((B,), N, device=device))[:2]
            x = scores.clone().requires_grad_()
            g = torch.randn(scores.shape, generator=gen).to(device)

            def call(backend: str, x=x, lengths=lengths, g=g) -> None:
                with use_backend(backend):
                    mu = impl.marginals(x, lengths, False)
                    torch.autograd.grad(mu, x, g)

            times = paired_ms({"gated": lambda: call("auto"), "read back": lambda: call("torch")},
                              args.rounds, device)
            spread = ratio_spread(times["gated"], {"read back": times["read back"]})
            print(f"{f'({B}, {N}) x{scale:g}':<20}| {times['gated']:9.3f} | {times['read back']:12.3f} "
                  f"| {format_spread(spread):>22}", flush=True)


if __name__ == "__main__":
    main()
