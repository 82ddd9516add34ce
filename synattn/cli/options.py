"""Argument types of the ``synattn`` commands: those of :mod:`synattn.option_types` (shared with the
studies of :mod:`synattn.reproduce`) and the ones that read a later step's rules."""

from __future__ import annotations

import argparse

from synattn.option_types import (  # noqa: F401  (the commands import them from here)
    MAX_MINUTES,
    MAX_SEEDS,
    MAX_THREADS,
    MAX_UPDATES,
    budget_minutes,
    finite_float,
    float_in,
    int_in,
    nonnegative_int,
    positive_float,
    positive_int,
    seed_count,
    thread_count,
    update_count,
)


def split_name(text: str) -> str:
    """A split of a prepared dataset: a plain folder name (see :func:`synattn.data.prepare.check_split_name`)."""
    from synattn.data.prepare import check_split_name
    from synattn.errors import UsageError

    try:
        return check_split_name(text, "--split")
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err).split(": ", 1)[1]) from None
