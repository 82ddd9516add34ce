"""Segmentation and syntactic attention (docs/methods.md §5) against brute-force enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.attention.cache import KVCache
from synattn.attention.core import MultiheadAttention
from synattn.attention.structured import SegmentationAttention, SyntacticAttention
from tests.helpers.structured import (
    SRC_PAD,
    D,
    H,
    assert_bidirectional_self_attention_only,
    bilinear_scores,
    output_from_weights,
    seg_layer,
    syn_layer,
)


def brute_chain(theta, pairwise):
    """p(z_i = 1) of one binary chain by enumerating all 2^L labelings."""
    length = theta.shape[0]
    log_weights, labelings = [], list(itertools.product([0, 1], repeat=length))
    for z in labelings:
        score = sum(theta[i] * z[i] for i in range(length))
        score = score + sum(pairwise[z[i - 1], z[i]] for i in range(1, length))
        log_weights.append(score)
    p = torch.softmax(torch.stack(log_weights), 0)
    return torch.stack([sum(p[k] for k, z in enumerate(labelings) if z[i]) for i in range(length)])


@pytest.mark.parametrize("normalize", [False, True])
def test_segmentation_weights_are_brute_force_marginals(normalize):
    attn, feature = seg_layer(normalize=normalize)
    x = torch.randn(3, 2, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    out, extras = attn(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    theta = bilinear_scores(attn, x, context)  # [B, H, n, m]
    expected = torch.zeros_like(theta)
    for b, length in enumerate([4, 2, 1]):
        for h in range(H):
            for i in range(2):
                p = brute_chain(theta[b, h, i, :length], feature.pairwise[h].detach())
                expected[b, h, i, :length] = 2 * p / p.sum() if normalize else p
    torch.testing.assert_close(extras.probs, expected)
    torch.testing.assert_close(out, output_from_weights(attn, expected, context))
    fresh, _ = attn(x, context=context, key_padding_mask=SRC_PAD)  # without need_weights
    torch.testing.assert_close(fresh, out)


def test_sigmoid_baseline_and_zero_pairwise():
    attn, _ = seg_layer("sigmoid")
    x = torch.randn(3, 2, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    _, extras = attn(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    expected = torch.sigmoid(bilinear_scores(attn, x, context)) * ~SRC_PAD[:, None, None, :]
    torch.testing.assert_close(extras.probs, expected)
    # a structured layer whose pairwise table is 0 (its initial state) is the sigmoid baseline
    torch.manual_seed(0)
    structured = MultiheadAttention(D, H, features=[SegmentationAttention(H)]).double()
    structured.load_state_dict(attn.state_dict(), strict=False)
    _, same = structured(x, context=context, key_padding_mask=SRC_PAD, need_weights=True)
    torch.testing.assert_close(same.probs, expected)


def test_segmentation_gradcheck_padding_and_length_one():
    attn, feature = seg_layer(seed=1)
    x = torch.randn(2, 2, D, dtype=torch.float64, requires_grad=True)
    context = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False] * 3, [False, True, True]])

    assert torch.autograd.gradcheck(lambda a, c: attn(a, context=c, key_padding_mask=pad)[0],
                                    (x, context))
    out, extras = attn(x, context=context, key_padding_mask=pad, need_weights=True)
    assert (extras.probs[1, :, :, 1:] == 0).all()
    grads = torch.autograd.grad(out.sum(), [feature.pairwise, context])
    assert grads[0].abs().sum() > 0 and (grads[1][1, 1:] == 0).all()  # padding gets no gradient
    # a one-position source gives the sigmoid of its score, finite weights and gradients
    src = torch.randn(2, 1, D, dtype=torch.float64, requires_grad=True)
    out, extras = attn(x, context=src, need_weights=True)
    (g,) = torch.autograd.grad(out.sum(), [src])
    assert torch.isfinite(out).all() and torch.isfinite(g).all()
    torch.testing.assert_close(extras.probs, torch.sigmoid(bilinear_scores(attn, x, src)))


def test_segmentation_with_static_cache_equals_full():
    attn, _ = seg_layer(seed=2)
    x = torch.randn(3, 3, D, dtype=torch.float64)
    context = torch.randn(3, 4, D, dtype=torch.float64)
    full, _ = attn(x, context=context, key_padding_mask=SRC_PAD)
    cache = KVCache()
    steps = [attn(x[:, t:t + 1], context=context, key_padding_mask=SRC_PAD, cache=cache)[0]
             for t in range(3)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


# --------------------------------------------------------------------------------------------
# syntactic attention


def all_trees(n: int, projective: bool, multiroot: bool):
    """Every head assignment ``heads[d − 1] ∈ 0..n`` of words 1..n that is a tree of the kind."""
    for heads in itertools.product(range(n + 1), repeat=n):
        parent = (0,) + heads
        if any(parent[d] == d for d in range(1, n + 1)):
            continue
        roots = sum(h == 0 for h in heads)
        if roots == 0 or (not multiroot and roots > 1):
            continue

        def ancestors(d, parent=parent):
            seen = []
            while d != 0 and d not in seen:
                seen.append(d)
                d = parent[d]
            return seen if d == 0 else None

        chains = [ancestors(d) for d in range(1, n + 1)]
        if any(c is None for c in chains):
            continue  # a cycle
        if projective:
            def dominated(h, w, chains=chains):  # h is an ancestor of w (ROOT dominates every word)
                return h == 0 or h in chains[w - 1]
            if any(not dominated(parent[d], w)
                   for d in range(1, n + 1)
                   for w in range(min(parent[d], d) + 1, max(parent[d], d))):
                continue
        yield parent


def brute_arcs(scores, n: int, projective: bool, multiroot: bool):
    """Arc marginals ``[n + 1, n + 1]`` (head, dependent) by enumerating every tree."""
    trees = list(all_trees(n, projective, multiroot))
    log_weights = torch.stack([sum(scores[t[d], d] for d in range(1, n + 1)) for t in trees])
    p = torch.softmax(log_weights, 0)
    marg = torch.zeros(n + 1, n + 1, dtype=scores.dtype)
    for k, t in enumerate(trees):
        for d in range(1, n + 1):
            marg[t[d], d] += p[k]
    return marg


KINDS = [("projective", False), ("projective", True), ("nonprojective", False),
         ("nonprojective", True)]


def test_brute_force_tree_counts():
    # Catalan-like counts of projective trees and Cayley's (n + 1)^(n − 1) arborescences
    assert len(list(all_trees(3, True, False))) == 7
    assert len(list(all_trees(3, True, True))) == 12
    assert len(list(all_trees(3, False, True))) == 16
    assert len(list(all_trees(3, False, False))) == 9


@pytest.mark.parametrize("tree,multiroot", KINDS)
def test_syntactic_weights_are_brute_force_arc_marginals(tree, multiroot):
    attn, feature = syn_layer(tree, multiroot, children_head=0)
    lengths = [4, 2, 1]
    x = torch.randn(3, 4, D, dtype=torch.float64)
    pad = torch.arange(4)[None, :] >= torch.tensor(lengths)[:, None]
    out, extras = attn(x, key_padding_mask=pad, need_weights=True)
    scores = feature.scorer(x).detach()  # [B, 5, 5]
    expected = torch.zeros(3, H, 4, 4, dtype=torch.float64)
    for b, n in enumerate(lengths):
        marg = brute_arcs(scores[b], n, tree == "projective", multiroot)[1:, 1:]  # [n, n]
        expected[b, 1, :n, :n] = marg.t()  # parent head: row j holds p(i → j)
        expected[b, 0, :n, :n] = marg  # children head: row j holds p(j → i)
    torch.testing.assert_close(extras.probs, expected)
    torch.testing.assert_close(out, output_from_weights(attn, expected, x))


def test_syntactic_other_heads_unchanged_and_parse_scores_matter():
    attn, feature = syn_layer("projective", False)
    plain = MultiheadAttention(D, H).double()
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if not k.startswith("features")})
    x = torch.randn(2, 5, D, dtype=torch.float64)
    _, extras = attn(x, need_weights=True)
    _, base = plain(x, need_weights=True)
    torch.testing.assert_close(extras.probs[:, 0], base.probs[:, 0])
    assert not torch.allclose(extras.probs[:, 1], base.probs[:, 1])


@pytest.mark.parametrize("tree,multiroot", [("projective", False), ("nonprojective", True)])
def test_syntactic_gradcheck(tree, multiroot):
    attn, _ = syn_layer(tree, multiroot, children_head=0, seed=3)
    x = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False] * 3, [False, False, True]])
    assert torch.autograd.gradcheck(lambda a: attn(a, key_padding_mask=pad)[0], (x,))


@pytest.mark.parametrize("tree,multiroot", KINDS)
def test_syntactic_length_one_has_no_nan(tree, multiroot):
    attn, feature = syn_layer(tree, multiroot, children_head=0)
    x = torch.randn(2, 1, D, dtype=torch.float64, requires_grad=True)
    out, extras = attn(x, need_weights=True)
    (g,) = torch.autograd.grad(out.sum(), [x])
    assert torch.isfinite(out).all() and torch.isfinite(g).all()
    assert (extras.probs[:, :2] == 0).all()  # the only word hangs from ROOT: no parent, no child
    # float32, padded batch with a length-1 sentence
    attn = attn.float()
    x = torch.randn(2, 3, D)
    pad = torch.tensor([[False] * 3, [False, True, True]])
    out, extras = attn(x, key_padding_mask=pad, need_weights=True)
    assert torch.isfinite(out).all() and (extras.probs[1, :2] == 0).all()


def test_syntactic_rejections():
    attn, _ = syn_layer("projective", False)
    x = torch.randn(1, 3, D, dtype=torch.float64)
    assert_bidirectional_self_attention_only(attn, x)
    with pytest.raises(ValueError, match="both head 1"):
        SyntacticAttention(D, head=1, children_head=1)
    with pytest.raises(ValueError, match="end of each"):
        attn(x, key_padding_mask=torch.tensor([[True, False, False]]))
