"""Bounds that every config value meets when it is read, before anything is built from it.

A config file is data from a user: a value far outside what any run uses is refused with one line
naming the key, instead of a traceback later (an allocator's error for a million layers, numpy's
for a negative seed, a NaN loss for ``lr: 1e308``, a run of ``max_epochs: 1e12`` bounded only by
chance). Three kinds of bound:

- the shape of the YAML itself: nested at most :data:`MAX_DEPTH` levels (:func:`check_depth`;
  a deeper file would exhaust Python's recursion);
- every integer and number of every config section (:func:`check_number`, called by the strict
  type check of :mod:`synattn.config_io`): integers within ``±MAX_INT`` (:data:`MAX_INT`),
  numbers within ``±MAX_FLOAT``;
- the ranges of particular keys, checked by each config's ``check`` with :func:`at_most` and
  :func:`within`: layer counts, seeds, learning rates, epochs and steps.
"""

from __future__ import annotations

from typing import Any

from synattn.errors import ConfigError, brief

MAX_DEPTH = 32
"""The deepest nesting of mappings and lists a config file may have (synattn's own use 4)."""

MAX_INT = 10 ** 15
"""The largest magnitude of any integer in a config (far beyond every count a run uses)."""

MAX_FLOAT = 1e15
"""The largest magnitude of any number in a config."""

MAX_LAYERS = 1000
"""The most layers of one encoder or decoder stack."""

MAX_SEED = 2 ** 32 - 1
"""The largest seed (numpy's generators take seeds in ``[0, 2**32)``)."""

MAX_LR = 10.0
"""The largest learning rate (Adam's are around 1e-4 to 1e-3; beyond this a run only diverges)."""

MAX_EPOCHS = 1_000_000
MAX_STEPS = 10 ** 10
MAX_MINUTES = 10 * 365 * 24 * 60.0
"""Bounds of a run's budget (a million epochs, ten billion updates, ten years)."""


def check_depth(data: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Raises :class:`ConfigError` when ``data`` (parsed YAML) nests mappings and lists more than
    ``limit`` levels deep; walks it without recursion (so a deep value cannot exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen: set[int] = set()
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        if depth >= limit:
            raise ConfigError(f"{where}: nested more than {limit} levels deep (a config is a few "
                              "levels of sections and keys)")
        seen.add(id(node))  # (a YAML alias may share a node: visited once)
        children = list(node.values()) + list(node.keys()) if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)


def check_number(value: Any, where: str) -> None:
    """Raises :class:`ConfigError` naming ``where`` when the int or float ``value`` exceeds
    :data:`MAX_INT` / :data:`MAX_FLOAT` in magnitude (bools are left alone)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise ConfigError(f"{where}: {brief(value)} is out of range (integers in a config are at most "
                          f"{MAX_INT:.0e} in magnitude)")
    if isinstance(value, float) and abs(value) > MAX_FLOAT:
        raise ConfigError(f"{where}: {brief(value)} is out of range (numbers in a config are at most "
                          f"{MAX_FLOAT:.0e} in magnitude)")


def at_most(key: str, value: float | None, limit: float, why: str = "") -> None:
    """Raises :class:`ConfigError` ``key=value must be at most limit`` (``why`` appended) when
    ``value`` is set and larger than ``limit``."""
    if value is not None and value > limit:
        shown = f"{limit:g}" if isinstance(limit, float) and not limit.is_integer() else str(int(limit))
        raise ConfigError(f"{key}={brief(value)} must be at most {shown}{f' ({why})' if why else ''}")


def within(key: str, value: int, low: int, high: int, why: str = "") -> None:
    """Raises :class:`ConfigError` naming ``key`` when the integer ``value`` is outside ``[low, high]``."""
    if not low <= value <= high:
        raise ConfigError(f"{key}={brief(value)} must be in [{low}, {high}]{f' ({why})' if why else ''}")
