"""``synattn train``: train a model of an experiment config on a prepared dataset.

  synattn train --config configs/tree_distance.yaml --run-dir runs/tree train.max_epochs=5
  torchrun --nproc_per_node=2 -m synattn.cli train --config configs/baseline.yaml --run-dir runs/b

Overrides are ``key.sub=value`` (values read as YAML). ``--resume`` continues the run in
``--run-dir`` exactly where its last checkpoint left it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from synattn.data.batching import PreparedDataset
from synattn.experiment import ExperimentConfig, build_model
from synattn.train import Trainer, task_for


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model (mt, lm, mlm) on a prepared dataset",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiment YAML (task, data, model, train, eval)")
    p.add_argument("--run-dir", help="where checkpoints and logs go (default runs/<config name>)")
    p.add_argument("--data", help="prepared dataset folder (overrides the config's data)")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. train.lr=1e-3 model.encoder.layers=2")
    p.set_defaults(func=run)


def bleu_hook(model, exp: ExperimentConfig, dev: PreparedDataset):
    """A ``valid_metrics`` callable translating the first ``eval.bleu_sentences`` dev sentences."""
    from synattn.evaluate import translation_scores
    from synattn.generate.translate import Translator

    count = min(exp.eval.bleu_sentences, len(dev))
    examples = [dev[i] for i in range(count)]
    references = dev.text("tgt")[:count]

    def metrics(trained) -> dict[str, float]:
        ev = exp.eval
        translator = Translator(getattr(trained, "module", trained), exp.data, ev.beam, ev.length_penalty,
                                ev.max_len_a, ev.max_len_b, ev.batch_size)
        scores = translation_scores(translator.translate(examples), references)
        return {"bleu": scores.bleu, "chrf": scores.chrf}

    return metrics


def run(args: argparse.Namespace) -> int:
    exp = ExperimentConfig.from_yaml(args.config, args.overrides)
    if args.data:
        exp.data = args.data
    run_dir = Path(args.run_dir or Path("runs") / Path(args.config).stem)
    torch.manual_seed(exp.train.seed)  # train.seed decides the initial weights too
    model = build_model(exp)
    train = PreparedDataset(exp.data, "train")
    dev = PreparedDataset(exp.data, "dev") if "dev" in train.manifest["splits"] else None
    metrics = bleu_hook(model, exp, dev) if exp.task == "mt" and dev is not None and exp.eval.bleu_sentences else None
    trainer = Trainer(model, task_for(model, exp.train.label_smoothing), exp.train, train, run_dir,
                      valid_data=dev, valid_metrics=metrics, run_config={"experiment": exp.to_dict()})
    try:
        result = trainer.train(resume=args.resume)
    finally:
        trainer.close()
    if trainer.dist.is_main:
        best = "none" if result.best_valid_loss is None else f"{result.best_valid_loss:.4f}"
        print(f"stopped by {result.stopped_by} at step {result.step} (epoch {result.epoch}); best valid "
              f"{exp.train.best_metric} {best}; last checkpoint {result.checkpoint}", file=sys.stderr)
    return 0
