"""Segmentations by enumeration: every labelled segmentation of a tiny sentence."""

from __future__ import annotations

import itertools

import torch


def structures(L: int, K: int, C: int, n: int) -> torch.Tensor:
    """``[S, n]`` every compact labelling of a sequence of ``L`` positions (padded to ``n``)."""
    def compositions(rest):
        if rest == 0:
            yield []
            return
        for k in range(1, min(K - 1, rest) + 1):
            for tail in compositions(rest - k):
                yield [k, *tail]

    out = []
    for widths in compositions(L - 1):
        for labels in itertools.product(range(C), repeat=len(widths) + 1):
            y, t = [labels[0]] + [-1] * (n - 1), 0
            for k, c in zip(widths, labels[1:]):
                t += k
                y[t] = c
            out.append(y)
    return torch.tensor(out)
