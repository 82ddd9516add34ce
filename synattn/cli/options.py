"""Argument types of the ``synattn`` commands that check ranges where an option enters.

A value out of range is an argparse error: the command prints its usage and
``synattn CMD: error: argument --batch-size: must be a positive integer, got -3`` and exits with
status 2.
"""

from __future__ import annotations

import argparse
import math


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer ≥ 1 (batch sizes, beam sizes, limits)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """An integer ≥ 0 (0-based indices, seeds)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def float_in(low: float, high: float):
    """A finite float in ``[low, high]``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def positive_float(text: str) -> float:
    """A finite float above 0 (e.g. minutes of a budget)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def finite_float(text: str) -> float:
    """Any finite float."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def split_name(text: str) -> str:
    """A split of a prepared dataset: a plain folder name (see :func:`synattn.data.prepare.check_split_name`)."""
    from synattn.data.prepare import check_split_name
    from synattn.errors import UsageError

    try:
        return check_split_name(text, "--split")
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err).split(": ", 1)[1]) from None
