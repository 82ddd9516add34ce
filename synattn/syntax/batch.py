"""The syntax fields of one side of a batch, built from the stored trees of its examples: what
``synattn.data.batching.collate`` and ``synattn.hf.retokenize.collate_pretrained`` call for each side
a request asks for.

Example:
    >>> import numpy as np
    >>> example = {"src_ids": np.array([5, 6, 7]), "src_heads": np.array([0, 1, 1])}
    >>> syntax = batch_syntax([example], "src", frozenset({"head_targets"}), 4, 0, SyntaxRequest(), causal=False)
    >>> syntax.head_targets.tolist()   # [1, n]: the root piece targets itself, the padding none
    [[0, 0, 0, -100]]
"""

from __future__ import annotations

import numpy as np

from synattn.errors import DataError
from synattn.syntax.fields import TreeBatch, build_field, is_field, syntax_fields
from synattn.syntax.inputs import SyntaxInputs
from synattn.syntax.request import SyntaxRequest


def batch_syntax(examples: list[dict[str, np.ndarray]], side: str, wanted: frozenset[str], length: int,
                 offset: int, request: SyntaxRequest, causal: bool, name: str = "the data") -> SyntaxInputs | None:
    """The fields ``wanted`` of one side, ``[B, n]`` / ``[B, n, n]`` each, on a sequence of
    ``length`` positions where piece k sits at position ``k + offset``: each built by its
    registered builder (:mod:`synattn.syntax.fields`) from the examples' ``<side>_heads`` and
    other ``<side>_*`` columns. None when nothing is wanted.

    Args:
        examples: dicts of the stored arrays (``src_heads``, ``src_upos``, …).
        side: ``src`` or ``tgt``: whose trees.
        causal: the sequence is read by causal attention (a decoder's input).
        name: the dataset, for error messages.

    Raises:
        ValueError: a wanted field is not registered.
        DataError: the examples have no trees on ``side``.
    """
    if not wanted:
        return None
    unknown = sorted(f for f in wanted if not is_field(f))
    if unknown:
        raise ValueError(f"the request asks for unknown syntax field(s) {', '.join(unknown)}; registered: "
                         f"{', '.join(f.name for f in syntax_fields())}")
    if f"{side}_heads" not in examples[0]:
        how = "--parse-target" if side == "tgt" else "the source parsed (no --no-parse-source)"
        raise DataError(f"the model needs {', '.join(sorted(wanted))} on the {side} side, but the dataset "
                        f"has no {side} trees (prepare it with {how})", path=name)
    trees = TreeBatch.from_examples(examples, side, length, offset, causal, request, where=name)
    return SyntaxInputs(**{field: build_field(field, trees) for field in wanted})
