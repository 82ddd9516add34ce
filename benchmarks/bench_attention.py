"""Forward+backward time of one attention layer with each feature, against plain SDPA attention.

Usage::

    python benchmarks/bench_attention.py [--batch 16] [--lengths 64 128] [--d-model 512]
        [--heads 8] [--threads 2] [--repeats 20]

Prints, per sequence length, the median milliseconds of forward + backward of one
``MultiheadAttention`` layer (fp32, CPU unless ``--device``) and the ratio to the plain baseline
measured in the same run, then machine info. Variants: plain (fused SDPA), Shaw relative
positions (k = 16, key + value embeddings), tree distance (max 8), tree traversal (max 4), tree
distance + Shaw, the dependency-supervised head, a specialized POS head, and the naive tree bias
that materialises the ``[B, n, n, d_k]`` key and value embeddings (the textbook formulation our
label-gather replaces), once with einsum and once by broadcasting (``[B, H, n, n, d_k]``). The batch has random trees and lengths between n/2 and n (padding mask
on). Timings on a shared machine are noisy: the repeats are interleaved across variants so that
load changes hit every variant alike; the median is the headline number, the minimum (least
disturbed by other processes) is printed beside it.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import numpy as np
import torch
from torch import nn

from synattn.attention import (MultiheadAttention, RelativePositions, SpecializedHeads,
                               SupervisedHead, SyntaxInputs, TreeRelations)
from synattn.trees.relations import (batch_distance_labels, batch_traversal_labels,
                                     distance_vocab, head_targets, traversal_vocab)
from machine import cpu_name


class NaiveTreeAttention(nn.Module):
    """Tree-distance attention written the textbook way: ``a^K[r]`` materialised as [B, n, n, d_k].

    With ``broadcast=True`` the products are formed by broadcasting, which materialises
    ``[B, H, n, n, d_k]`` (the form METHODS §1 rules out); otherwise by einsum over [B, n, n, d_k].
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
    """Random trees (heads [B, n], padded) with lengths in [n/2, n]."""
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
                          head_targets=torch.as_tensor(targets))
    pad = torch.as_tensor(np.arange(n)[None, :] >= lengths[:, None])
    return syntax, pad


def variants(d: int, h: int) -> dict[str, nn.Module]:
    dk = d // h
    n_dist, n_trav = len(distance_vocab(8)), len(traversal_vocab(4))
    return {
        "plain (SDPA)": MultiheadAttention(d, h),
        "shaw k=16": MultiheadAttention(d, h, features=[RelativePositions(16, dk)]),
        "tree distance": MultiheadAttention(d, h, features=[TreeRelations("tree_dist", n_dist, dk)]),
        "tree traversal": MultiheadAttention(d, h, features=[TreeRelations("traversal", n_trav, dk)]),
        "tree distance + shaw": MultiheadAttention(
            d, h, features=[TreeRelations("tree_dist", n_dist, dk), RelativePositions(16, dk)]),
        "supervised head": MultiheadAttention(d, h, features=[SupervisedHead(dk)]),
        "specialized head": MultiheadAttention(d, h, features=[SpecializedHeads(17, dk)]),
        "naive tree distance": NaiveTreeAttention(d, h, n_dist),
        "naive, [B,H,n,n,d_k]": NaiveTreeAttention(d, h, n_dist, broadcast=True),
    }


def step(module: nn.Module, x: torch.Tensor, pad: torch.Tensor, syntax: SyntaxInputs) -> float:
    """Seconds of one forward + backward."""
    start = time.perf_counter()
    if isinstance(module, NaiveTreeAttention):
        out, _ = module(x, pad, syntax.tree_dist)
        loss = out.square().mean()
    else:
        out, extras = module(x, key_padding_mask=pad, syntax=syntax)
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
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    modules = variants(args.d_model, args.heads)
    print(f"one attention layer, forward+backward, fp32, B={args.batch}, d={args.d_model}, "
          f"H={args.heads}, median of {args.repeats} (interleaved)")
    for n in args.lengths:
        syntax, pad = random_batch(args.batch, n, rng)
        x = torch.randn(args.batch, n, args.d_model, requires_grad=True)
        times: dict[str, list[float]] = {name: [] for name in modules}
        for rep in range(args.warmup + args.repeats):
            for name, module in modules.items():
                module.zero_grad(set_to_none=True)
                seconds = step(module, x, pad, syntax)
                if rep >= args.warmup:
                    times[name].append(seconds)
        base = statistics.median(times["plain (SDPA)"])
        ours = statistics.median(times["tree distance"])
        print(f"\nn = {n}")
        base_min = min(times["plain (SDPA)"])
        print(f"{'variant':<24}{'median ms':>12}{'vs plain':>10}{'min ms':>10}{'vs plain':>10}")
        for name, values in times.items():
            med, low = statistics.median(values), min(values)
            print(f"{name:<24}{1000 * med:>12.1f}{med / base:>9.2f}x{1000 * low:>10.1f}{low / base_min:>9.2f}x")
        for name in ("naive tree distance", "naive, [B,H,n,n,d_k]"):
            print(f"{name} / ours (tree distance): {statistics.median(times[name]) / ours:.2f}x")
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, {cpu_name()}, "
          f"{platform.platform()}")


if __name__ == "__main__":
    main()
