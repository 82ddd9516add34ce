"""Everything on CUDA against the CPU: the dynamic programs, every attention feature, and a few
training steps of every config.

Marked ``cuda`` (``pytest -m cuda``) and skipped, with the reason, where torch sees no GPU;
``benchmarks/gpu_check.sh`` runs them on one card. Each case computes the same thing twice: in
float32 on the device and in float64 on the CPU (the reference), from the same inputs and weights,
and compares values and gradients.

``SYNATTN_CUDA_TEST_DEVICE=cpu`` runs the same tests with the CPU as the "device" (float32
against float64 on the CPU): a dry run of the tests themselves on a machine without a GPU.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch

from synattn.attention import MultiheadAttention, SpanAttention, SyntaxInputs
from synattn.methods.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer
from synattn.methods.constituent import ConstituentAttention
from synattn.methods.cross_attention import SegmentationAttention
from synattn.methods.relations import RelativePositions, TreeRelations
from synattn.methods.specialized import SpecializedHeads
from synattn.methods.supervised import SupervisedHead
from synattn.methods.syntactic import SyntacticAttention
from synattn.methods.tree_distance_bias import TreeDistanceBias
from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF, TreeCRF
from synattn.trees.relations import (
    batch_distance_labels,
    batch_syntax_hints,
    batch_traversal_labels,
    distance_vocab,
    head_targets,
    traversal_vocab,
)

DEVICE = torch.device(os.environ.get("SYNATTN_CUDA_TEST_DEVICE", "cuda"))
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(DEVICE.type == "cuda" and not torch.cuda.is_available(),
                       reason=f"needs a CUDA GPU: torch {torch.__version__} sees none "
                              "(benchmarks/gpu_check.sh runs these on one)"),
]
TOL = {"atol": 2e-4, "rtol": 2e-4}
"""float32 on the device against float64 on the CPU."""


@pytest.fixture(autouse=True)
def no_tf32():
    """Full float32 matrix products on the device (TF32 would round to 10 bits)."""
    if DEVICE.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def close(device_value: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(device_value.detach().cpu().double(), reference.detach().double(),
                               **TOL, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------------------------------------
# The dynamic programs: log Z, marginals (and their backward), argmax.
# ---------------------------------------------------------------------------------------------

def _crf(structure: str, x: torch.Tensor, lengths: torch.Tensor, extra: torch.Tensor | None):
    if structure == "chain":
        return LinearChainCRF(unary=x, transition=extra, lengths=lengths)
    if structure == "cky":
        return TreeCRF(x, lengths)
    cls = DependencyCRF if structure.startswith("eisner") else NonProjectiveDependencyCRF
    return cls(x, lengths, multiroot=structure.endswith("multiroot"))


STRUCTURES = ["chain", "eisner-multiroot", "eisner-single", "matrix_tree-multiroot",
              "matrix_tree-single", "cky"]


@pytest.mark.parametrize("structure", STRUCTURES)
def test_structures_on_the_device_equal_the_cpu_in_float64(structure):
    gen = torch.Generator().manual_seed(0)
    B, n = 4, 12
    lengths = torch.tensor([n, 7, 1, 10])
    extra = None
    if structure == "chain":
        scores, extra = torch.randn(B, n, 3, generator=gen), torch.randn(3, 3, generator=gen)
    elif structure == "cky":
        scores = torch.randn(B, n, n, generator=gen)
    else:
        scores = torch.randn(B, n + 1, n + 1, generator=gen)
    direction = torch.randn(_crf(structure, scores, lengths, extra).marginals.shape, generator=gen)
    results = []  # [device result, reference]
    for where, dtype in ((DEVICE, torch.float32), (torch.device("cpu"), torch.float64)):
        x = scores.to(where, dtype).clone().requires_grad_()
        crf = _crf(structure, x, lengths.to(where), None if extra is None else extra.to(where, dtype))
        log_z, mu = crf.log_partition, crf.marginals
        (grad,) = torch.autograd.grad(mu, x, direction.to(where, dtype))
        argmax = crf.argmax
        results.append((log_z, mu, grad, crf.score(argmax.to(where)), argmax))
        assert log_z.device.type == mu.device.type == grad.device.type == where.type
    device, reference = results
    for name, got, want in zip(("log Z", "marginals", "marginals' backward", "score of argmax"),
                               device, reference):
        close(got, want, f"{structure} {name}")
    # the best structure: the same one (no ties in random scores), or one as good
    same = torch.equal(device[4].cpu(), reference[4].cpu())
    assert same or torch.allclose(device[3].cpu().double(), reference[3].double(), **TOL)


# ---------------------------------------------------------------------------------------------
# Every attention feature: forward and backward.
# ---------------------------------------------------------------------------------------------

D, H = 16, 4
DK = D // H
FEATURES = {  # name: (attention kind, features)
    "plain": ("self", lambda: []),
    "shaw": ("self", lambda: [RelativePositions(4, DK)]),
    "tree distance": ("self", lambda: [TreeRelations("tree_dist", len(distance_vocab(8)), DK)]),
    "tree traversal": ("self", lambda: [TreeRelations("traversal", len(traversal_vocab(4)), DK)]),
    "tree distance bias": ("self", lambda: [TreeDistanceBias(H)]),
    "specialized head": ("self", lambda: [SpecializedHeads(17, DK)]),
    "supervised head": ("self", lambda: [SupervisedHead(DK)]),
    "constituent": ("self", lambda: [ConstituentAttention(D, 0)]),
    "BET(SG)": ("causal", lambda: [SyntaxGuidedPointer()]),
    "BET(SF)": ("causal", lambda: [BirdEyeReweighting(D, H)]),
    "segmentation": ("cross", lambda: [SegmentationAttention(H)]),
    "segmentation sigmoid": ("cross", lambda: [SegmentationAttention(H, "sigmoid")]),
    "syntactic projective": ("self", lambda: [SyntacticAttention(D, tree="projective")]),
    "syntactic non-projective": ("self", lambda: [SyntacticAttention(D, tree="nonprojective",
                                                                     multiroot=True)]),
    "span": ("self", lambda: [SpanAttention(DK)]),
}


def random_syntax(batch: int, n: int, seed: int) -> tuple[SyntaxInputs, torch.Tensor]:
    """Random trees with lengths in [n/2, n]: every syntax field and the padding mask."""
    rng = np.random.default_rng(seed)
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
                          head_targets=torch.as_tensor(targets),
                          hints=torch.as_tensor(batch_syntax_hints(heads, lengths)))
    return syntax, torch.as_tensor(np.arange(n)[None, :] >= lengths[:, None])


@pytest.mark.parametrize("name", list(FEATURES))
def test_attention_features_on_the_device_equal_the_cpu_in_float64(name):
    kind, features = FEATURES[name]
    torch.manual_seed(0)
    reference = MultiheadAttention(D, H, features=features(), dropout=0.0)
    with torch.no_grad():  # leave the zero initialisations: every parameter matters
        for param in reference.parameters():
            param.normal_(0.0, 0.5)
    reference = reference.double()
    on_device = copy.deepcopy(reference).float().to(DEVICE)
    B, n = 3, 9
    syntax, pad = random_syntax(B, n, seed=1)
    gen = torch.Generator().manual_seed(2)
    x, source = torch.randn(B, n, D, generator=gen), torch.randn(B, n + 2, D, generator=gen)
    source_pad = torch.zeros(B, n + 2, dtype=torch.bool)
    source_pad[1, -3:] = True
    outputs = []
    for module, where, dtype in ((on_device, DEVICE, torch.float32), (reference, "cpu", torch.float64)):
        inputs = x.to(where, dtype).clone().requires_grad_()
        if kind == "cross":
            out, extras = module(inputs, context=source.to(where, dtype),
                                 key_padding_mask=source_pad.to(where))
        else:
            out, extras = module(inputs, key_padding_mask=pad.to(where), causal=kind == "causal",
                                 syntax=syntax.to(where))
        loss = out.square().mean() + sum(extras.losses.values(), torch.zeros((), device=out.device))
        loss.backward()
        grads = [p.grad for p in module.parameters()]
        outputs.append((out, loss, inputs.grad, grads))
    (out, loss, grad_x, grads), (ref_out, ref_loss, ref_grad_x, ref_grads) = outputs
    close(out, ref_out, f"{name} output")
    close(loss, ref_loss, f"{name} loss")
    close(grad_x, ref_grad_x, f"{name} input gradient")
    for (param_name, _), got, want in zip(reference.named_parameters(), grads, ref_grads):
        if want is not None:
            close(got, want, f"{name} gradient of {param_name}")


# ---------------------------------------------------------------------------------------------
# Every config: a few training steps on the device.
# ---------------------------------------------------------------------------------------------

from tests.helpers.configs import CONFIGS, RUN_OVERRIDES, datasets, shrink_overrides  # noqa: E402,F401


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_trains_on_the_device(path, datasets, tmp_path, capsys):  # noqa: F811
    from synattn.cli.main import main
    from synattn.train import read_log
    from synattn.train.experiment import ExperimentConfig

    exp = ExperimentConfig.from_yaml(path)
    run = tmp_path / "run"
    overrides = [o for o in RUN_OVERRIDES if not o.startswith(("train.device=", "train.max_steps="))]
    code = main(["train", "--config", str(path), "--data", str(datasets[exp.task]), "--run-dir", str(run),
                 *shrink_overrides(exp), *overrides, f"train.device={DEVICE.type}", "train.max_steps=3"])
    err = capsys.readouterr().err
    assert code == 0, f"{path.name} failed on {DEVICE}:\n{err[-3000:]}"
    assert "stopped by max_steps at step 3" in err
    losses = [r["loss"] for r in read_log(run, "train")]
    assert losses and all(np.isfinite(losses)), losses
