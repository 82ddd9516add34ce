"""``synattn evaluate``: BLEU/chrF with signatures, perplexity, supervised-head attachment and
attention-head agreement with trees, for a trained run on a split of its prepared dataset.

For a masked LM, the masked positions are drawn with seed 0, so that every evaluation of a
checkpoint gives the same perplexity; the validation during training draws its own, so its
perplexity of the same checkpoint differs a little."""

from __future__ import annotations

import argparse
import json
import sys

from synattn.cli.checks import check_vocabulary
from synattn.cli.common import run_inputs
from synattn.cli.options import positive_int, split_name
from synattn.cli.paths import check_apart, input_folder, output_file
from synattn.evaluate.runner import evaluate_run, load_run
from synattn.io import atomic_write
from synattn.runs import check_dataset


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="BLEU/chrF, perplexity, supervised-head UAS, head agreement",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run directory of 'synattn train'")
    p.add_argument("--checkpoint", default="best",
                   help="best (falls back to last when the run never validated), last, a checkpoint of the run "
                        "(ckpt_000500, in RUN/checkpoints or RUN/snapshots) or a checkpoint folder")
    p.add_argument("--split", type=split_name, default="test", help="split of the prepared dataset (default test)")
    p.add_argument("--data", help="prepared dataset folder (default: the run's)")
    p.add_argument("--beam", type=positive_int, help="beam size (default: the run's eval.beam)")
    p.add_argument("--no-translate", action="store_true", help="skip translation (no BLEU)")
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument("--hypotheses", help="also write the translations here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    input_folder(args.run, "--run")
    if args.data is not None:
        input_folder(args.data, "--data")
    output_file(args.json, "--json")
    output_file(args.hypotheses, "--hypotheses")
    check_apart({"--json": args.json, "--hypotheses": args.hypotheses}, run_inputs(args))
    model, exp, checkpoint = load_run(args.run, args.checkpoint)
    if args.data:  # the run's fingerprint names the difference and the way out first
        check_dataset(args.run, args.data)
    check_vocabulary(model, exp.data, args.data or exp.data, args.split)
    print(f"evaluating {checkpoint}", file=sys.stderr)
    result = evaluate_run(model, exp, args.split, data=args.data, beam=args.beam,
                          translate=not args.no_translate)
    print(result.format())
    if args.json:
        with atomic_write(args.json) as f:
            json.dump(result.to_dict(), f, indent=1)
    if args.hypotheses and result.hypotheses is not None:
        with atomic_write(args.hypotheses) as f:
            f.writelines(h + "\n" for h in result.hypotheses)
    return 0
