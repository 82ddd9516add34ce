"""The syntax a batch may carry into attention: relation labels, tags and supervision targets.

The fields are those of the registry :mod:`synattn.syntax.fields` (built in: ``tree_dist``,
``traversal``, ``pos``, ``deprel``, ``head_targets``, ``hints``; a method may register its own).
Every field is optional; a feature that needs a missing field says so when it is called. All
fields are indexed by the positions of the sequence the attention runs over (subword positions
when the text is split into pieces; decoder *input* positions on the target side, so with a
leading BOS the target word at decoder position t is the word t − 1 of the sentence).

Example:
    >>> import torch
    >>> syntax = SyntaxInputs(tree_dist=torch.zeros(2, 5, 5, dtype=torch.int8))
    >>> syntax.batch_size, syntax.hints
    (2, None)
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from synattn.syntax.fields import IGNORE_INDEX, is_field, syntax_fields

__all__ = ["IGNORE_INDEX", "SyntaxInputs", "require_syntax"]


class SyntaxInputs:
    """Per-batch syntax fields, computed once at prepare time or on the fly.

    ``SyntaxInputs(tree_dist=..., hints=...)`` takes any registered field
    (:func:`synattn.syntax.fields.syntax_fields`) by keyword, None meaning absent;
    ``syntax.<field>`` reads one (None when absent). The built-in fields:

    Attributes:
        tree_dist: ``[batch_size, n, n]`` small int, tree-distance labels (docs/methods.md §1), values
            ``0..max_distance`` and ``max_distance + 1`` for longer distances and padding pairs
            (``synattn.trees.relations.batch_distance_labels``).
        traversal: ``[batch_size, n, n]`` small int, tree-traversal labels, indices into
            ``synattn.trees.relations.traversal_vocab(max_traversal)``.
        pos: ``[batch_size, n]`` int, POS-tag ids (specialized heads, docs/methods.md §1).
        deprel: ``[batch_size, n]`` int, dependency-label ids (specialized heads, docs/methods.md §1).
        head_targets: ``[batch_size, n]`` int, 0-based position each position's supervised head
            should attend to (docs/methods.md §2; ``synattn.trees.relations.head_targets`` of the
            subword tree), ``IGNORE_INDEX`` (−100) where there is no target.
        hints: ``[batch_size, n]`` int, the BET(SG) syntax hints (docs/methods.md §4): the 0-based
            position each position's attention is pointed to
            (``synattn.trees.relations.batch_syntax_hints`` of the subword tree, indexed by the
            attention's positions), ``IGNORE_INDEX`` (−100) where there is none.

    Raises:
        TypeError: a keyword names no registered field.
    """

    __slots__ = ("_values",)
    _values: dict[str, Tensor]  # the set fields in the registry's order (set through object.__setattr__)

    def __init__(self, **values: Tensor | None):
        unknown = [name for name in values if not is_field(name)]
        if unknown:
            raise TypeError(f"SyntaxInputs got unknown syntax field(s) {unknown}; registered: "
                            f"{', '.join(f.name for f in syntax_fields())}")
        object.__setattr__(self, "_values", _ordered(values))

    def __getattr__(self, name: str) -> Tensor | None:
        if not name.startswith("_"):
            values = self._values
            if name in values or is_field(name):
                return values.get(name)
        raise AttributeError(f"{type(self).__name__} has no attribute or registered syntax field {name!r}")

    def __setattr__(self, name: str, value: Tensor | None) -> None:
        if not is_field(name):
            raise AttributeError(f"{type(self).__name__}: {name!r} is no registered syntax field")
        object.__setattr__(self, "_values", _ordered({**self._values, name: value}))

    def __reduce__(self):
        return _rebuild, (dict(self._values),)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}=<{list(v.shape)} {v.dtype}>" for k, v in self._values.items())
        return f"SyntaxInputs({parts})"

    def present(self) -> dict[str, Tensor]:
        """Returns the fields that are set, by name (in the registry's order)."""
        return dict(self._values)

    @property
    def batch_size(self) -> int | None:
        """The batch size of the set fields (None when no field is set)."""
        for value in self._values.values():
            return value.shape[0]
        return None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SyntaxInputs:
        """Returns a copy with every set field moved to ``device``."""
        return _rebuild({k: v.to(device, non_blocking=non_blocking) for k, v in self._values.items()})

    def pin_memory(self) -> SyntaxInputs:
        """Returns a copy with every set field in page-locked memory."""
        return _rebuild({k: v.pin_memory() for k, v in self._values.items()})

    def index_select(self, index: Tensor) -> SyntaxInputs:
        """Returns a copy whose batch rows are ``index`` (``[new_batch]`` long), e.g. for beams."""
        return _rebuild({k: v.index_select(0, index) for k, v in self._values.items()})

    def require(self, name: str, who: str) -> Tensor:
        """Returns field ``name``, or raises ``ValueError`` saying that ``who`` needs it."""
        value = self._values.get(name)
        if value is None:
            raise ValueError(f"{who} needs syntax field '{name}', which this batch does not carry")
        return value


def _ordered(values: Mapping[str, Tensor | None]) -> dict[str, Tensor]:
    """The set values in the registry's order (fields no longer registered last)."""
    rank = {f.name: i for i, f in enumerate(syntax_fields())}
    names = sorted(values, key=lambda name: rank.get(name, len(rank)))
    return {name: value for name in names if (value := values[name]) is not None}


def _rebuild(values: dict[str, Tensor]) -> SyntaxInputs:
    """SyntaxInputs holding ``values`` as they are (also fields unregistered since they were set)."""
    out = SyntaxInputs.__new__(SyntaxInputs)
    object.__setattr__(out, "_values", values)
    return out


def require_syntax(syntax: SyntaxInputs | None, name: str, who: str) -> Tensor:
    """Returns ``syntax.<name>``, raising a ``ValueError`` naming ``who`` when it is missing."""
    if syntax is None:
        raise ValueError(f"{who} needs syntax field '{name}', but no syntax inputs were given")
    return syntax.require(name, who)
