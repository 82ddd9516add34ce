"""The ``synattn`` command: one subcommand per step of the pipeline.

Every subcommand lives in its own module of this package and exposes ``register(subparsers)``.
Errors for bad input (:class:`synattn.errors.SynattnError`) are printed as one line, exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from synattn import __version__
from synattn.cli import (corpus_cmd, demo_cmd, evaluate_cmd, induce_cmd, parse_cmd, prepare_cmd, stats_cmd,
                         train_cmd, translate_cmd, viz_cmd)
from synattn.errors import SynattnError

SUBCOMMANDS = (demo_cmd, prepare_cmd, train_cmd, translate_cmd, evaluate_cmd, induce_cmd, viz_cmd, parse_cmd,
               corpus_cmd, stats_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="synattn",
        description="Syntax-aware and structured attention for Transformers.",
        epilog="Run 'synattn COMMAND --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"synattn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except SynattnError as err:
        print(f"synattn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"synattn {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
