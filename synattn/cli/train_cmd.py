"""``synattn train``: train a model of an experiment config on a prepared dataset.

  synattn train --config configs/tree_distance.yaml --run-dir runs/tree train.max_epochs=5
  torchrun --nproc_per_node=2 -m synattn.cli train --config configs/baseline.yaml --run-dir runs/b

Overrides are ``key.sub=value`` (values read as YAML). ``--resume`` continues the run in
``--run-dir`` exactly where its last checkpoint left it, with the run's own ``config.yaml`` (every
earlier override holds; overrides given now apply on top, e.g. ``train.max_epochs=20``).

The whole config is checked before any data is read, and the dataset against the config before
the model is built: a mistake is one line naming the file (or override), the key and the cause.
The run directory gets its own copy of the tokenizers and label vocabularies and a fingerprint
of the dataset (:mod:`synattn.runs`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch

from synattn.cli.paths import check_apart, input_file, output_folder
from synattn.data.batching import PreparedDataset
from synattn.data.validate import check_dataset, check_split
from synattn.errors import ConfigError
from synattn.experiment import ExperimentConfig, build_model
from synattn.folders import check_own_folder
from synattn.locks import FolderLock
from synattn.config_io import read_yaml
from synattn.runs import RUN, check_dataset as check_run_dataset, run_vocab, save_run_vocab
from synattn.train import Trainer, resolve_checkpoint, task_for
from synattn.train.distributed import check_device


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model (mt, lm, mlm) on a prepared dataset",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="experiment YAML (task, data, model, train, eval); not needed with --resume")
    p.add_argument("--run-dir", help="where checkpoints and logs go (default runs/<config name>)")
    p.add_argument("--data", help="prepared dataset folder (overrides the config's data)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir with its own config.yaml (overrides apply on top)")
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


def load_experiment(args: argparse.Namespace, hold: contextlib.ExitStack | None = None) -> tuple[ExperimentConfig, Path]:
    """The checked experiment config of the command and its run directory; with ``--resume`` of a
    run that has checkpoints, the run's own ``config.yaml`` plus the overrides. ``hold``: takes a
    reader's lock on the dataset (:class:`synattn.locks.FolderLock`) before checking it, kept
    until ``hold`` closes (a ``prepare`` writing it meanwhile is named, and none may start)."""
    if args.config is None and not (args.resume and args.run_dir):
        raise ConfigError("--config is required (without it, --resume --run-dir RUN continues RUN with its "
                          "own config)")
    if args.config is not None:
        input_file(args.config, "--config")
    run_dir = output_folder(args.run_dir or Path("runs") / Path(args.config).stem, "--run-dir")
    check_own_folder(run_dir, "--run-dir", RUN)  # new, empty or a run: never a folder of the user's
    saved = run_dir / "config.yaml"
    if args.resume and resolve_checkpoint(run_dir) is not None and saved.is_file():
        raw = read_yaml(saved)
        if not isinstance(raw, dict) or not isinstance(raw.get("experiment"), dict):
            raise ConfigError(f"{saved}: no 'experiment' section: was this run trained by 'synattn train'?")
        if args.config is not None:
            print(f"resuming with the run's own config {saved} (and the overrides given now); {args.config} "
                  "is not read again", file=sys.stderr)
        exp = ExperimentConfig.from_sections(raw["experiment"], str(saved), args.overrides, args.data)
    elif args.config is None:
        what = "no config.yaml" if not saved.is_file() else "no checkpoint (it stopped before its first one)"
        raise ConfigError(f"--resume without --config: {run_dir} has {what} to continue from; start it "
                          "again with --config")
    else:
        exp = ExperimentConfig.from_yaml(args.config, args.overrides, args.data)
    if hold is not None:
        hold.enter_context(FolderLock(exp.data, "prepared dataset", shared=True))
    try:
        exp.check_data()
        check_device(exp.train.device)
    except ConfigError as err:
        raise exp.blame(err) from None
    exp.data = str(Path(exp.data).resolve())
    check_apart({"--run-dir": run_dir}, {"--config": args.config, "data": exp.data})
    return exp, run_dir


def _prepare_run_dir(run_dir: Path, exp: ExperimentConfig, resume: bool) -> None:
    """Copies the dataset's tokenizers and labels into the run (a new run), or checks that the
    dataset is the run's own (a run with checkpoints)."""
    started = resolve_checkpoint(run_dir) is not None
    if started and not resume:
        raise ConfigError(f"--run-dir {run_dir} already has checkpoints: resume it (--resume) or choose "
                          "another directory")
    if started and run_vocab(run_dir) is not None:
        check_run_dataset(run_dir, exp.data)
    elif int(os.environ.get("RANK", "0")) == 0:  # under torchrun, the first process writes
        save_run_vocab(run_dir, exp.data)


def check_training_data(folder: str | Path) -> None:
    """The dataset a run trains on, checked before anything is written: manifest, labels,
    sentencepiece models, and every array of ``train`` and ``dev`` with every stored index
    (:mod:`synattn.data.validate`; about a second for 30k sentence pairs)."""
    manifest = check_dataset(folder)
    for split in ("train", "dev"):
        if split in manifest["splits"] or split == "train":
            check_split(folder, split, manifest)


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as hold:  # the dataset is locked against `prepare` until the run ends
        exp, run_dir = load_experiment(args, hold)
        return _train(args, exp, run_dir)


def _train(args: argparse.Namespace, exp: ExperimentConfig, run_dir: Path) -> int:
    check_training_data(exp.data)
    lock = FolderLock(run_dir, "run directory")
    if int(os.environ.get("RANK", "0")) == 0:  # one writer, from before the run's tokenizers are copied
        lock.acquire()
    try:
        _prepare_run_dir(run_dir, exp, args.resume)
        torch.manual_seed(exp.train.seed)  # train.seed decides the initial weights too
        model = build_model(exp)
        train = PreparedDataset(exp.data, "train")
        dev = PreparedDataset(exp.data, "dev") if "dev" in train.manifest["splits"] else None
        translates = exp.kind.translates and dev is not None and exp.eval.bleu_sentences
        metrics = bleu_hook(model, exp, dev) if translates else None
        trainer = Trainer(model, task_for(model, exp.train.label_smoothing), exp.train, train, run_dir,
                          valid_data=dev, valid_metrics=metrics, run_config={"experiment": exp.to_dict()})
        try:
            result = trainer.train(resume=args.resume, lock=lock)
        except KeyboardInterrupt:
            if trainer.dist.is_main:
                last = resolve_checkpoint(run_dir)
                kept = (f"its last checkpoint ({last.name}) is kept: continue with 'synattn train --run-dir "
                        f"{run_dir} --resume'" if last else "it had not saved a checkpoint yet")
                print(f"stopped at update {trainer.step}; {kept}", file=sys.stderr)
            raise
        finally:
            trainer.close()
    finally:
        lock.release()
    if trainer.dist.is_main:
        best = "none" if result.best_valid_loss is None else f"{result.best_valid_loss:.4f}"
        print(f"stopped by {result.stopped_by} at step {result.step} (epoch {trainer.epochs_started}); best valid "
              f"{exp.train.best_metric} {best}; last checkpoint {result.checkpoint}", file=sys.stderr)
    return 0
