"""Overhead of synattn features inside a transformers BERT layer, against its own sdpa attention.

Usage::

    nice python benchmarks/bench_hf.py [--batch 16] [--length 128] [--threads 2] [--repeats 7]
        [--scope layer|attention] [--clock cpu|wall] [--device cpu|cuda] [--model all-MiniLM-L6-v2]

One BERT-base-sized layer (``BertModel``, hidden 768, 12 heads, 1 layer, fp32, CPU, random
weights, a padding mask with lengths between n/2 and n) runs with ``attn_implementation="sdpa"``
(the baseline) and with synattn features attached to the same weights: tree-distance relations
(key + value embeddings, max distance 8), tree-distance relations on keys only, and the
supervised head. For each variant the median milliseconds of a forward pass (``no_grad``, eval)
and of forward + backward (train mode, dropout 0) are printed with the ratio to the baseline
measured in the same run; the repeats are interleaved across variants so that load changes hit
every variant alike; the minimum is printed beside the median. The default clock is the process's
CPU time (``time.process_time``, summed over its threads), which other processes on a shared
machine disturb far less than wall time (``--clock wall``). ``--scope attention`` times the
layer's self-attention module alone (projections + attention function, the hooks' work done once
outside the timing), where the features' share is largest. ``--device cuda`` runs the model on
the GPU and times by wall clock between two synchronisations of the device (a process's CPU time
does not see the GPU's work). ``--model all-MiniLM-L6-v2`` (or a model folder) times the real
pretrained encoder instead, all 6 layers with its weights, the supervised head on layer 4 (and
with Shaw relative positions beside it), on batches of EWT-like length (``--length 48``,
``--batch 32``): forward + backward is the fine-tuning step of the ``pretrained-syntax`` study.
Needs ``transformers``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import BertConfig, BertModel

import synattn.hf as sh
from synattn.trees.relations import batch_distance_labels, head_targets

from device import add_device_argument, check_device, device_info, synchronize
from machine import machine_info

VARIANTS = {
    "sdpa (plain BERT)": None,
    "features off (synattn, none attached)": [],
    "tree distance, key + value": [{"feature": "relations", "relations": ["tree_distance"]}],
    "tree distance, key only": [{"feature": "relations", "relations": ["tree_distance"], "relative_values": False}],
    "supervised head": [{"feature": "supervised_head", "layers": [0]}],
}


def random_batch(batch: int, n: int, vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(n // 2, n + 1, (batch,), generator=g)
    lengths[0] = n
    heads = torch.zeros(batch, n, dtype=torch.long)
    for b, length in enumerate(lengths.tolist()):  # random trees: each word hangs left or root
        for i in range(1, length):
            heads[b, i] = torch.randint(0, i + 1, (1,), generator=g).item()
        heads[b, 0] = 0
    mask = (torch.arange(n)[None] < lengths[:, None]).long()
    outside = sh.SyntaxEncoder(["tree_dist"]).outside("tree_dist")  # padding pairs
    dist = batch_distance_labels(heads, lengths, 8).to(torch.int8)
    dist = dist.masked_fill(~(mask[:, :, None].bool() & mask[:, None, :].bool()), outside)
    targets = head_targets(heads).masked_fill(mask == 0, -100)
    return {"input_ids": torch.randint(5, vocab, (batch, n), generator=g), "attention_mask": mask,
            "syntax_tree_dist": dist, "syntax_head_targets": targets}


PRETRAINED_VARIANTS = {
    "sdpa (plain model)": None,
    "features off (synattn, none attached)": [],
    "supervised head (layer 4)": [{"feature": "supervised_head", "layers": [4]}],
    "supervised head + relative positions": [{"feature": "relations", "relations": ["sequential"], "layers": [4]},
                                             {"feature": "supervised_head", "layers": [4]}],
}


def build(config: BertConfig, features: list | None, folder: str | None = None) -> BertModel:
    torch.manual_seed(0)
    model = BertModel(config) if folder is None else BertModel.from_pretrained(
        folder, attn_implementation="sdpa", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if features is not None:
        sh.attach(model, features)
    return model


class AttentionOnly(torch.nn.Module):
    """The self-attention module of a BERT layer, called as the model calls it."""

    def __init__(self, model: BertModel, inputs: dict):
        super().__init__()
        self.model = model
        self.attention = model.encoder.layer[0].attention.self
        mask = inputs["attention_mask"].bool()
        self.mask = mask[:, None, None, :]  # [B, 1, 1, n] what sdpa_mask gives
        g = torch.Generator().manual_seed(1)
        self.hidden = torch.randn(*mask.shape, model.config.hidden_size, generator=g).to(mask.device)
        syntax = sh.model.syntax_from_inputs(dict(inputs), "encoder")
        self.call = sh.SynattnCall(syntax=syntax) if hasattr(model, "synattn") else None

    def forward(self, **_: object):
        hidden = self.hidden.requires_grad_(self.training)
        kwargs = {} if self.call is None else {"synattn_call": self.call}
        out, _ = self.attention(hidden, attention_mask=self.mask, **kwargs)
        return out


CLOCK: Callable[[], float] = time.process_time
DEVICE = torch.device("cpu")


def time_once(model: torch.nn.Module, inputs: dict, train: bool) -> float:
    """Milliseconds (process CPU time) of one forward (``train``: forward + backward with the
    auxiliary losses added) of the attention module alone or of the whole model."""
    attention_only = isinstance(model, AttentionOnly)
    synchronize(DEVICE)
    start = CLOCK()
    model.train(train)
    with torch.set_grad_enabled(train):
        out = model() if attention_only else model(**inputs)
    if train:
        if attention_only:
            losses = model.call.losses.values() if model.call is not None else ()
            loss = out.pow(2).mean()
        else:
            losses = getattr(out, "synattn_losses", {}).values()
            loss = out.last_hidden_state.pow(2).mean()
        for aux in losses:
            loss = loss + aux
        loss.backward()
        model.zero_grad(set_to_none=True)
    synchronize(DEVICE)
    return (CLOCK() - start) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--scope", choices=("layer", "attention"), default="layer")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="cpu: the process's CPU time (on CUDA always wall)")
    p.add_argument("--model", default=None,
                   help="all-MiniLM-L6-v2 (installed offline) or a model folder: time the real pretrained "
                        "encoder instead of one random BERT-base layer")
    add_device_argument(p)
    args = p.parse_args()
    variants = VARIANTS
    global CLOCK, DEVICE
    DEVICE = check_device(p, args.device)
    if DEVICE.type == "cuda":
        args.clock = "wall"
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    folder = None
    if args.model is not None:
        from synattn.hf.pretrained import model_folder

        folder = str(model_folder(args.model))
        config = BertConfig.from_pretrained(folder)
        variants = PRETRAINED_VARIANTS
    else:
        config = BertConfig(vocab_size=1000, hidden_size=768, num_hidden_layers=1,
                            num_attention_heads=12, intermediate_size=3072,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            attn_implementation="sdpa")
    models = {name: build(config, features, folder).to(DEVICE) for name, features in variants.items()}
    full = {k: v.to(DEVICE) for k, v in random_batch(args.batch, args.length, config.vocab_size).items()}
    plain_inputs = {k: v for k, v in full.items() if not k.startswith("syntax_")}
    inputs = {name: full if features else plain_inputs for name, features in variants.items()}
    if args.scope == "attention":
        models = {name: AttentionOnly(models[name], inputs[name]) for name in variants}
    times = {(name, mode): [] for name in variants for mode in ("forward", "forward+backward")}
    for name in variants:  # warm-up
        time_once(models[name], inputs[name], False)
        time_once(models[name], inputs[name], True)
    for _ in range(args.repeats):
        for name in variants:
            times[(name, "forward")].append(time_once(models[name], inputs[name], False))
            times[(name, "forward+backward")].append(time_once(models[name], inputs[name], True))
    what = ("its self-attention module" if args.scope == "attention"
            else ("the whole model" if folder else "the whole layer"))
    model_name = (f"{args.model} ({config.num_hidden_layers} layers, d={config.hidden_size}, "
                  f"{config.num_attention_heads} heads, pretrained weights)" if folder else
                  "BERT-base-sized layer (1 layer, d=768, 12 heads)")
    print(f"{model_name}, {what}, B={args.batch}, n={args.length}, "
          f"fp32 on {device_info(DEVICE)}, {args.threads} threads, {args.repeats} repeats, {args.clock} time; "
          "ratio = median / median of sdpa in this run")
    print(f"{'variant':40s} {'mode':17s} {'median ms':>10s} {'min ms':>8s} {'ratio':>6s}")
    for mode in ("forward", "forward+backward"):
        base = statistics.median(times[(next(iter(variants)), mode)])
        for name in variants:
            t = times[(name, mode)]
            print(f"{name:40s} {mode:17s} {statistics.median(t):10.1f} {min(t):8.1f} "
                  f"{statistics.median(t) / base:6.2f}")
    print(machine_info())


if __name__ == "__main__":
    main()
