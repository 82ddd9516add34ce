"""The checks every public entry of :mod:`synattn.structs` makes on its arguments, in one place.

- score tensors are ``torch.Tensor`` of a floating dtype (a numpy array is refused with the
  conversion to use, not an ``AttributeError`` from deep inside);
- flags (``multiroot``, ``scan``) are real booleans: ``multiroot="no"`` would otherwise count
  as True;
- NaN among the scores that matter is refused by
  :func:`~synattn.structs.scores.check_scores` (the same reduction that checks their range),
  on every backend alike;
- counts (``sample(count)``, ``kbest(k)``) are whole numbers >= 1, ``kbest`` bounded by memory.

Every failure is a ``ValueError`` naming the argument.
"""

from __future__ import annotations

import operator
from typing import Literal, overload

import numpy as np
import torch

from synattn.errors import brief
from synattn.limits import check_memory


def score_tensor(x: object, name: str, what: str) -> torch.Tensor:
    """``x`` if it is a floating-point ``torch.Tensor``, else a ValueError naming ``name``
    (``what``: the class, for the message)."""
    if not isinstance(x, torch.Tensor):
        hint = " (convert it with torch.as_tensor)" if isinstance(x, np.ndarray) else ""
        raise ValueError(f"{what}: {name} must be a torch.Tensor, got {type(x).__name__}{hint}")
    if not x.is_floating_point():
        raise ValueError(f"{what}: {name} must be a floating-point tensor (log-scores), got {x.dtype}")
    return x


@overload
def flag(value: object, name: str, what: str, optional: Literal[False] = False) -> bool: ...
@overload
def flag(value: object, name: str, what: str, optional: bool) -> bool | None: ...
def flag(value: object, name: str, what: str, optional: bool = False) -> bool | None:
    """``value`` as a bool if it is one (Python, numpy or a one-element bool tensor), else a
    ValueError naming ``name``; ``optional``: None is allowed too."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.numel() == 1:
        return bool(value)
    allowed = "True, False or None" if optional else "True or False"
    raise ValueError(f"{what}: {name} must be {allowed}, got {type(value).__name__} {brief(value)}")


def count(value: object, name: str) -> int:
    """``value`` as an int if it is a whole number >= 1 (int or numpy integer, not bool), else a
    ValueError naming ``name``."""
    try:
        whole: int | None = operator.index(value)  # type: ignore[arg-type]  # TypeError: refused below
    except TypeError:
        whole = None
    if whole is None or isinstance(value, bool) or whole < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {brief(value)}")
    return whole


def kbest_count(k: object, batch: int, bytes_per_structure: int) -> int:
    """``k`` of ``kbest(k)``: a whole number >= 1 whose ``[batch, k]`` scores and structures
    (``bytes_per_structure`` each) fit in memory."""
    k = count(k, "kbest: k")
    check_memory("kbest: k", k, batch * k * (8 + bytes_per_structure),
                 f"the {batch} x {k} best structures")
    return k


def length_tensor(lengths: object, device: torch.device, what: str = "lengths") -> torch.Tensor:
    """``lengths`` as a long tensor on ``device``: integers, or floats that are whole numbers.

    A fractional length (``torch.tensor([3.5, 2.0])``) is a ValueError rather than a silent
    truncation to 3; booleans and complex numbers are a TypeError. Integer tensors cost nothing
    more (no read back to the host); only floating ones are checked value by value."""
    try:
        t = torch.as_tensor(lengths, device=device)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{what} must be integers (a list or an integer tensor), got "
                        f"{type(lengths).__name__}: {error}") from None
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{what} must be integers, got a {t.dtype} tensor")
    if t.is_floating_point():
        if not bool(((t == t.round()) & t.isfinite()).all()):
            raise ValueError(f"{what} must be whole numbers, got {brief(t.tolist())}")
    return t.long()
