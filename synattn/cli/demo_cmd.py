"""``synattn demo``: the whole pipeline on the built-in data, on a CPU, in about a quarter of an hour.

1. prepare: the verse-aligned Bible, English (WEB) → French (Segond 1910), about 20k training pairs;
   the English side parsed with spaCy, both sides segmented with sentencepiece, the word trees
   projected onto subwords (docs/methods.md §2);
2. statistics of the source trees and of their tree-relation labels and Bird-Eye hints;
3. train side by side (one ``synattn train`` process each with half the CPU threads; bf16 autocast,
   a short warm-up and a cosine decay of the learning rate to the end of the budget) for the same
   1200 updates (about ten minutes of one core of a 2-core laptop; ``--minutes`` gives equal minutes
   instead) a small baseline Transformer (one encoder and one decoder layer, the size that learns
   most in ten minutes of a CPU core) with Shaw relative positions in its encoder, and the same
   model with tree-traversal labels beside the relative positions (Shaw-style embeddings of each
   pair's path in the dependency tree, U*D* / LD* / RD*, Wang et al. 2019), so that their difference
   is the syntax's; the progress line gives the time to go at the pace of the updates so far, and
   one note says when a busy machine (or one with fewer cores) makes the training take well over
   its ten minutes;
4. evaluate both on the same test verses: BLEU and chrF (sacreBLEU) of each, and their difference
   with sacreBLEU's paired bootstrap test (the 95% interval of the difference, p-value: the noise of
   the test sample): a difference inside the noise is printed as such, and two scores under one
   point as no evidence; perplexity; ``--seeds K`` trains K seeds of each and adds each model's
   mean ± std over seeds and the difference paired by seed (the noise of training); the attention:
   the word-level attachment of every encoder head against the spaCy parse of held-out verses;
   plots (label histograms, learning curves, the attachment of every encoder head of both models,
   the syntax model's heads over a test verse with its tree).

Why traversal (docs/results.md, "The demo"; ``scripts/demo_arms.py`` repeats the measurement): of the
syntax models measured at the demo's own size and budget over three seeds, it is the one whose gain
is established at the study's size (+1.43 ± 0.18 chrF) and that gained here in every seed (+0.70 ±
0.48 chrF; three seeds do not establish it at this size); the supervised encoder head (λ = 0.1),
established at the study's size, lost here in every seed (−1.72 ± 0.46).
Minutes of CPU training show the pipeline and the methods' mechanics, not the quality they reach:
``synattn reproduce mt-syntax`` (several seeds, longer budgets, every method) gives the comparison,
``synattn reproduce supervised-head`` the supervised head on gold trees (docs/reproduce.md).
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from pathlib import Path

import numpy as np

from synattn.cli.options import budget_minutes, positive_int, seed_count, thread_count, update_count
from synattn.data.prepare import PrepareConfig, prepare
from synattn.data.prepared import DATASET, holds_only_a_dataset
from synattn.folders import FolderKind


def _demo_before_markers(folder: Path) -> bool:
    """A demo's folder made before markers (its dataset and its runs' logs), or a folder that holds
    nothing but a prepared dataset in ``data/`` (reused when prepared with the demo's settings)."""
    return holds_only_a_dataset(folder) or (DATASET.made(folder / "data") and (folder / "logs").is_dir())


DEMO = FolderKind(".synattn-demo", "a folder of 'synattn demo'", made_before_markers=_demo_before_markers)
"""The demo's output folder (:mod:`synattn.folders`)."""

# Sized by measurement for ten minutes of one CPU core each (docs/results.md, "The demo"): one encoder
# and one decoder layer (the baseline reaches chrF 37 on the test verses where 2+2 layers reach 27
# and 3+3 layers 18: in ten minutes a shallow model makes more updates and learns more from each),
# dropout off (the models see the training verses about four times), 2000-token batches (twice
# the updates of 4000 at the same loss per token seen).
BASE = {"d_model": 256, "heads": 4, "ffn_dim": 1024, "dropout": 0.0, "norm": "pre",
        "encoder": {"layers": 1}, "decoder": {"layers": 1}}
# Both encoders have Shaw et al.'s relative positions, so that the difference between the two
# models is the syntax alone: tree-traversal labels beside them. Chosen by measurement at this size
# and budget, three seeds each (docs/results.md, "The demo"; scripts/demo_arms.py): traversal
# +0.70 ± 0.48 chrF, better in every seed; the supervised encoder head (λ = 0.1), whose gain the
# study's size establishes, −1.72 ± 0.46, worse in every seed (in a one-layer encoder it reads the
# words without context and takes one of the four heads from translation).
BASELINE = {**BASE, "encoder": {"layers": 1, "relations": ["sequential"]}}
TRAVERSAL = {**BASE, "encoder": {"layers": 1, "relations": ["traversal", "sequential"]}}
MODELS = {"baseline": BASELINE, "traversal": TRAVERSAL}
"""The demo's two models by name: the baseline first, the syntax model last."""
CHOSEN = ("Why tree-traversal labels: of the syntax models measured at this size and budget over three seeds "
          "(docs/results.md, \"The demo\"), the one whose gain is established at the study's size and that gained "
          "here in every seed (+0.70 ± 0.48 chrF); the supervised encoder head (λ = 0.1) lost in every seed here.")
"""The demo's one line on why its syntax model is the one it trains."""
UPDATES = 1200
"""Updates of each model by default: about ten minutes of one core of a 2-core laptop (docs/results.md)."""
UPDATES_PER_MINUTE = 120
"""Each model's pace on an idle 2-core machine, one core each (docs/results.md, "The demo"): the
demo says when the pace it measures makes its training take well longer."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on the built-in Bible en->fr data (about 15 min on CPU)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/demo", help="output folder (default outputs/demo)")
    p.add_argument("--pairs", type=positive_int, default=20000,
                   help="training verse pairs, the first in canonical order (default 20000)")
    p.add_argument("--updates", type=update_count, default=None,
                   help=f"updates of each model: both end at the same update, the learning rate decays over them "
                        f"(default {UPDATES})")
    p.add_argument("--minutes", type=budget_minutes, default=None,
                   help="train each model for these minutes instead (equal minutes: the model whose updates "
                        "cost more makes fewer)")
    p.add_argument("--seeds", type=seed_count, default=1,
                   help="seeds of each model (default 1): with 2 or more the demo reports each model's mean ± std "
                        "over seeds and the difference paired by seed; each seed is one more round of training")
    p.add_argument("--test-sentences", type=positive_int, default=300, help="test verses translated (default 300)")
    p.add_argument("--vocab-size", type=positive_int, default=6000, help="sentencepiece vocabulary per side")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads in all, split between the two models (default: torch's)")
    p.add_argument("--stats-only", action="store_true", help="stop after the statistics (no training)")
    p.set_defaults(func=run)


def budget_of(args: argparse.Namespace):
    """The demo's :class:`~synattn.reproduce.study.Budget`: ``--updates`` (the default) or ``--minutes``."""
    from synattn.errors import UsageError
    from synattn.reproduce.study import Budget

    if args.minutes is not None and args.updates is not None:
        raise UsageError("--updates and --minutes: give one budget (equal updates or equal minutes)")
    return Budget(minutes=args.minutes) if args.minutes is not None else Budget(updates=args.updates or UPDATES)


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
          f"{pieces.traversal_overflow:.1%}, BET hint = previous piece "
          f"{pieces.hint_is_previous / max(pieces.n_hints, 1):.1%}")
    plot_relation_histograms({"words": words.relations, "subwords": pieces}, out / "relations.png")


TRAIN = {"max_tokens": 2000, "max_epochs": 100, "lr": 2e-3, "warmup_updates": 60, "schedule": "cosine",
         "min_lr_ratio": 0.02, "bf16": True, "label_smoothing": 0.1, "clip_norm": 1.0, "log_interval": 10,
         "seed": 1, "keep_last_n": 1, "validate_interval": 0, "save_interval": 0, "save_interval_updates": 100,
         "progress_bar": False, "tensorboard": False}
# (log_interval: a record every 10 updates is news for the progress line, whose first estimate of the time
# to go needs two records of each run, and a point of the learning curves)


def _experiment(model: dict, budget, seed: int, data: Path) -> dict:
    return {"task": "mt", "data": str(data.resolve()), "model": model,
            "train": {**TRAIN, **budget.train, "seed": seed}, "eval": {"beam": 4, "bleu_sentences": 0}}


def _train_all(models: dict[str, dict], args: argparse.Namespace, data: Path, out: Path) -> dict[int, list[dict]]:
    """Trains the models side by side, seed after seed (one ``synattn train`` process per model with
    its share of the CPU threads), or reuses finished runs; returns what the report needs of each
    run, by seed."""
    import torch

    from synattn.cli.side_by_side import Job, train_side_by_side
    from synattn.train import read_log
    from synattn.train.experiment import ExperimentConfig, build_model

    budget = budget_of(args)
    threads = max(1, (args.threads or torch.get_num_threads()) // len(models))
    by_seed: dict[int, list[dict]] = {}
    for seed in range(1, args.seeds + 1):
        jobs = [Job(name, _experiment(model, budget, seed, data), out / "runs" / f"{name}-seed{seed}")
                for name, model in models.items()]
        print(f"\n== seed {seed} of {args.seeds}: " + _training_plan(jobs, budget, threads)
              + f" (logs: {out / 'logs'}) ==", file=sys.stderr)
        nominal = budget.updates / UPDATES_PER_MINUTE if budget.updates is not None else None
        train_side_by_side(jobs, out / "configs", out / "logs", threads, budget,
                           desc=f"training, seed {seed}" if args.seeds > 1 else "training", nominal_minutes=nominal)
        results = []
        for job in jobs:
            exp = ExperimentConfig.from_dict(job.config)
            train_log = read_log(job.run_dir, "train")
            speed = float(np.median([r["tokens_per_s"] for r in train_log])) if train_log else float("nan")
            results.append({"name": job.name, "seed": seed, "run": job.run_dir, "exp": exp, "tokens_per_s": speed,
                            "minutes": train_log[-1].get("elapsed_s", 0.0) / 60 if train_log else 0.0,
                            "steps": train_log[-1]["step"] if train_log else 0,
                            "params": sum(p.numel() for p in build_model(exp).parameters())})
        by_seed[seed] = results
    return by_seed


def _training_plan(jobs: list, budget, threads: int) -> str:
    """What the training step will do: train, resume, or reuse each run (a run whose log shows
    its whole budget used is finished; a rerun into the same ``--out`` reuses it)."""
    from synattn.cli.side_by_side import _progress
    from synattn.train import resolve_checkpoint

    finished: list[str] = []
    resumed: list[str] = []
    new: list[str] = []
    for job in jobs:
        seconds, step, _ = _progress(job)
        if resolve_checkpoint(job.run_dir) is None:
            new.append(job.name)
            continue
        if budget.updates is None:
            done = seconds >= 60.0 * budget.minutes
            where = f"{seconds / 60:.1f} of {budget.minutes:g} minutes, update {step}"
        else:
            done = step >= budget.updates
            where = f"update {step} of {budget.updates}, {seconds / 60:.1f} minutes"
        (finished if done else resumed).append(f"{job.name} ({where})")
    parts = []
    if new:
        parts.append(f"training {' and '.join(new)} side by side for {budget} each, {threads} CPU thread(s) each")
    if resumed:
        parts.append(f"resuming {' and '.join(resumed)}, {threads} CPU thread(s) each")
    if finished:
        parts.append(f"reusing the finished run{'s' if len(finished) > 1 else ''} {' and '.join(finished)}")
    return "; ".join(parts)


def _evaluate(result: dict, args: argparse.Namespace) -> None:
    from synattn.evaluate.runner import evaluate_run, load_run
    from synattn.reproduce.heads import head_attachment

    model, exp, _ = load_run(result["run"], "last")
    evaluation = evaluate_run(model, exp, "test", translate=True, max_translate=args.test_sentences)
    result["eval"] = evaluation
    result["model"] = model
    result["heads"] = head_attachment(model, exp.data, "test")


def run(args: argparse.Namespace) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from synattn.cli.paths import output_folder
    from synattn.folders import check_own_folder, taken

    budget_of(args)  # a contradictory budget is refused before any work
    out = output_folder(args.out, "--out")
    check_own_folder(out, "--out", DEMO)
    started = time.monotonic()
    with taken(out, DEMO):  # a demo refused before its work leaves the folder as it was
        data = prepare(PrepareConfig(out=str(out / "data"), corpus="bible", bible_source="4", bible_target="l",
                                     limit=args.pairs, vocab_size=args.vocab_size))
    _statistics(data, out)
    if args.stats_only:
        return 0
    by_seed = _train_all(MODELS, args, data, out)
    for results in by_seed.values():
        for result in results:
            _evaluate(result, args)
    _report(by_seed, out, time.monotonic() - started, args)
    return 0


def noise_line(name: str, test: dict, what: str) -> str:
    """One line of the demo's comparison: the difference, the 95% interval of the difference and
    the p-value of the paired bootstrap (``test``: an entry of
    :func:`synattn.reproduce.stats.paired_bootstrap`), and what they show
    (:func:`synattn.reproduce.stats.bootstrap_verdict`); ``what`` names the runs (seed, budget)."""
    from synattn.reproduce.stats import bootstrap_verdict

    low, high = test["delta_interval"]
    return (f"  Δ{name} {test['delta']:+.2f} ({test['system']:.2f} against {test['baseline']:.2f}; 95% interval "
            f"of Δ {low:+.2f} to {high:+.2f}, p = {test['p_value']:.3f}): {bootstrap_verdict(test)}, {what}")


def seed_lines(by_seed: dict[int, list[dict]]) -> list[str]:
    """Mean ± std over seeds of each model's chrF and BLEU, and the syntax model's difference paired
    by seed (mean ± std, and its smallest and largest): the noise of training, which the paired
    bootstrap of one seed does not see."""
    from synattn.reproduce.stats import paired_difference, summarize

    names = [r["name"] for r in next(iter(by_seed.values()))]
    lines = [f"Over {len(by_seed)} seeds (mean ± std):"]
    for key, metric in (("chrf", "chrF"), ("bleu", "BLEU")):
        scores = {name: {seed: next(r for r in runs if r["name"] == name)["eval"].translation[key]
                         for seed, runs in by_seed.items()} for name in names}
        parts = [f"{name} {summarize(list(scores[name].values())).format(2)}" for name in names]
        deltas = [scores[names[-1]][seed] - scores[names[0]][seed] for seed in by_seed]
        paired = paired_difference(scores[names[-1]], scores[names[0]])
        lines.append(f"  {metric}: {', '.join(parts)}; Δ{metric} paired by seed {paired.mean:+.2f} ± {paired.std:.2f} "
                     f"(from {min(deltas):+.2f} to {max(deltas):+.2f})")
    return lines


def _report(by_seed: dict[int, list[dict]], out: Path, wall: float, args: argparse.Namespace) -> None:
    from synattn.data.batching import PreparedDataset
    from synattn.reproduce.heads import best_head
    from synattn.reproduce.stats import paired_bootstrap
    from synattn.viz.demo import plot_head_attachment, plot_learning_curves, plot_supervised_example

    budget = budget_of(args)
    header = (f"{'model':<18}{'seed':>5}{'params':>8}{'steps':>7}{'tok/s':>8}{'min':>6}{'ppl':>9}{'BLEU':>7}"
              f"{'chrF':>7}{'UAS':>18}")
    print("\n" + header + "\n" + "-" * len(header))
    for seed, results in by_seed.items():
        for r in results:
            ev, heads = r["eval"], r["heads"]
            if heads["supervised"]:
                uas = f"{100 * next(iter(heads['supervised'].values()))[0]:.1f} (superv.)"
            else:
                layer, head = best_head(heads["heads"]["encoder"])
                uas = f"{100 * heads['heads']['encoder'][layer][head][0]:.1f} (best head)"
            print(f"{r['name']:<18}{seed:>5}{r['params'] / 1e6:>7.1f}M{r['steps']:>7}{r['tokens_per_s']:>8.0f}"
                  f"{r['minutes']:>6.1f}{ev.perplexity:>9.1f}{ev.translation['bleu']:>7.2f}"
                  f"{ev.translation['chrf']:>7.2f}{uas:>18}")
    first = by_seed[1]
    refs = PreparedDataset(first[0]["exp"].data, "test").text("tgt")[:len(first[0]["eval"].hypotheses)]
    print(f"\nTest: the first {len(refs)} test verses, beam 4. {first[0]['eval'].translation['bleu_signature']}")
    print(f"{first[-1]['name']} − {first[0]['name']}, paired bootstrap (1000 resamples) of each seed: the noise "
          f"of the test sample")
    for seed, results in by_seed.items():
        test = paired_bootstrap(results[0]["eval"].hypotheses, results[-1]["eval"].hypotheses, refs)
        for key, name in (("bleu", "BLEU"), ("chrf", "chrF")):
            print(noise_line(name, test[key], f"seed {seed}, {budget} each"))
    if len(by_seed) > 1:
        print("\n".join(seed_lines(by_seed)))
    else:
        print("One seed: the noise of training (another seed's batches and initialisation) is not in these "
              "intervals; synattn demo --seeds 3 measures it (three rounds of training).")
    print("UAS: word-level attachment of each model's best encoder head (of its supervised head, where it has "
          "one) against the spaCy parse of the test verses, punctuation included. The syntax model is given that "
          "parse, so a head that follows it shows attention reading the tree, not parsing: a head trained to "
          "parse from gold trees is synattn reproduce supervised-head.")
    print(CHOSEN)
    print("The comparison of every method, with seeds and longer budgets: synattn reproduce mt-syntax; the "
          "supervised head on gold trees: synattn reproduce supervised-head (docs/reproduce.md).")
    runs = {f"{r['name']} (seed {seed})" if len(by_seed) > 1 else r["name"]: r["run"]
            for seed, results in by_seed.items() for r in results}
    syntax = first[-1]
    supervised = syntax["exp"].model.get("encoder", {}).get("supervised_head")
    marks = {syntax["name"]: (supervised["layer"], supervised["head"])} if supervised else {}
    plots = [plot_learning_curves(runs, out / "learning_curves.png"),
             plot_head_attachment({r["name"]: r["heads"] for r in first}, out / "head_attachment.png", marks=marks)]
    plots.append(plot_supervised_example(syntax["model"], syntax["exp"], out / "attention_example.png"))
    print(f"plots: {', '.join(str(p) for p in plots)}, {out / 'relations.png'}")
    print(f"total wall time {wall / 60:.1f} min")
