"""The syntax a batch may carry into attention: relation labels, tags and supervision targets.

Every field is optional; a feature that needs a missing field says so when it is called. All
fields are indexed by the positions of the sequence the attention runs over (subword positions
when the text is split into pieces; decoder *input* positions on the target side, so with a
leading BOS the target word at decoder position t is the word t − 1 of the sentence).

Example:
    >>> import torch
    >>> syntax = SyntaxInputs(tree_dist=torch.zeros(2, 5, 5, dtype=torch.int8))
    >>> syntax.batch_size
    2
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

IGNORE_INDEX = -100
"""Value of ``head_targets`` / ``hints`` at positions left out of their loss (padding, BOS)."""


@dataclass
class SyntaxInputs:
    """Per-batch syntax fields, computed once at prepare time or on the fly.

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
    """

    tree_dist: Tensor | None = None
    traversal: Tensor | None = None
    pos: Tensor | None = None
    deprel: Tensor | None = None
    head_targets: Tensor | None = None
    hints: Tensor | None = None

    def present(self) -> dict[str, Tensor]:
        """Returns the fields that are set, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def batch_size(self) -> int | None:
        """The batch size of the set fields (None when no field is set)."""
        for value in self.present().values():
            return value.shape[0]
        return None

    def to(self, device: torch.device | str) -> SyntaxInputs:
        """Returns a copy with every set field moved to ``device``."""
        return replace(self, **{k: v.to(device) for k, v in self.present().items()})

    def index_select(self, index: Tensor) -> SyntaxInputs:
        """Returns a copy whose batch rows are ``index`` (``[new_batch]`` long), e.g. for beams."""
        return replace(self, **{k: v.index_select(0, index) for k, v in self.present().items()})

    def require(self, name: str, who: str) -> Tensor:
        """Returns field ``name``, or raises ``ValueError`` saying that ``who`` needs it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{who} needs syntax field '{name}', which this batch does not carry")
        return value


def require_syntax(syntax: SyntaxInputs | None, name: str, who: str) -> Tensor:
    """Returns ``syntax.<name>``, raising a ``ValueError`` naming ``who`` when it is missing."""
    if syntax is None:
        raise ValueError(f"{who} needs syntax field '{name}', but no syntax inputs were given")
    return syntax.require(name, who)
