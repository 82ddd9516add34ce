"""Syntactic attention (docs/methods.md §5) against brute-force enumeration of the trees, first and
second order (arcs and adjacent siblings), its gradients, and the config option in a model."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.attention.core import MultiheadAttention
from synattn.methods.syntactic import SyntacticAttention
from synattn.structs import Dependency2oCRF
from tests.helpers.second_order import brute_force
from tests.helpers.structured import (
    D,
    H,
    assert_bidirectional_self_attention_only,
    output_from_weights,
    second_order_layer,
    syn_layer,
)


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


# ------------------------------------------------------------------------------------------------
# second order: arcs and adjacent siblings


@pytest.mark.parametrize("multiroot", [False, True])
def test_rows_are_second_order_arc_marginals(multiroot):
    attn, feature = second_order_layer(multiroot)
    lengths = [4, 2, 1]
    x = torch.randn(3, 4, D, dtype=torch.float64)
    pad = torch.arange(4)[None, :] >= torch.tensor(lengths)[:, None]
    _, extras = attn(x, key_padding_mask=pad, need_weights=True)
    arcs, sibs = feature.scorer(x).detach(), feature.siblings(x).detach()
    assert sibs.abs().max() > 0.1  # the sibling scores matter
    expected = torch.zeros(3, H, 4, 4, dtype=torch.float64)
    for b, n in enumerate(lengths):
        marg = brute_force(arcs[b], sibs[b], n, multiroot)[1][1:n + 1, 1:n + 1]  # [n, n] (head, dependent)
        expected[b, 1, :n, :n] = marg.t()  # row j: p(i -> j)
        expected[b, 0, :n, :n] = marg
    torch.testing.assert_close(extras.probs, expected)
    # each dependent's parent row plus its ROOT arc sums to 1
    root = Dependency2oCRF(arcs, sibs, torch.tensor(lengths), multiroot).marginals[:, 0, 1:]
    valid = ~pad
    torch.testing.assert_close((extras.probs[:, 1].sum(-1) + root)[valid],
                               torch.ones(int(valid.sum()), dtype=torch.float64))


def test_fresh_layer_equals_first_order():
    torch.manual_seed(1)
    second = SyntacticAttention(D, head=1, tree="projective2o", arc_dim=4)
    first = SyntacticAttention(D, head=1, tree="projective", arc_dim=4)
    first.scorer.load_state_dict(second.scorer.state_dict())
    with torch.no_grad():
        first.scorer.bilinear.normal_()
        second.scorer.bilinear.copy_(first.scorer.bilinear)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    a = MultiheadAttention(D, H, features=[second]).double()
    b = MultiheadAttention(D, H, features=[first]).double()
    b.load_state_dict({k: v for k, v in a.state_dict().items() if "siblings" not in k})
    torch.testing.assert_close(a(x, need_weights=True)[1].probs, b(x, need_weights=True)[1].probs)


def test_forward_backward_reaches_the_sibling_scorer():
    attn, feature = second_order_layer(False, seed=3)
    x = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False] * 3, [False, False, True]])
    out, _ = attn(x, key_padding_mask=pad)
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert feature.siblings.weight.grad.abs().sum() > 0
    assert torch.autograd.gradcheck(lambda a: attn(a, key_padding_mask=pad)[0], (x.detach().requires_grad_(),))


def test_config_option_builds_a_model_that_trains():
    """``syntactic_attention: {tree: projective2o}`` in a model config: the layer has a sibling
    scorer, and one optimiser step changes its weights."""
    from synattn.data.batching import collate_examples
    from synattn.errors import ConfigError
    from synattn.train.tasks import TranslationTask
    from tests.helpers.models import copy_pairs, tiny_mt

    torch.manual_seed(2)
    model = tiny_mt(encoder=dict(layers=1, syntactic_attention=dict(tree="projective2o", arc_dim=4)),
                decoder=dict(layers=1))
    feature = model.encoder.layers[0].self_attn.features[0]
    assert isinstance(feature, SyntacticAttention) and feature.siblings is not None
    with torch.no_grad():
        feature.siblings.weight.fill_(0.5)
    before = feature.siblings.weight.detach().clone()
    loss, logs = TranslationTask(0.0).loss(model, collate_examples(copy_pairs(4, seed=1)))
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(feature.siblings.weight, before)
    with pytest.raises(ConfigError, match="tree='projective3o'"):
        tiny_mt(encoder=dict(layers=1, syntactic_attention=dict(tree="projective3o")))
