"""A pair-by-pair reference of the Tree Transformer's constituent attention (docs/methods.md §3)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from synattn.attention.core import MultiheadAttention
from synattn.methods.constituent import ConstituentAttention

D, H = 8, 2


def reference_links(feature: ConstituentAttention, x, length: int, prior=None):
    """a^l of one sentence ``x [n, d]`` written out word by word (softmax over existing neighbours)."""
    d = x.shape[-1]

    def score(i, j):  # q_i · k_j / (d / 2) as the bilinear form x_i M x_j + w · x_j
        return (x[i] @ feature.bilinear @ x[j] + feature.key_bias @ x[j]) / (d / 2)

    def p(i, j):  # probability that i links to its neighbour j among its neighbours
        neighbours = [t for t in (i - 1, i + 1) if 0 <= t < length]
        scores = torch.stack([score(i, t) for t in neighbours])
        return torch.softmax(scores, 0)[neighbours.index(j)]

    a = []
    for i in range(length - 1):
        a_hat = torch.sqrt(p(i, i + 1) * p(i + 1, i) + 1e-9)
        a.append(a_hat if prior is None else prior[i] + (1 - prior[i]) * a_hat)
    return torch.stack(a) if a else x.new_zeros(0)


def reference_prior(a, length: int):
    """C_ij = product of a_k for k from min(i, j) to max(i, j) − 1, by explicit products."""
    c = torch.zeros(length, length, dtype=a.dtype)
    for i in range(length):
        for j in range(length):
            lo, hi = min(i, j), max(i, j)
            c[i, j] = torch.prod(a[lo:hi]) if hi > lo else 1.0
    return c


def reference_output(attn: MultiheadAttention, feature, x, length: int, prior=None):
    """Output ``[length, d]`` of one unpadded sentence: E = C ⊙ softmax(q kᵀ / sqrt(d_k))."""
    x = x[:length]
    dk = attn.head_dim
    q, k, v = (F.linear(x, lin.weight, lin.bias).view(length, H, dk).transpose(0, 1)
               for lin in (attn.q_proj, attn.k_proj, attn.v_proj))
    a = reference_links(feature, x, length, prior)
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dk), -1) * reference_prior(a, length)
    mixed = (probs @ v).transpose(0, 1).reshape(length, D)
    return F.linear(mixed, attn.out_proj.weight, attn.out_proj.bias), a
