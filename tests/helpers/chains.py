"""Linear chains by enumeration: every labelling of a tiny sentence."""

from __future__ import annotations

import itertools

import torch


def brute_force(unary: torch.Tensor, edge: torch.Tensor, n: int):
    """log Z, node marginals ``[n, C]``, pair marginals ``[n-1, C, C]``, best score, best labels."""
    C = unary.shape[-1]
    labellings = torch.tensor(list(itertools.product(range(C), repeat=n)))  # [C^n, n]
    pos = torch.arange(n)
    scores = unary[pos, labellings].sum(1)
    if n > 1:
        scores = scores + edge[pos[:-1], labellings[:, :-1], labellings[:, 1:]].sum(1)
    log_z = torch.logsumexp(scores, 0)
    prob = (scores - log_z).exp()
    node = torch.stack([(prob[:, None] * (labellings[:, i, None] == torch.arange(C))).sum(0)
                        for i in range(n)])
    pair = unary.new_zeros(max(n - 1, 0), C, C)
    for i in range(n - 1):
        pair[i].index_put_((labellings[:, i], labellings[:, i + 1]), prob, accumulate=True)
    return log_z, node, pair, scores.max(), labellings[scores.argmax()]
