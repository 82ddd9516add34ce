"""The ``synattn`` command: one subcommand per step of the pipeline.

Every subcommand lives in its own module of this package and exposes ``register(subparsers)``.
Errors are printed as one line without a traceback: bad input, options or configs
(:class:`synattn.errors.SynattnError`) exit with status 2, failures of the run itself
(:class:`synattn.errors.RunFailure`, or an operating-system error such as a full disk) with status 1.
``--debug`` (or the environment variable ``SYNATTN_DEBUG=1``) shows the traceback instead. Every
error line is :func:`synattn.errors.one_line`: control characters escaped, long values cut.
"""

from __future__ import annotations

import argparse
import errno
import logging
import sys

from synattn import __version__
from synattn.cli import (
    corpus_cmd,
    demo_cmd,
    environment,
    evaluate_cmd,
    induce_cmd,
    interrupts_raised,
    parse_cmd,
    prepare_cmd,
    reproduce_cmd,
    stats_cmd,
    train_cmd,
    translate_cmd,
    viz_cmd,
)
from synattn.cli.options import thread_count
from synattn.errors import RunFailure, SynattnError, UsageError, one_line

SUBCOMMANDS = (demo_cmd, prepare_cmd, train_cmd, translate_cmd, evaluate_cmd, induce_cmd, viz_cmd, reproduce_cmd,
               parse_cmd, corpus_cmd, stats_cmd)


class OneLineErrors(argparse.ArgumentParser):
    """argparse's parser with its errors on one line, as synattn's other errors (exit status 2):
    ``synattn COMMAND: error: MESSAGE`` and where to read the options, without the usage block."""

    def error(self, message: str):
        command = " ".join(self.prog.split()[:2])  # a study's options are those of `synattn reproduce`
        self.exit(2, f"{command}: error: {one_line(message)} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="synattn",
        description="Syntax-aware and structured attention for Transformers.",
        epilog="Run 'synattn COMMAND --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"synattn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks instead of one-line errors (also: SYNATTN_DEBUG=1)")
    parser.add_argument("--threads", dest="torch_threads", type=thread_count, metavar="N",
                        help="torch CPU threads of any command (synattn --threads 1 train ...; default: "
                             "torch's, which OMP_NUM_THREADS sets); demo and reproduce also take their own")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named with the command they were given to, not the top-level parser
        shown = " ".join(a if a.isprintable() else ascii(a) for a in unknown)  # the message stays one line
        parser.exit(2, f"synattn {args.command}: error: unrecognized arguments: {one_line(shown)} "
                       f"(see 'synattn {args.command} --help')\n")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    try:
        debug = environment.check() or args.debug  # (SYNATTN_DEBUG and SYNATTN_STRUCTS_BACKEND)
    except UsageError as err:
        print(f"synattn {args.command}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    try:
        with interrupts_raised():  # Ctrl-C: KeyboardInterrupt here, exit status 130 before and after
            return int(args.func(args) or 0)
    except (SynattnError, OSError, MemoryError) as err:
        if debug:
            raise
        print(f"synattn {args.command}: error: {_one_line(err)}", file=sys.stderr)
        if isinstance(err, OSError) and err.errno == errno.ENAMETOOLONG:
            return 2  # a path too long to be a file's: the input is wrong, not the run
        return 2 if isinstance(err, SynattnError) and not isinstance(err, RunFailure) else 1
    except KeyboardInterrupt:
        print(f"synattn {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (an OSError names its file and the system's cause)."""
    if isinstance(err, OSError) and not isinstance(err, SynattnError) and err.strerror:
        where = f"{err.filename}: " if err.filename else ""
        text = f"{where}{err.strerror}"
    elif isinstance(err, MemoryError):
        text = "out of memory" + (f" ({err})" if str(err) else "")
    else:
        text = str(err) or type(err).__name__
    return one_line(text)


if __name__ == "__main__":
    sys.exit(main())
