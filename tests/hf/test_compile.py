"""torch.compile of a model with synattn features runs on CPU and computes what eager computes
(logits, auxiliary losses, every gradient), on the first call and when the compiled graphs are
reused.

Slow: tracing takes seconds of CPU time (the features' Python control flow splits the model into
several graphs). The ``aot_eager`` backend (TorchDynamo + AOTAutograd, the kernels run eagerly)
always runs; ``inductor``, the default backend, compiles C++ kernels with the system compiler
(minutes of CPU for these tiny models), so it runs only with ``SYNATTN_INDUCTOR_TESTS=1``."""

import os

import pytest
import torch

import synattn.hf as sh
from synattn.trees.relations import batch_relation_labels, head_targets
from tests.helpers.hf_models import bert, gpt2

HEADS = torch.tensor([[2, 0, 2, 3, 4, 5], [2, 0, 2, 3, 3, 5]])


def setup(name):
    torch.manual_seed(0)
    if name == "bert":
        model = bert(num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"], "layers": [0]},
                          {"feature": "supervised_head", "layers": [1], "head": 1}])
    else:
        model = gpt2()
        for module in model.modules():  # no dropout: training mode, deterministic
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        sh.attach(model, [{"feature": "relations", "relations": ["tree_distance"], "side": "decoder", "layers": [1]},
                          {"feature": "supervised_head", "side": "decoder", "layers": [0]}])
    dist, _ = batch_relation_labels(HEADS)
    ids = torch.randint(5, 50, (2, 6))
    kw = {"input_ids": ids, "labels": ids if name == "gpt2" else torch.randint(0, 2, (2, 6)),
          "syntax_tree_dist": dist, "syntax_head_targets": head_targets(HEADS)}
    return model, kw


def run(model, kw, call=None):
    model.zero_grad()
    out = (model if call is None else call)(**kw)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), {k: v.detach() for k, v in out.synattn_losses.items()}, grads


@pytest.mark.slow
@pytest.mark.parametrize("backend", [
    "aot_eager",
    pytest.param("inductor", marks=pytest.mark.skipif(
        not os.environ.get("SYNATTN_INDUCTOR_TESTS"),
        reason="inductor compiles C++ kernels: minutes of CPU; set SYNATTN_INDUCTOR_TESTS=1")),
])
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_compiled_model_matches_eager(name, backend):
    torch._dynamo.reset()
    model, kw = setup(name)
    model.train()  # dropout 0: training mode, deterministic
    logits, losses, grads = run(model, kw)
    compiled = torch.compile(model, backend=backend)
    for _ in range(2):  # the second call reuses the compiled graphs
        c_logits, c_losses, c_grads = run(model, kw, compiled)
        torch.testing.assert_close(c_logits, logits, atol=1e-5, rtol=1e-5)
        assert c_losses.keys() == losses.keys()
        for key in losses:
            torch.testing.assert_close(c_losses[key], losses[key], atol=1e-5, rtol=1e-5)
        assert c_grads.keys() == grads.keys()
        for key in grads:
            torch.testing.assert_close(c_grads[key], grads[key], atol=1e-4, rtol=1e-4, msg=key)
