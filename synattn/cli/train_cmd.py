"""``synattn train``: train a model of an experiment config on a prepared dataset.

  synattn train --config configs/tree_distance.yaml --run-dir runs/tree train.max_epochs=5
  torchrun --nproc_per_node=2 -m synattn.cli train --config configs/baseline.yaml --run-dir runs/b

Overrides are ``key.sub=value`` (values read as YAML). ``--resume`` continues the run in
``--run-dir`` exactly where its last checkpoint left it, with the run's own ``config.yaml`` (every
earlier override holds; overrides given now apply on top, e.g. ``train.max_epochs=20``).

The whole config is checked before any data is read, and the dataset against the config before
the model is built: a mistake is one line naming the file (or override), the key and the cause.
The run directory gets its own copy of the tokenizers and label vocabularies and a fingerprint
of the dataset (:mod:`synattn.runs`). The training itself is
:func:`synattn.train.experiment_run.train_experiment`, as for the studies of ``synattn reproduce``;
this module reads the arguments and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import textwrap
from pathlib import Path

from synattn.cli.paths import check_apart, input_file, output_folder
from synattn.config_io import ConfigFileError, read_yaml, without_known_keys
from synattn.errors import ConfigError
from synattn.evaluate.translation import translation_metrics
from synattn.folders import check_own_folder
from synattn.locks import FolderLock
from synattn.runs import RUN
from synattn.train import resolve_checkpoint
from synattn.train.distributed import check_device
from synattn.train.experiment import ExperimentConfig
from synattn.train.experiment_run import TrainingInterrupted, train_experiment


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


def load_experiment(args: argparse.Namespace,
                    hold: contextlib.ExitStack | None = None) -> tuple[ExperimentConfig, Path]:
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


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as hold:  # the dataset is locked against `prepare` until the run ends
        try:
            exp, run_dir = load_experiment(args, hold)
        except ConfigError as err:
            raise keys_listed(err) from None
        return _train(args, exp, run_dir)


def keys_listed(err: ConfigError, width: int = 100) -> ConfigError:
    """An unknown key's error (one that carries ``known_keys``) without its long list of keys,
    which is printed to stderr before it, wrapped at ``width`` columns; another error as it is."""
    known = getattr(err, "known_keys", None)
    if not known:
        return err
    print("known keys:\n" + textwrap.fill(", ".join(known), width, initial_indent="  ", subsequent_indent="  ",
                                           break_on_hyphens=False), file=sys.stderr)

    def shorter(message: str) -> str:
        return without_known_keys(message) + "; its keys are listed above"

    if isinstance(err, ConfigFileError):
        return ConfigFileError(shorter(err.cause), err.path)
    return ConfigError(shorter(str(err)))


def _train(args: argparse.Namespace, exp: ExperimentConfig, run_dir: Path) -> int:
    try:
        trained = train_experiment(exp, run_dir, args.resume, valid_metrics=translation_metrics)
    except TrainingInterrupted as stop:
        if stop.is_main:
            kept = (f"its last checkpoint ({stop.checkpoint.name}) is kept: continue with 'synattn train --run-dir "
                    f"{run_dir} --resume'" if stop.checkpoint else "it had not saved a checkpoint yet")
            by = "" if stop.signum == signal.SIGINT else f" by {signal.Signals(stop.signum).name}"
            print(f"stopped{by} at update {stop.step}; {kept}", file=sys.stderr)
        if stop.signum != signal.SIGINT:
            raise SystemExit(128 + stop.signum) from None  # (as a process ended by the signal is reported)
        raise
    if trained.is_main:
        result = trained.result
        best = "none" if result.best_valid_loss is None else f"{result.best_valid_loss:.4f}"
        print(f"stopped by {result.stopped_by} at step {result.step} (epoch {trained.epochs_started}); best valid "
              f"{exp.train.best_metric} {best}; last checkpoint {result.checkpoint}", file=sys.stderr)
    return 0
