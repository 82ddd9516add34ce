"""Which syntax model should ``synattn demo`` show? Measures candidates at the demo's own size.

Trains, at the demo's size and budget (its data, its baseline, its training settings, 1,200
updates, one CPU thread per run, the runs side by side), the baseline and two syntax models whose
gains docs/results.md establishes at the study's size, over three seeds:

- ``traversal``: tree-traversal labels (U*D*, LD*, RD*) beside the baseline's relative positions;
- ``supervised-enc-w0.1``: the baseline with head 0 of its encoder layer trained to attend to each
  word's dependency head, loss weight λ = 0.1.

It prints each model's test chrF and BLEU per seed, each syntax model's difference from the
baseline paired by seed (mean ± std, t-test over the seeds) and the paired bootstrap of each seed.
Runs are kept in ``--out`` and reused, so an interrupted measurement resumes where it stopped::

    .venv/bin/python scripts/demo_arms.py --out outputs/demo-arms   # about an hour on 2 idle cores
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from synattn.cli import demo_cmd
from synattn.data.prepare import PrepareConfig, prepare

CANDIDATES = {
    "traversal": {**demo_cmd.BASE, "encoder": {"layers": 1, "relations": ["traversal", "sequential"]}},
    "supervised-enc-w0.1": {**demo_cmd.BASE, "encoder": {"layers": 1, "relations": ["sequential"],
                                                         "supervised_head": {"layer": 0, "head": 0,
                                                                             "weight": 0.1}}},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/demo-arms")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=demo_cmd.UPDATES)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads in all (default: torch's)")
    args = parser.parse_args(argv)
    args.minutes, args.test_sentences, args.pairs, args.vocab_size = None, 300, 20000, 6000
    import numpy as np
    import torch

    from synattn.data.batching import PreparedDataset
    from synattn.reproduce.stats import paired_bootstrap, paired_difference, summarize

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.monotonic()
    out = Path(args.out)
    data = prepare(PrepareConfig(out=str(out / "data"), corpus="bible", bible_source="4", bible_target="l",
                                 limit=args.pairs, vocab_size=args.vocab_size))
    models = {"baseline": demo_cmd.BASELINE, **CANDIDATES}
    by_seed = demo_cmd._train_all(models, args, data, out)
    for results in by_seed.values():
        for result in results:
            demo_cmd._evaluate(result, args)
    first = by_seed[1]
    refs = PreparedDataset(first[0]["exp"].data, "test").text("tgt")[:len(first[0]["eval"].hypotheses)]
    print(f"\n{'model':<22}{'seed':>5}{'steps':>7}{'tok/s':>8}{'min':>6}{'ppl':>8}{'BLEU':>7}{'chrF':>7}")
    for seed, results in by_seed.items():
        for r in results:
            ev = r["eval"]
            print(f"{r['name']:<22}{seed:>5}{r['steps']:>7}{r['tokens_per_s']:>8.0f}{r['minutes']:>6.1f}"
                  f"{ev.perplexity:>8.2f}{ev.translation['bleu']:>7.2f}{ev.translation['chrf']:>7.2f}")
    print(f"\nTest: the first {len(refs)} test verses, beam 4. {first[0]['eval'].translation['bleu_signature']}")
    for name in CANDIDATES:
        print(f"\n{name} − baseline")
        for key, metric in (("chrf", "chrF"), ("bleu", "BLEU")):
            scores = {n: {seed: next(r for r in runs if r["name"] == n)["eval"].translation[key]
                          for seed, runs in by_seed.items()} for n in ("baseline", name)}
            diff = paired_difference(scores[name], scores["baseline"])
            deltas = [scores[name][s] - scores["baseline"][s] for s in by_seed]
            t = diff.mean / (diff.std / np.sqrt(len(deltas))) if diff.std > 0 else float("nan")  # paired t
            print(f"  {metric}: baseline {summarize(list(scores['baseline'].values())).format(2)}, {name} "
                  f"{summarize(list(scores[name].values())).format(2)}; Δ paired by seed {diff.mean:+.2f} ± "
                  f"{diff.std:.2f} (t = {t:.1f}; per seed {', '.join(f'{d:+.2f}' for d in deltas)})")
        for seed, results in by_seed.items():
            base = next(r for r in results if r["name"] == "baseline")
            arm = next(r for r in results if r["name"] == name)
            test = paired_bootstrap(base["eval"].hypotheses, arm["eval"].hypotheses, refs)
            for key, metric in (("chrf", "chrF"), ("bleu", "BLEU")):
                print(demo_cmd.noise_line(metric, test[key], f"seed {seed}"))
        ppl = [next(r for r in runs if r["name"] == name)["eval"].perplexity
               - next(r for r in runs if r["name"] == "baseline")["eval"].perplexity for runs in by_seed.values()]
        print(f"  test perplexity Δ {np.mean(ppl):+.2f} ± {np.std(ppl, ddof=1) if len(ppl) > 1 else 0:.2f}")
    print(f"\ntotal wall time {(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
