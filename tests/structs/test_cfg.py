"""SentCFG (torch-struct's simple PCFG) against enumeration of every parse and torch-struct."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import SentCFG


def parses(terms, rules, i: int, j: int, sym: int, NT: int):
    """Every parse of words ``i..j`` rooted in ``sym`` as ``(score, term, rule counts)``."""
    if i == j:
        if sym < NT:
            return []
        t = torch.zeros_like(terms)
        t[i, sym - NT] = 1
        return [(terms[i, sym - NT], t, torch.zeros_like(rules))]
    if sym >= NT:
        return []
    out = []
    S = rules.shape[-1]
    for k in range(i, j):
        for y in range(S):
            for z in range(S):
                for sl, tl, rl in parses(terms, rules, i, k, y, NT):
                    for sr, tr, rr in parses(terms, rules, k + 1, j, z, NT):
                        r = rl + rr
                        r[sym, y, z] += 1
                        out.append((rules[sym, y, z] + sl + sr, tl + tr, r))
    return out


def brute(terms, rules, roots, n):
    NT = roots.shape[0]
    all_ = [(roots[x] + s, t, r, x) for x in range(NT) for s, t, r in parses(terms, rules, 0, n - 1, x, NT)]
    scores = torch.stack([a[0] for a in all_])
    log_z = scores.logsumexp(0)
    p = (scores - log_z).exp()
    mt = sum(q * a[1] for q, a in zip(p, all_))
    mr = sum(q * a[2] for q, a in zip(p, all_))
    mroot = torch.zeros_like(roots)
    for q, a in zip(p, all_):
        mroot[a[3]] += q
    return log_z, (mt, mr, mroot), scores


def rand(B, N, T, NT, seed):
    gen = torch.Generator().manual_seed(seed)
    S = NT + T
    return (torch.randn(B, N, T, generator=gen, dtype=torch.float64),
            torch.randn(B, NT, S, S, generator=gen, dtype=torch.float64),
            torch.randn(B, NT, generator=gen, dtype=torch.float64))


@settings(max_examples=6, deadline=None)
@given(lengths=st.lists(st.integers(2, 4), min_size=1, max_size=2), T=st.integers(1, 2),
       NT=st.integers(1, 2), seed=st.integers(0, 99))
def test_matches_enumeration_of_parses(lengths, T, NT, seed):
    terms, rules, roots = rand(len(lengths), max(lengths), T, NT, seed)
    cfg = SentCFG(terms, rules, roots, torch.tensor(lengths))
    for b, n in enumerate(lengths):
        log_z, (mt, mr, mroot), scores = brute(terms[b], rules[b], roots[b], n)
        assert torch.allclose(cfg.log_partition[b], log_z)
        assert torch.allclose(cfg.marginals[0][b], mt, atol=1e-9)
        assert torch.allclose(cfg.marginals[1][b], mr, atol=1e-9)
        assert torch.allclose(cfg.marginals[2][b], mroot, atol=1e-9)
        assert torch.allclose(cfg.max[b], scores.max())
        best = cfg.argmax
        assert torch.allclose(cfg.score(best)[b], scores.max())
        assert best[1][b].sum() == n - 1 and best[0][b].sum() == n and best[2][b].sum() == 1
        p = (scores - log_z).exp()
        assert torch.allclose(cfg.entropy[b], -(p * p.log()).sum(), atol=1e-9)
        assert torch.allclose(cfg.log_prob(best)[b], scores.max() - log_z)


def test_ties_give_one_parse_masks_and_errors():
    terms, rules, roots = (torch.zeros(1, 4, 2), torch.zeros(1, 2, 4, 4), torch.zeros(1, 2))
    best = SentCFG(terms, rules, roots).argmax  # every parse ties: still one parse's counts
    assert best[1].sum() == 3 and set(best[1].unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}
    roots = torch.full((1, 2), -float("inf"))
    none = SentCFG(terms, rules, roots)
    assert none.log_partition.item() == -float("inf") and none.argmax[1].sum() == 0
    with pytest.raises(ValueError, match="lengths must be"):
        SentCFG(torch.zeros(1, 4, 2), rules, torch.zeros(1, 2), torch.tensor([1]))
    with pytest.raises(ValueError, match="rules"):
        SentCFG(torch.zeros(1, 4, 2), torch.zeros(1, 2, 3, 3), torch.zeros(1, 2))


def test_matches_torch_struct():
    torch_struct = pytest.importorskip("torch_struct")
    terms, rules, roots = rand(3, 6, 3, 4, 0)
    lengths = torch.tensor([6, 4, 2])
    peer = torch_struct.SentCFG((terms, rules, roots), lengths)
    cfg = SentCFG(terms, rules, roots, lengths)
    assert torch.allclose(cfg.log_partition, peer.partition.detach())
    theirs = peer.marginals
    for ours, other in zip(cfg.marginals, theirs[:3]):
        assert torch.allclose(ours, other.detach(), atol=1e-8)
    best = peer.argmax
    for ours, other in zip(cfg.argmax, best[:3]):
        assert torch.allclose(ours, other.detach())
