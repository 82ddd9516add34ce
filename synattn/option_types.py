"""Argument types of the ``synattn`` commands and studies that check ranges where an option enters.

A value out of range is an argparse error: the command prints its usage and
``synattn CMD: error: argument --batch-size: must be a positive integer, got -3`` and exits with
status 2.
"""

from __future__ import annotations

import argparse
import math

from synattn.errors import brief


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer ≥ 1 (batch sizes, beam sizes, limits)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {brief(value)}")
    return value


def int_in(low: int, high: int, why: str = ""):
    """An integer in ``[low, high]``; ``why`` says what the upper bound is for."""

    def parse(text: str) -> int:
        value = positive_int(text) if low == 1 else _int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:,}, got {brief(value)}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}{why}, got {brief(value)}")
        return value

    parse.__name__ = "integer"
    return parse


MAX_THREADS = 1024
"""The most torch CPU threads a command takes (``--threads``): beyond the cores of any machine
this runs on, and a count in the thousands ends in the BLAS library failing to allocate its
threads' memory rather than in an error naming the option."""

thread_count = int_in(1, MAX_THREADS, " (threads; more than the machine's cores only slow it down)")
"""``--threads N``: 1 to :data:`MAX_THREADS`."""


MAX_SEEDS = 1000
"""The most seeds per arm of a study or the demo (``--seeds``)."""

MAX_UPDATES = 10**9
"""The largest budget in updates of a study's or the demo's runs (``--budget updates N``, ``--updates``)."""

MAX_MINUTES = 10**6
"""The largest budget in minutes of one run (about two years): more is no budget, and its
seconds overflow the schedule's arithmetic."""

seed_count = int_in(1, MAX_SEEDS, " (seeds)")
"""``--seeds N`` of a study or the demo: 1 to :data:`MAX_SEEDS`."""

update_count = int_in(1, MAX_UPDATES, " (updates)")
"""A budget in updates: 1 to :data:`MAX_UPDATES`."""


def budget_minutes(text: str) -> float:
    """A budget in minutes: above 0, at most :data:`MAX_MINUTES`."""
    value = positive_float(text)
    if value > MAX_MINUTES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_MINUTES:,} minutes, got {text}")
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
