"""What a feature takes of its attention layer, and the one rule saying which two cannot share it.

A :class:`Claim` is declared by an attention feature (``AttentionFeature.claims()``) and, in config
terms, by a method of ``synattn.methods`` (``Method.claims``). It says

- which **heads** the owner replaces or trains: two claims on one head conflict;
- which **slot** of the layer it holds, a part a layer has one of (the Bird-Eye attention,
  the constituent prior): two claims on one slot conflict;
- which **direction** of self-attention it needs (``causal`` or ``bidirectional``): claims
  needing different ones conflict;
- whether it is **alone**: it replaces the distribution of every head, logit biases included, so
  no other feature can act in its layer;
- and, for methods, the **layers** where it holds (None: every layer); claims on different layers
  never conflict.

:func:`conflict` is the rule. :func:`find_conflict` applies it to the claims of several owners:
``synattn.methods.check_claims`` to the methods on in a stack config,
``synattn.attention.check_compatible`` to the features given to one attention module.

Example:
    >>> find_conflict([[Claim("SupervisedHead", (1,))], [Claim("SyntacticAttention", (0, 1))]])
    'SupervisedHead and SyntacticAttention cannot share a layer: both claim head 1'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DIRECTIONS = ("causal", "bidirectional")
"""The directions of self-attention a claim may need."""


@dataclass(frozen=True)
class Claim:
    """What one feature (or method) takes of its layer (see the module docstring).

    Attributes:
        label: the owner, as the error message names it: the feature's class
            (``SupervisedHead``) or the setting in config terms
            (``encoder.supervised_head (layer 3, head 0)``).
        heads: the head indices it replaces or trains.
        layers: the layers where it holds (None: every layer).
        slot: a part a layer has one of, as the error message names it.
        direction: ``causal`` or ``bidirectional`` when it needs one (None: either).
        alone: it replaces every head's distribution, so nothing else may act in its layer.
    """

    label: str
    heads: tuple[int, ...] = ()
    layers: frozenset[int] | None = None
    slot: str | None = None
    direction: str | None = None
    alone: bool = False

    def __post_init__(self) -> None:
        if self.direction is not None and self.direction not in DIRECTIONS:
            raise ValueError(f"claim of {self.label}: direction {self.direction!r}, expected one of {DIRECTIONS}")


def conflict(first: Claim, second: Claim) -> str | None:
    """Why the owners of ``first`` and ``second`` cannot share a layer (None: they compose)."""
    if first.layers is not None and second.layers is not None and not first.layers & second.layers:
        return None
    for claim in (first, second):
        if claim.alone:
            return (f"{claim.label} replaces the distribution of every head (logit biases included), so no "
                    "other feature can act in its layer")
    if first.direction and second.direction and first.direction != second.direction:
        both, causal = (first, second) if first.direction == "bidirectional" else (second, first)
        return f"{both.label} is bidirectional, {causal.label} needs causal attention"
    if first.slot is not None and first.slot == second.slot:
        return f"a layer has one {first.slot}"
    shared = sorted(set(first.heads) & set(second.heads))
    return f"both claim head {shared[0]}" if shared else None


def find_conflict(owners: Sequence[Sequence[Claim]]) -> str | None:
    """The error for the first two claims of different owners that conflict (None: none do).

    Args:
        owners: the claims of each owner (feature or method), in the order the message names them.

    Returns:
        ``"<label> and <label> cannot share a layer: <why>"`` or None.
    """
    for i, mine in enumerate(owners):
        for theirs in owners[i + 1:]:
            for first in mine:
                for second in theirs:
                    why = conflict(first, second)
                    if why:
                        return f"{first.label} and {second.label} cannot share a layer: {why}"
    return None
