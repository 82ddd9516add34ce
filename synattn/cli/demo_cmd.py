"""``synattn demo``: the whole pipeline on the built-in data, on a CPU, in about a quarter of an hour.

1. prepare: the verse-aligned Bible, English (WEB) → French (Segond 1910), about 20k training pairs;
   the English side parsed with spaCy, both sides segmented with sentencepiece, the word trees
   projected onto subwords (METHODS §2);
2. statistics of the source trees and of their tree-relation labels (METHODS §1) and Bird-Eye
   hints (METHODS §4);
3. train, for the same few minutes each, a baseline Transformer and a syntax-aware one
   (tree-distance + Shaw relative attention in the encoder, and a dependency-supervised head in
   encoder layer 2, METHODS §1–§2);
4. evaluate both on test verses: BLEU and chrF (sacreBLEU), perplexity, the supervised head's
   attachment score, training speed; write plots (label histograms, learning curves, the
   supervised head's attention over a test sentence with its tree).

Minutes of CPU training show that the pipeline works end to end, not what the methods can reach:
the BLEU scores are far below those of real training, and the difference between the two models is
not a result.
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from pathlib import Path

import numpy as np

from synattn.cli.options import positive_int
from synattn.data.prepare import PrepareConfig, prepare

BASE = {"d_model": 256, "heads": 4, "ffn_dim": 1024, "dropout": 0.1, "norm": "pre",
        "encoder": {"layers": 3}, "decoder": {"layers": 3}}
SYNTAX = {"encoder": {"layers": 3, "relations": ["tree_distance", "sequential"],
                      "supervised_head": {"layer": 2, "head": 0, "weight": 1.0}}}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on the built-in Bible en->fr data (about 15 min on CPU)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/demo", help="output folder (default outputs/demo)")
    p.add_argument("--pairs", type=positive_int, default=20000, help="training verse pairs (default 20000)")
    p.add_argument("--minutes", type=float, default=3.5, help="training minutes per model (default 3.5)")
    p.add_argument("--test-sentences", type=positive_int, default=300, help="test verses translated (default 300)")
    p.add_argument("--vocab-size", type=positive_int, default=6000, help="sentencepiece vocabulary per side")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--stats-only", action="store_true", help="stop after the statistics (no training)")
    p.set_defaults(func=run)


def _statistics(data: Path, out: Path) -> None:
    from synattn.data.batching import PreparedDataset
    from synattn.trees.conllu_io import read_conllu
    from synattn.trees.stats import relation_statistics, treebank_statistics
    from synattn.viz.relations import plot_relation_histograms

    cached = sorted(glob.glob(str(data / "cache" / "train.src.*.conllu")))
    trees = read_conllu(cached[-1])
    words = treebank_statistics(trees)
    train = PreparedDataset(data, "train")
    pieces = relation_statistics([train.fields["src_heads"][i] for i in range(len(train))])
    print("\n== source trees (spaCy), word level ==")
    print(words.format())
    print(f"\n== subword level: tree-distance overflow {pieces.distance_overflow:.1%}, traversal overflow "
          f"{pieces.traversal_overflow:.1%}, BET hint = previous piece {pieces.hint_is_previous / max(pieces.n_hints, 1):.1%}")
    plot_relation_histograms({"words": words.relations, "subwords": pieces}, out / "relations.png")


def _train(name: str, model: dict, args: argparse.Namespace, data: Path, out: Path) -> dict:
    from synattn.data.batching import PreparedDataset
    from synattn.experiment import ExperimentConfig, build_model
    from synattn.train import Trainer, read_log, resolve_checkpoint, task_for

    exp = ExperimentConfig.from_dict({
        "task": "mt", "data": str(data), "model": model,
        "train": {"max_tokens": 3000, "max_minutes": args.minutes, "max_epochs": 100, "lr": 1e-3,
                  "warmup_updates": 400, "label_smoothing": 0.1, "clip_norm": 1.0, "log_interval": 25,
                  "seed": 1, "keep_last_n": 1},
        "eval": {"beam": 4, "bleu_sentences": 0}})
    run_dir = out / "runs" / name
    done = resolve_checkpoint(run_dir)
    if done is None:
        print(f"\n== training {name} for {args.minutes:g} minutes ==", file=sys.stderr)
        built = build_model(exp)
        trainer = Trainer(built, task_for(built, exp.train.label_smoothing), exp.train,
                          PreparedDataset(data, "train"), run_dir, valid_data=PreparedDataset(data, "dev"),
                          run_config={"experiment": exp.to_dict()})
        started = time.monotonic()
        try:
            trainer.train()
        finally:
            trainer.close()
        wall = time.monotonic() - started
    else:
        print(f"reusing {run_dir} (delete it to train again)", file=sys.stderr)
        wall = float("nan")
    train_log = read_log(run_dir, "train")
    speed = float(np.median([r["tokens_per_s"] for r in train_log])) if train_log else float("nan")
    params = sum(p.numel() for p in build_model(exp).parameters())
    return {"name": name, "run": run_dir, "exp": exp, "wall": wall, "tokens_per_s": speed,
            "steps": train_log[-1]["step"] if train_log else 0, "params": params}


def _evaluate(result: dict, args: argparse.Namespace) -> None:
    from synattn.evaluate.runner import evaluate_run, load_run

    model, exp, _ = load_run(result["run"], "last")
    evaluation = evaluate_run(model, exp, "test", translate=True, max_translate=args.test_sentences)
    result["eval"] = evaluation
    result["model"] = model


def run(args: argparse.Namespace) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    data = prepare(PrepareConfig(out=str(out / "data"), corpus="bible", bible_source="4", bible_target="l",
                                 limit=args.pairs, vocab_size=args.vocab_size))
    _statistics(data, out)
    if args.stats_only:
        return 0
    results = [_train("baseline", BASE, args, data, out),
               _train("tree+supervised", {**BASE, **SYNTAX}, args, data, out)]
    for result in results:
        _evaluate(result, args)
    _report(results, out, time.monotonic() - started, args)
    return 0


def _report(results: list[dict], out: Path, wall: float, args: argparse.Namespace) -> None:
    from synattn.viz.demo import plot_learning_curves, plot_supervised_example

    header = (f"{'model':<18}{'params':>8}{'steps':>7}{'tok/s':>8}{'min':>6}{'ppl':>10}{'BLEU':>7}{'chrF':>7}"
              f"{'UAS':>7}")
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        ev = r["eval"]
        uas = next(iter(ev.attachment.values()), None)
        print(f"{r['name']:<18}{r['params'] / 1e6:>7.1f}M{r['steps']:>7}{r['tokens_per_s']:>8.0f}"
              f"{r['wall'] / 60:>6.1f}{ev.perplexity:>10.1f}{ev.translation['bleu']:>7.2f}"
              f"{ev.translation['chrf']:>7.2f}{'' if uas is None else f'{uas:.1%}':>7}")
    print(f"\nBLEU/chrF on the first {args.test_sentences} test verses, beam 4: "
          f"{results[0]['eval'].translation['bleu_signature']}")
    print("UAS: word-level attachment of the supervised head against the spaCy parse of the test verses.")
    print(f"Each model trained {args.minutes:g} minutes on a CPU: these numbers show that the pipeline runs "
          "end to end, not the quality the methods reach with real training.")
    plots = [plot_learning_curves({r["name"]: r["run"] for r in results}, out / "learning_curves.png"),
             plot_supervised_example(results[-1]["model"], results[-1]["exp"], out / "supervised_head.png")]
    print(f"plots: {', '.join(str(p) for p in plots)}, {out / 'relations.png'}")
    print(f"total wall time {wall / 60:.1f} min")
