"""Forward+backward time of the Tree Transformer, Bird-Eye and structured attention layers.

Usage::

    python benchmarks/bench_structured_attention.py [--batch 16] [--lengths 64 128]
        [--d-model 512] [--heads 8] [--threads 2] [--repeats 10] [--crf-repeats 3]

Prints, per sequence length, the median milliseconds of forward + backward of one
``MultiheadAttention`` layer (fp32, CPU) with each feature and its ratio to the plain layer of the
same kind measured in the same run: bidirectional self-attention for constituent (METHODS §3) and
syntactic attention (§5), causal self-attention for BET(SG) and BET(SF) (§4), cross-attention
(target and source of length n) for segmentation attention and its sigmoid baseline (§5).
Segmentation and syntactic attention run on ``synattn.structs`` and, when ``torch_struct`` is
importable, on torch-struct's ``LinearChainCRF`` / ``DependencyCRF`` /
``NonProjectiveDependencyCRF`` (same layer, only the CRF swapped); the last column gives
torch-struct's time over ours. Lengths are random in [n/2, n] with a padding mask; the repeats
are interleaved across variants (the CRF variants get ``--crf-repeats``), medians reported.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from synattn.attention.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer
from synattn.attention.constituent import ConstituentAttention, ConstituentState
from synattn.attention.core import MultiheadAttention
from synattn.attention.inputs import SyntaxInputs
from synattn.attention.structured import SegmentationAttention, SyntacticAttention
from synattn.trees.relations import batch_syntax_hints
from machine import cpu_name

try:
    import torch_struct
except ImportError:  # the comparison is optional
    torch_struct = None


class TorchStructChain:
    """torch-struct's LinearChainCRF behind the unary + transition interface of
    ``synattn.structs.LinearChainCRF`` (node marginals from torch-struct's edge marginals)."""

    def __init__(self, unary: torch.Tensor, transition: torch.Tensor, lengths: torch.Tensor):
        # torch-struct: edge potentials [K, m − 1, z_{i+1}, z_i], node 0's unary folded into edge 0
        edges = transition[:, None] + unary[:, 1:, None, :]  # [K, m−1, prev, next]
        edges = torch.cat([edges[:, :1] + unary[:, :1, :, None], edges[:, 1:]], dim=1)
        self.dist = torch_struct.LinearChainCRF(edges.transpose(-1, -2), lengths=lengths)

    @property
    def marginals(self) -> torch.Tensor:
        edge = self.dist.marginals  # [K, m − 1, next, prev]
        first = edge[:, :1].sum(-2)  # [K, 1, C] p(z_0)
        return torch.cat([first, edge.sum(-1)], dim=1)  # [K, m, C]


class TorchStructSegmentation(SegmentationAttention):
    chain_crf = TorchStructChain


class TorchStructSyntactic(SyntacticAttention):
    """Arc marginals from torch-struct (ROOT arcs on the diagonal, ``[b, head, dependent]``)."""

    def arc_marginals(self, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        n = scores.shape[-1] - 1
        eye = torch.eye(n, dtype=torch.bool)
        words = scores[:, 1:, 1:]
        potentials = torch.where(eye, scores[:, :1, 1:].expand_as(words), words)  # [B, n, n]
        kind = (torch_struct.DependencyCRF if self.tree == "projective"
                else torch_struct.NonProjectiveDependencyCRF)
        marg = kind(potentials, lengths=lengths, multiroot=self.multiroot).marginals  # [B, n, n]
        out = marg.new_zeros(scores.shape)
        out[:, 0, 1:] = marg.diagonal(0, 1, 2)
        out[:, 1:, 1:] = marg.masked_fill(eye, 0.0)
        return out


def random_hints(batch: int, n: int, lengths: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """BET(SG) hints of random trees of the given lengths."""
    heads = np.zeros((batch, n), dtype=np.int64)
    for b, length in enumerate(lengths):
        order = rng.permutation(length)
        for rank, word in enumerate(order[1:], start=1):
            heads[b, word] = order[rng.integers(0, rank)] + 1
    return torch.as_tensor(batch_syntax_hints(heads, lengths))


def variants(d: int, h: int) -> dict[str, tuple[str, str, Callable[[], MultiheadAttention]]]:
    """name -> (kind of attention, CRF backend, constructor)."""
    out = {
        "plain self": ("self", "", lambda: MultiheadAttention(d, h)),
        "constituent": ("self", "", lambda: MultiheadAttention(
            d, h, features=[ConstituentAttention(d, 0, ConstituentState())])),
        "plain causal": ("causal", "", lambda: MultiheadAttention(d, h)),
        "BET(SG)": ("causal", "", lambda: MultiheadAttention(d, h, features=[SyntaxGuidedPointer()])),
        "BET(SF)": ("causal", "", lambda: MultiheadAttention(d, h, features=[BirdEyeReweighting(d, h)])),
        "plain cross": ("cross", "", lambda: MultiheadAttention(d, h)),
        "sigmoid (seg. baseline)": ("cross", "", lambda: MultiheadAttention(
            d, h, features=[SegmentationAttention(h, "sigmoid")])),
    }
    backends = [("synattn", SegmentationAttention, SyntacticAttention)]
    if torch_struct is not None:
        backends.append(("torch-struct", TorchStructSegmentation, TorchStructSyntactic))
    for backend, seg, syn in backends:
        out[f"segmentation [{backend}]"] = ("cross", backend, lambda seg=seg: MultiheadAttention(
            d, h, features=[seg(h)]))
        out[f"syntactic proj. [{backend}]"] = ("self", backend, lambda syn=syn: MultiheadAttention(
            d, h, features=[syn(d, tree="projective")]))
        out[f"syntactic non-proj. [{backend}]"] = ("self", backend, lambda syn=syn: MultiheadAttention(
            d, h, features=[syn(d, tree="nonprojective", multiroot=True)]))
    return out


def check(d: int, h: int) -> None:
    """Ours and torch-struct's layers give the same attention on a small padded batch (not timed)."""
    if torch_struct is None:
        return
    x, source = torch.randn(3, 6, d), torch.randn(3, 7, d)
    pairs = [(SegmentationAttention(h), TorchStructSegmentation(h), "cross"),
             (SyntacticAttention(d, tree="projective"), TorchStructSyntactic(d, tree="projective"), "self")]
    for ours, theirs, kind in pairs:
        with torch.no_grad():
            for param in ours.parameters():  # leave the zero initialisation
                param.normal_()
        theirs.load_state_dict(ours.state_dict())
        a, b = MultiheadAttention(d, h, features=[ours]), MultiheadAttention(d, h, features=[theirs])
        b.load_state_dict(a.state_dict())
        context = source if kind == "cross" else None
        pad = torch.tensor([[False] * 7, [False] * 5 + [True] * 2, [False] * 2 + [True] * 5])
        pad = pad if kind == "cross" else pad[:, :6]
        probs = [m(x, context=context, key_padding_mask=pad, need_weights=True)[1].probs
                 for m in (a, b)]
        torch.testing.assert_close(probs[0], probs[1], atol=1e-4, rtol=1e-4)


def step(module: MultiheadAttention, kind: str, x: torch.Tensor, source: torch.Tensor,
         pad: torch.Tensor, syntax: SyntaxInputs) -> float:
    """Seconds of one forward + backward."""
    start = time.perf_counter()
    if kind == "cross":
        out, extras = module(x, context=source, key_padding_mask=pad)
    else:
        out, extras = module(x, key_padding_mask=pad, causal=kind == "causal", syntax=syntax)
    loss = out.square().mean() + sum(extras.losses.values(), torch.zeros(()))
    loss.backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--crf-repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    check(16, 4)
    specs = variants(args.d_model, args.heads)
    modules = {name: make() for name, (_, _, make) in specs.items()}
    print(f"one attention layer, forward+backward, fp32, B={args.batch}, d={args.d_model}, "
          f"H={args.heads}, median of {args.repeats} ({args.crf_repeats} with a CRF), interleaved")
    if torch_struct is None:
        print("torch_struct is not importable: no torch-struct rows")
    for n in args.lengths:
        lengths = rng.integers(n // 2, n + 1, size=args.batch)
        lengths[0] = n
        pad = torch.as_tensor(np.arange(n)[None, :] >= lengths[:, None])
        syntax = SyntaxInputs(hints=random_hints(args.batch, n, lengths, rng))
        x = torch.randn(args.batch, n, args.d_model, requires_grad=True)
        source = torch.randn(args.batch, n, args.d_model, requires_grad=True)
        times: dict[str, list[float]] = {name: [] for name in modules}
        for rep in range(args.warmup + args.repeats):
            for name, module in modules.items():
                kind, backend = specs[name][:2]
                if backend and rep >= args.warmup + args.crf_repeats:
                    continue
                module.zero_grad(set_to_none=True)
                seconds = step(module, kind, x, source, pad, syntax)
                if rep >= args.warmup:
                    times[name].append(seconds)
        base = {kind: statistics.median(times[f"plain {kind}"]) for kind in ("self", "causal", "cross")}
        medians = {name: statistics.median(values) for name, values in times.items()}
        print(f"\nn = {n} (lengths {lengths.min()}..{lengths.max()})")
        print(f"{'variant':<34}{'median ms':>11}{'vs plain':>10}{'torch-struct / ours':>21}")
        for name, med in medians.items():
            kind, backend = specs[name][:2]
            peer = medians.get(name.replace("[synattn]", "[torch-struct]")) if backend == "synattn" else None
            versus = f"{peer / med:>20.2f}x" if peer else ""
            print(f"{name:<34}{1000 * med:>11.1f}{med / base[kind]:>9.2f}x{versus}")
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, {cpu_name()}, "
          f"{platform.platform()}"
          + (f", torch-struct {getattr(torch_struct, '__version__', '0.5')}" if torch_struct else ""))


if __name__ == "__main__":
    main()
