"""Gradient checkpointing of a model with synattn features: the same loss and gradients as
without (float64, dropout on, the same random numbers)."""

import pytest
import torch

import synattn.hf as sh
from synattn.trees.relations import batch_relation_labels, batch_syntax_hints, head_targets
from tests.helpers.hf_models import bert, gpt2

# transformers 5 renames gradient_checkpointing_enable to activation_checkpointing_enable
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated and will be removed in v6")

HEADS = torch.tensor([[2, 0, 2, 3, 4, 5], [2, 0, 2, 3, 3, 5]])
FEATURES = {
    "bert": [{"feature": "relations", "relations": ["tree_distance"], "layers": [0]},
             {"feature": "constituent"},
             {"feature": "supervised_head", "layers": [1], "head": 2, "weight": 0.5}],
    "gpt2": [{"feature": "relations", "relations": ["traversal"], "side": "decoder"},
             {"feature": "bird_eye", "variant": "sg", "side": "decoder", "layers": [0]},
             {"feature": "supervised_head", "side": "decoder", "layers": [1]}],
}


def batch(name):
    torch.manual_seed(1)
    ids = torch.randint(5, 50, (2, 6))
    dist, trav = batch_relation_labels(HEADS)
    kw = {"input_ids": ids, "labels": ids if name == "gpt2" else torch.randint(0, 2, (2, 6)),
          "syntax_tree_dist": dist, "syntax_traversal": trav,
          "syntax_head_targets": head_targets(HEADS)}
    if name == "gpt2":
        kw["syntax_hints"] = batch_syntax_hints(HEADS)
    return kw


def loss_and_grads(model, name):
    model.zero_grad()
    torch.manual_seed(7)  # the same dropout masks in both runs
    out = model(**batch(name))
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach(), dict(out.synattn_losses), grads


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_checkpointing_gives_the_same_loss_and_gradients(name):
    torch.manual_seed(0)
    model = (bert(num_labels=2) if name == "bert" else gpt2()).double().train()
    sh.attach(model, FEATURES[name])
    loss, aux, grads = loss_and_grads(model, name)
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    loss_ckpt, aux_ckpt, grads_ckpt = loss_and_grads(model, name)
    assert set(aux) == set(aux_ckpt) and len(aux) == (2 if name == "gpt2" else 1)
    torch.testing.assert_close(loss_ckpt, loss, rtol=1e-12, atol=1e-12)
    assert grads.keys() == grads_ckpt.keys()
    assert any(n.startswith("synattn.") for n in grads)
    for n in grads:
        torch.testing.assert_close(grads_ckpt[n], grads[n], rtol=1e-10, atol=1e-12, msg=n)


def test_reentrant_checkpointing_is_refused():
    """use_reentrant=True runs the layers under no_grad: the auxiliary losses would have no
    gradient, so the forward says so instead of training the head silently not at all."""
    torch.manual_seed(0)
    model = bert(num_labels=2).train()
    sh.attach(model, FEATURES["bert"][2:])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    with pytest.raises(ValueError, match="use_reentrant=False"):
        model(**batch("bert"))
