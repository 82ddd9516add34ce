"""Forward+backward time of one attention layer with each feature, against plain attention.

Usage::

    python benchmarks/bench_attention.py [--batch 16] [--lengths 64 128] [--d-model 512]
        [--heads 8] [--threads 2] [--repeats 20] [--crf-repeats 5] [--only tree|structured]
        [--quick] [--device cpu|cuda]

``--quick`` changes the defaults to B = 8, n = 32, d = 256, 5 repeats (2 with a CRF) and 1
warm-up: ``--only structured --quick`` takes a few minutes on two cores.

Prints, per sequence length, the median milliseconds of forward + backward of one
``MultiheadAttention`` layer (fp32, on ``--device``: CPU by default; on CUDA each timing
synchronises the device before it starts and before it stops) and the ratio to the plain layer of
the same kind measured in the same run, then machine info.

- Bidirectional self-attention (baseline: plain, fused SDPA): Shaw relative positions (k = 16,
  key + value embeddings), tree distance (max 8), tree traversal (max 4), tree distance + Shaw,
  the dependency-supervised head, a specialized POS head, the naive tree bias that materialises
  the ``[B, n, n, d_k]`` key and value embeddings (the textbook formulation our label-gather
  replaces), once with einsum and once by broadcasting (``[B, H, n, n, d_k]``); constituent
  attention (Tree Transformer, docs/methods.md §3); syntactic attention (§5), projective and
  non-projective.
- Causal self-attention (baseline: plain causal): BET(SG) and BET(SF) (§4).
- Cross-attention, target and source of length n (baseline: plain cross): segmentation attention
  and its sigmoid baseline (§5).
- Span attention (a tree CRF per query, ``synattn.attention.span``), self-attention, up to
  ``n = 64`` (``n = 32`` on torch-struct): it solves B·n CRFs of n words. Use ``--lengths 32 64``.

Segmentation, syntactic and span attention run three ways, only the CRF swapped: on
``synattn.structs`` with its default backend (compiled kernels on CPU when numba is installed), on
its pure-PyTorch backend (``[synattn, torch]``), and, when ``torch_struct`` is importable, on
torch-struct's ``LinearChainCRF`` / ``DependencyCRF`` / ``NonProjectiveDependencyCRF`` /
``TreeCRF``; the last column gives torch-struct's time over ours. Before timing, the layers on
torch-struct are checked to give the same attention as ours. The batch has random trees and lengths
between n/2 and n (padding mask on). Timings on a shared machine are noisy: the repeats are
interleaved across variants so that load changes hit every variant alike (the CRF variants get
``--crf-repeats``); the median is the headline number, the minimum (least disturbed by other
processes) is printed beside it.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from synattn.attention import MultiheadAttention, SyntaxInputs
from synattn.attention.span import SpanAttention
from synattn.methods.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer
from synattn.methods.constituent import ConstituentAttention
from synattn.methods.cross_attention import SegmentationAttention
from synattn.methods.relations import RelativePositions, TreeRelations
from synattn.methods.specialized import SpecializedHeads
from synattn.methods.supervised import SupervisedHead
from synattn.methods.syntactic import SyntacticAttention
from synattn.structs.backend import use_backend
from synattn.trees.relations import (
    batch_distance_labels,
    batch_syntax_hints,
    batch_traversal_labels,
    distance_vocab,
    head_targets,
    traversal_vocab,
)

from device import add_device_argument, check_device, device_info, synchronize
from machine import cpu_name

try:
    import torch_struct
except ImportError:  # the comparison is optional
    torch_struct = None
# (torch-struct's distributions do not declare arg_constraints: one warning per instance)
warnings.filterwarnings("ignore", message=".*does not define `arg_constraints`")


class NaiveTreeAttention(nn.Module):
    """Tree-distance attention written the textbook way: ``a^K[r]`` materialised as [B, n, n, d_k].

    With ``broadcast=True`` the products are formed by broadcasting, which materialises
    ``[B, H, n, n, d_k]`` (the form docs/methods.md §1 rules out); otherwise by einsum over [B, n, n, d_k].
    """

    def __init__(self, d_model: int, heads: int, num_labels: int, broadcast: bool = False):
        super().__init__()
        self.broadcast = broadcast
        self.heads, self.head_dim = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.key_table = nn.Embedding(num_labels, self.head_dim)
        self.value_table = nn.Embedding(num_labels, self.head_dim)

    def forward(self, x, key_padding_mask, labels):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a_k = self.key_table(labels.long())  # [B, n, n, d_k] materialised
        a_v = self.value_table(labels.long())  # [B, n, n, d_k] materialised
        if self.broadcast:
            rel = (q[:, :, :, None, :] * a_k[:, None]).sum(-1)  # [B, H, n, n, d_k] summed
        else:
            rel = torch.einsum("bhid,bijd->bhij", q, a_k)  # [B, H, n, n]
        logits = (q @ k.transpose(-1, -2) + rel) / math.sqrt(self.head_dim)
        logits = logits.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(logits.dtype).min)
        probs = torch.softmax(logits, -1)
        if self.broadcast:
            rel = (probs[..., None] * a_v[:, None]).sum(-2)  # [B, H, n, n, d_k] summed
        else:
            rel = torch.einsum("bhij,bijd->bhid", probs, a_v)  # [B, H, n, d_k]
        out = probs @ v + rel
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d)), None


def random_batch(batch: int, n: int, rng: np.random.Generator):
    """Random trees with lengths in [n/2, n]: syntax inputs of every feature and the padding mask."""
    lengths = rng.integers(n // 2, n + 1, size=batch)
    lengths[0] = n
    heads = np.zeros((batch, n), dtype=np.int64)
    targets = np.full((batch, n), -100, dtype=np.int64)
    for b, length in enumerate(lengths):
        order = rng.permutation(length)
        for rank, word in enumerate(order[1:], start=1):
            heads[b, word] = order[rng.integers(0, rank)] + 1
        targets[b, :length] = head_targets(heads[b, :length])
    syntax = SyntaxInputs(tree_dist=torch.as_tensor(batch_distance_labels(heads, lengths, 8)),
                          traversal=torch.as_tensor(batch_traversal_labels(heads, lengths, 4)),
                          pos=torch.as_tensor(rng.integers(0, 17, size=(batch, n))),
                          head_targets=torch.as_tensor(targets),
                          hints=torch.as_tensor(batch_syntax_hints(heads, lengths)))
    pad = torch.as_tensor(np.arange(n)[None, :] >= lengths[:, None])
    return syntax, pad, lengths


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
        eye = torch.eye(n, dtype=torch.bool, device=scores.device)
        words = scores[:, 1:, 1:]
        potentials = torch.where(eye, scores[:, :1, 1:].expand_as(words), words)  # [B, n, n]
        kind = (torch_struct.DependencyCRF if self.tree == "projective"
                else torch_struct.NonProjectiveDependencyCRF)
        marg = kind(potentials, lengths=lengths, multiroot=self.multiroot).marginals  # [B, n, n]
        out = marg.new_zeros(scores.shape)
        out[:, 0, 1:] = marg.diagonal(0, 1, 2)
        out[:, 1:, 1:] = marg.masked_fill(eye, 0.0)
        return out


class TorchStructSpan(SpanAttention):
    """Span marginals from torch-struct's TreeCRF (one label: ``[K, m, m, 1]``)."""

    def span_marginals(self, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        upper = torch.ones(scores.shape[-1], scores.shape[-1], dtype=torch.bool,
                           device=scores.device).triu()
        return torch_struct.TreeCRF(scores.unsqueeze(-1), lengths=lengths).marginals[..., 0] * upper


SPAN_MAX_N = {"synattn": 64, "synattn, torch": 64, "torch-struct": 32}
"""Span attention solves B·n tree CRFs of n words (O(B·n⁴)): its rows stop at these lengths
(torch-struct's at n = 32: at 64 one step takes minutes and gigabytes)."""

Spec = tuple[str, str, Callable[[], nn.Module]]
"""(attention kind: self / causal / cross, CRF backend or "", constructor)."""


def tree_variants(d: int, h: int) -> dict[str, Spec]:
    """docs/methods.md §1–§2: relative positions, tree relations, supervised and specialized heads."""
    dk = d // h
    n_dist, n_trav = len(distance_vocab(8)), len(traversal_vocab(4))
    tree_dist = lambda: TreeRelations("tree_dist", n_dist, dk)  # noqa: E731
    return {
        "shaw k=16": ("self", "", lambda: MultiheadAttention(d, h, features=[RelativePositions(16, dk)])),
        "tree distance": ("self", "", lambda: MultiheadAttention(d, h, features=[tree_dist()])),
        "tree traversal": ("self", "", lambda: MultiheadAttention(
            d, h, features=[TreeRelations("traversal", n_trav, dk)])),
        "tree distance + shaw": ("self", "", lambda: MultiheadAttention(
            d, h, features=[tree_dist(), RelativePositions(16, dk)])),
        "supervised head": ("self", "", lambda: MultiheadAttention(d, h, features=[SupervisedHead(dk)])),
        "specialized head": ("self", "", lambda: MultiheadAttention(
            d, h, features=[SpecializedHeads(17, dk)])),
        "naive tree distance": ("self", "", lambda: NaiveTreeAttention(d, h, n_dist)),
        "naive, [B,H,n,n,d_k]": ("self", "", lambda: NaiveTreeAttention(d, h, n_dist, broadcast=True)),
    }


def structured_variants(d: int, h: int) -> dict[str, Spec]:
    """docs/methods.md §3–§5: constituent, Bird-Eye, segmentation and syntactic attention."""
    out: dict[str, Spec] = {
        "constituent": ("self", "", lambda: MultiheadAttention(
            d, h, features=[ConstituentAttention(d, 0)])),
        "BET(SG)": ("causal", "", lambda: MultiheadAttention(d, h, features=[SyntaxGuidedPointer()])),
        "BET(SF)": ("causal", "", lambda: MultiheadAttention(d, h, features=[BirdEyeReweighting(d, h)])),
        "sigmoid (seg. baseline)": ("cross", "", lambda: MultiheadAttention(
            d, h, features=[SegmentationAttention(h, "sigmoid")])),
    }
    backends = [("synattn", SegmentationAttention, SyntacticAttention, SpanAttention),
                ("synattn, torch", SegmentationAttention, SyntacticAttention, SpanAttention)]
    if torch_struct is not None:
        backends.append(("torch-struct", TorchStructSegmentation, TorchStructSyntactic,
                         TorchStructSpan))
    for backend, seg, syn, span in backends:
        out[f"segmentation [{backend}]"] = ("cross", backend, lambda seg=seg: MultiheadAttention(
            d, h, features=[seg(h)]))
        out[f"syntactic proj. [{backend}]"] = ("self", backend, lambda syn=syn: MultiheadAttention(
            d, h, features=[syn(d, tree="projective")]))
        out[f"syntactic non-proj. [{backend}]"] = ("self", backend, lambda syn=syn: MultiheadAttention(
            d, h, features=[syn(d, tree="nonprojective", multiroot=True)]))
        out[f"span [{backend}]"] = ("self", backend, lambda span=span: MultiheadAttention(
            d, h, features=[span(d // h)]))
    return out


def variants(d: int, h: int, only: str | None) -> dict[str, Spec]:
    plain: dict[str, Spec] = {f"plain {kind}": (kind, "", lambda: MultiheadAttention(d, h))
                              for kind in ("self", "causal", "cross")}
    if only == "tree":
        return {"plain self": plain["plain self"], **tree_variants(d, h)}
    if only == "structured":
        return {**plain, **structured_variants(d, h)}
    return {**plain, **tree_variants(d, h), **structured_variants(d, h)}


def check(d: int, h: int) -> None:
    """Ours and torch-struct's layers give the same attention on a small padded batch (not timed)."""
    if torch_struct is None:
        return
    x, source = torch.randn(3, 6, d), torch.randn(3, 7, d)
    pairs = [(SegmentationAttention(h), TorchStructSegmentation(h), "cross"),
             (SyntacticAttention(d, tree="projective"), TorchStructSyntactic(d, tree="projective"), "self"),
             (SpanAttention(d // h), TorchStructSpan(d // h), "self")]
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


def step(module: nn.Module, kind: str, backend: str, x: torch.Tensor, source: torch.Tensor,
         pad: torch.Tensor, syntax: SyntaxInputs) -> float:
    """Seconds of one forward + backward (the device synchronised before and after)."""
    synchronize(x.device)
    start = time.perf_counter()
    with use_backend("torch" if backend == "synattn, torch" else "auto"):
        if isinstance(module, NaiveTreeAttention):
            out, extras = module(x, pad, syntax.tree_dist)[0], None
        elif kind == "cross":
            out, extras = module(x, context=source, key_padding_mask=pad)
        else:
            out, extras = module(x, key_padding_mask=pad, causal=kind == "causal", syntax=syntax)
        loss = out.square().mean()
        if extras is not None:
            loss = loss + sum(extras.losses.values(), torch.zeros((), device=loss.device))
        loss.backward()
    synchronize(x.device)
    return time.perf_counter() - start


FULL = {"batch": 16, "lengths": [64, 128], "d_model": 512, "repeats": 20, "crf_repeats": 5,
        "warmup": 2}
QUICK = {"batch": 8, "lengths": [32], "d_model": 256, "repeats": 5, "crf_repeats": 2, "warmup": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int)
    parser.add_argument("--lengths", type=int, nargs="+")
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--crf-repeats", type=int,
                        help="repeats of the variants with a CRF (slow on torch-struct)")
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--only", choices=("tree", "structured"),
                        help="only the features of docs/methods.md §1–§2 (tree) or §3–§5 (structured)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a few minutes: defaults {QUICK} instead of {FULL}")
    add_device_argument(parser)
    args = parser.parse_args()
    device = check_device(parser, args.device)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if args.only != "tree":
        check(16, 4)
    specs = variants(args.d_model, args.heads, args.only)
    modules = {name: make().to(device) for name, (_, _, make) in specs.items()}
    print(f"one attention layer, forward+backward, fp32 on {device_info(device)}, B={args.batch}, d={args.d_model}, "
          f"H={args.heads}, median of {args.repeats} ({args.crf_repeats} with a CRF), interleaved")
    if torch_struct is None and args.only != "tree":
        print("torch_struct is not importable: no torch-struct rows")
    for n in args.lengths:
        syntax, pad, lengths = random_batch(args.batch, n, rng)
        syntax, pad = syntax.to(device), pad.to(device)
        x = torch.randn(args.batch, n, args.d_model, device=device, requires_grad=True)
        source = torch.randn(args.batch, n, args.d_model, device=device, requires_grad=True)
        times: dict[str, list[float]] = {name: [] for name in modules}
        for rep in range(args.warmup + args.repeats):
            for name, module in modules.items():
                kind, backend = specs[name][:2]
                if backend and rep >= args.warmup + args.crf_repeats:
                    continue
                if name.startswith("span") and n > SPAN_MAX_N[backend]:
                    continue
                module.zero_grad(set_to_none=True)
                seconds = step(module, kind, backend, x, source, pad, syntax)
                if rep >= args.warmup:
                    times[name].append(seconds)
        medians = {name: statistics.median(values) for name, values in times.items() if values}
        lows = {name: min(values) for name, values in times.items() if values}
        print(f"\nn = {n} (lengths {lengths.min()}..{lengths.max()})")
        print(f"{'variant':<38}{'median ms':>11}{'vs plain':>10}{'min ms':>9}{'vs plain':>10}"
              f"{'torch-struct / ours':>21}")
        for name, med in medians.items():
            kind, backend = specs[name][:2]
            base, base_low = medians[f"plain {kind}"], lows[f"plain {kind}"]
            peer = (medians.get(name.replace(f"[{backend}]", "[torch-struct]")) if backend.startswith("synattn")
                    else None)
            versus = f"{peer / med:>20.2f}x" if peer else ""
            print(f"{name:<38}{1000 * med:>11.1f}{med / base:>9.2f}x{1000 * lows[name]:>9.1f}"
                  f"{lows[name] / base_low:>9.2f}x{versus}")
        if "tree distance" in medians:
            ours = medians["tree distance"]
            for name in ("naive tree distance", "naive, [B,H,n,n,d_k]"):
                print(f"{name} / ours (tree distance): {medians[name] / ours:.2f}x")
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, {cpu_name()}, "
          f"{platform.platform()}"
          + (f", torch-struct {getattr(torch_struct, '__version__', '0.5')}" if torch_struct else ""))


if __name__ == "__main__":
    main()
