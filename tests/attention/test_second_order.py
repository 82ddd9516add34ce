"""Second-order syntactic attention: the arc marginals of the sibling CRF as a head's attention."""

from __future__ import annotations

import pytest
import torch

from synattn.attention import SyntacticAttention
from synattn.attention.core import MultiheadAttention
from synattn.structs import Dependency2oCRF
from tests.helpers.second_order import brute_force
from tests.helpers.structured import second_order_layer

D, H = 8, 2


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
