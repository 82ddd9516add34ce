"""``synattn reproduce STUDY``: rerunnable studies that show each method's effect against its
baseline, on the same data and budget, with the noise measured over seeds.

  synattn reproduce --list
  synattn reproduce supervised-head --src-trees train=en_ewt-ud-train.conllu dev=en_ewt-ud-dev.conllu
  synattn reproduce mt-syntax --arms baseline tree-distance --seeds 2 --minutes 45
  synattn reproduce mt-syntax --arms baseline tree-distance --seeds 3 --budget updates 900
  synattn reproduce mt-syntax --sweep bet-sg --seeds 3 --budget updates 900
  synattn reproduce mt-syntax --arms baseline traversal --seeds 3 --budget updates 900 --jobs 2 --threads 1

A study trains every arm with every seed for the same minutes of training (``--budget updates N``:
to the same update), scores each run and writes OUT (default outputs/reproduce/STUDY): README.md
(the table), results.json, plots/, the exact configs and the commands. It is resumable: stopped
(Ctrl-C, kill, a crash), the same command continues from the last checkpoints and keeps every run
already scored. ``--jobs N`` trains N runs at once, each in a process of its own. ``--toy`` runs
the whole study at a tiny size in minutes (what the test suite does; the treebank studies on the
package's own tiny treebank when no --src-trees is given).
docs/reproduce.md describes each study, its choices and the numbers measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

from synattn.cli.options import budget_minutes, int_in, seed_count, thread_count, update_count
from synattn.data.prepared import holds_only_a_dataset
from synattn.errors import UsageError
from synattn.folders import FolderKind
from synattn.reproduce.study import Budget


def _study_before_markers(folder: Path) -> bool:
    """A results folder of a version that wrote no marker (the ``commands.sh`` a study writes), or a
    folder that holds nothing but a prepared dataset in ``data/``: the study reuses it when it was
    prepared with the study's settings and stops otherwise (``prepare`` refuses another dataset)."""
    if holds_only_a_dataset(folder):
        return True
    try:
        with open(folder / "commands.sh", encoding="utf-8", errors="replace") as f:
            return "# The command that made this folder" in f.read(4096)
    except OSError:
        return False


STUDY = FolderKind(".synattn-study", "a results folder of 'synattn reproduce'",
                   made_before_markers=_study_before_markers)
"""A study's results folder (:mod:`synattn.folders`)."""

TOY_MINUTES = 0.5
"""The budget of a ``--toy`` run unless ``--minutes`` is given."""

MAX_JOBS = 256
"""The most runs a study trains at once (``--jobs``), each in a process of its own."""


def register(sub: argparse._SubParsersAction) -> None:
    from synattn.reproduce import STUDIES

    p = sub.add_parser("reproduce", help="rerunnable studies: each method against its baseline, with noise",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="list the studies and exit")
    studies = p.add_subparsers(dest="study", metavar="STUDY")
    for name, study in STUDIES.items():
        description = f"{study.title}.\n\n{textwrap.fill(study.question, 100)}"
        s = studies.add_parser(name, help=study.title, description=description,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        s.add_argument("-o", "--out", help=f"results folder (default outputs/reproduce/{name})")
        s.add_argument("--seeds", type=seed_count, default=study.seeds,
                       help=f"seeds per arm (default {study.seeds})")
        s.add_argument("--minutes", type=budget_minutes,
                       help=f"training minutes per run (default {study.minutes:g})")
        s.add_argument("--budget", nargs=2, metavar=("KIND", "N"),
                       help="every run's budget: 'updates N' (every run ends at update N, and the learning rate "
                            "decays over N updates) or 'minutes N' (as --minutes; the default)")
        sweep_arms = [a.name for a in study.known_arms()[len(study.arms):]]
        s.add_argument("--arms", nargs="+", metavar="ARM", choices=[a.name for a in study.known_arms()],
                       help=f"only these arms (default: {', '.join(a.name for a in study.arms)}"
                            + (f"; or any sweep arm: {', '.join(sweep_arms)}" if sweep_arms else "")
                            + f"); the first arm, {study.arms[0].name}, is always run (and first): the "
                              "others are compared with it, and trained in the order named")
        if study.sweeps:
            groups = "; ".join(f"{g}: {', '.join(a.name for a in arms)}" for g, arms in study.sweeps.items())
            s.add_argument("--sweep", nargs="+", metavar="GROUP", choices=[*study.sweeps, "all"],
                           help=f"also run these groups of arms, not run by default (all: every group): "
                                f"{groups}")
        s.add_argument("--toy", action="store_true", help="tiny data, model and budget (a smoke test)")
        s.add_argument("--threads", type=thread_count,
                       help="torch CPU threads (of each run with --jobs; default: torch's, or the cores shared "
                            "out among the jobs)")
        s.add_argument("--jobs", type=int_in(1, MAX_JOBS, " (runs at once)"), default=1, metavar="N",
                       help="train N runs at once, each in a process of its own (default 1: one after the "
                            "other); e.g. --jobs 2 --threads 1 on two cores")
        study.add_arguments(s)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from synattn.reproduce import STUDIES, Context
    from synattn.reproduce.runner import run_study

    if args.list or not args.study:
        if not args.list:
            raise UsageError("name a study (synattn reproduce --list shows them)")
        for name, study in STUDIES.items():
            arm_names = ", ".join(a.name for a in study.arms)
            print(f"{name:22} {study.title}\n{'':22} arms: {arm_names}; default {study.seeds} seeds × "
                  f"{study.minutes:g} min")
            if study.sweeps:
                print(f"{'':22} sweeps (--sweep GROUP, not run by default): "
                      + "; ".join(f"{g} ({len(arms)} arms)" for g, arms in study.sweeps.items()))
        return 0
    study = STUDIES[args.study]
    # every option is checked before the folder is touched: the parser checked each value, here they are
    # checked together and against the files and the model they name
    arms = study.select(args.arms, getattr(args, "sweep", None))
    budget = budget_of(args, study)
    study.check(args, arms)
    out = Path(args.out or Path("outputs") / "reproduce" / (f"{study.name}-toy" if args.toy else study.name))
    from synattn.cli.paths import output_folder
    from synattn.folders import check_own_folder, taken
    from synattn.reproduce.guard import FolderGuard, refusal

    output_folder(out, "-o")
    check_own_folder(out, "-o", STUDY)
    if args.jobs > 1 and not args.threads:  # N processes of torch's default threads each would fight for the cores
        args.threads = max(1, (os.cpu_count() or 1) // args.jobs)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    argv = ["reproduce"] + sys.argv[sys.argv.index("reproduce") + 1:] if "reproduce" in sys.argv else [
        "reproduce", study.name]
    guard = FolderGuard(out)  # a study refused before its runs start leaves the folder as it was
    try:
        with taken(out, STUDY):
            ctx = Context(out=out.resolve(), args=args, toy=args.toy, guard=guard)  # configs work from anywhere
            results = run_study(study, ctx, args.seeds, budget, arms, argv, jobs=args.jobs, threads=args.threads,
                                first=args.arms)
    except Exception as err:
        if refusal(err) and not guard.started and out.is_dir():
            guard.restore_files()  # (a lock file as it was, once its lock is released)
        raise
    print((out / "README.md").read_text(encoding="utf-8"))
    print(f"results: {out}/README.md, {out}/results.json, plots in {out}/plots", file=sys.stderr)
    return 0 if results["complete"] else 1


def budget_of(args: argparse.Namespace, study) -> Budget:
    """The runs' :class:`~synattn.reproduce.study.Budget` from ``--minutes`` / ``--budget KIND N``.

    Raises:
        UsageError: both options, an unknown kind, or N that is not a positive number (at most
            :data:`~synattn.cli.options.MAX_UPDATES` updates or
            :data:`~synattn.cli.options.MAX_MINUTES` minutes).
    """
    if args.budget is None:
        # a toy run stops after six updates; its minutes only bound a slow first update (kernels compiled)
        minutes = args.minutes if args.minutes is not None else TOY_MINUTES if args.toy else study.minutes
        return Budget(minutes=minutes)
    if args.minutes is not None:
        raise UsageError("--budget and --minutes: give one budget (--budget minutes N is --minutes N)")
    kind, amount = args.budget
    try:
        if kind == "updates":
            return Budget(updates=update_count(amount))
        if kind == "minutes":
            return Budget(minutes=budget_minutes(amount))
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--budget {kind} {amount}: {e}") from None
    raise UsageError(f"--budget {kind}: the budget is 'updates N' or 'minutes N'")
