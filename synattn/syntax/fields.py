"""The syntax fields a batch can carry into attention, each declared once.

A field is a :class:`SyntaxField`: its name, its shape kind (``token``: ``[batch_size, n]``, one
value per position; ``pair``: ``[batch_size, n, n]``, one value per query/key pair), the value
of the positions outside the sentence, and a builder that computes it for a whole batch from the
stored trees of one side (:class:`TreeBatch`). :class:`~synattn.attention.SyntaxInputs` holds
exactly the registered fields, ``synattn.data.batching`` builds the ones a model asks for by
iterating :func:`syntax_fields`, ``synattn.hf.SyntaxEncoder`` / ``SyntaxCollator`` build and pad
them for a Hugging Face tokenizer's pieces the same way (with each field's ``outside`` value at
special tokens), and a method that needs a field of its own declares it in its module with
:func:`register_field` (docs/adding_a_method.md).

Positions: piece k of a sentence sits at position ``k + offset`` (offset 1 on a decoder's input
``<s> y``, else 0); the positions before the first piece (``<s>``), after the last (``</s>``) and
padding are outside the sentence. The built-in fields (docs/methods.md §1–§4):

- ``tree_dist`` (pair): tree-distance labels ``0..max_distance``, ``max_distance + 1`` for longer
  distances and every pair with a position outside the sentence
  (``synattn.trees.relations.batch_distance_labels``); ``max_distance + 2`` (``outside``) at
  special tokens in ``synattn.hf``.
- ``traversal`` (pair): tree-traversal labels, indices into
  ``synattn.trees.relations.traversal_vocab(max_traversal)`` (the overflow label outside; one more,
  ``outside``, at special tokens in ``synattn.hf``).
- ``pos``, ``deprel`` (token): the POS-tag / dependency-label id of each piece's word (specialized
  heads), 0 (the label vocabulary's ``<pad>``) outside.
- ``head_targets`` (token): the position each piece's supervised head should attend to, its head
  piece (the root piece: itself); on a causal sequence, a head to the right is left out
  (docs/methods.md §2). ``IGNORE_INDEX`` (−100) where there is no target.
- ``hints`` (token): the BET(SG) hint of position t, which predicts the piece at t + 1: the
  position of that piece's nearest ancestor among positions ≤ t, else t itself
  (docs/methods.md §4; ``synattn.trees.relations.batch_syntax_hints``); ``IGNORE_INDEX`` at padding
  (in ``synattn.hf`` also at special tokens and at the last piece, whose next token is none).

``head_targets`` and ``hints`` hold positions (``SyntaxField.positions``): they move with the
sequence when it is padded on the left.

Example:
    >>> [f.name for f in syntax_fields()]
    ['tree_dist', 'traversal', 'pos', 'deprel', 'head_targets', 'hints']
    >>> syntax_field("hints").kind
    'token'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from synattn.errors import DataError
from synattn.trees.relations import (
    MAX_DISTANCE,
    MAX_TRAVERSAL,
    batch_relation_labels,
    batch_syntax_hints,
    distance_vocab,
    traversal_vocab,
)

IGNORE_INDEX = -100
"""Value of position-valued fields (``head_targets``, ``hints``) where a position has none."""

REQUEST_NAMES = frozenset({"src", "tgt", "settings", "src_bos", "setting"})
"""The attributes of a :class:`~synattn.syntax.request.SyntaxRequest`: no setting may be called so."""

KINDS = ("token", "pair")
"""Shape kinds of a field: ``[batch_size, n]`` (one value per position) or ``[batch_size, n, n]``."""


@dataclass
class TreeBatch:
    """One side of a batch as a field's builder reads it: the stored trees of its examples.

    Attributes:
        heads: per example, ``[len]`` int64 1-based heads of the pieces (0 = ROOT), as stored.
        columns: the other stored columns of the side by name (``upos``, ``deprel``: per piece,
            the label id of its word), one array per example.
        length: n, the padded length of the sequence.
        offset: position of the first piece (1 after a leading ``<s>``, else 0).
        causal: the sequence is read by causal attention (a decoder's input).
        request: the batch's :class:`~synattn.syntax.request.SyntaxRequest` (its settings:
            ``request.setting("max_distance")``, or ``request.max_distance``).
        where: the dataset, for error messages.
    """

    heads: list[np.ndarray]
    columns: dict[str, list[np.ndarray]]
    length: int
    offset: int
    causal: bool
    request: Any
    where: str = "the data"
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_examples(cls, examples: list[dict[str, np.ndarray]], side: str, length: int, offset: int,
                      causal: bool, request: Any, where: str = "the data") -> TreeBatch:
        """The trees of ``side`` (``src``/``tgt``) of examples holding ``<side>_heads`` etc."""
        prefix = f"{side}_"
        heads = [e[f"{side}_heads"].astype(np.int64) for e in examples]
        columns = {key[len(prefix):]: [e[key] for e in examples] for key in examples[0]
                   if key.startswith(prefix) and key != f"{side}_heads"}
        return cls(heads, columns, length, offset, causal, request, where)

    def column(self, name: str) -> list[np.ndarray]:
        """The stored column ``name`` of every example (raises a ``DataError`` when absent)."""
        if name not in self.columns:
            raise DataError(f"a syntax field needs the trees' {name!r} column, which the dataset does not "
                            f"store (it has {', '.join(sorted(self.columns)) or 'none'})", path=self.where)
        return self.columns[name]

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per batch side (for work that several fields share)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def placed_heads(self) -> tuple[np.ndarray, np.ndarray]:
        """``(heads [B, n], lengths [B])``: the trees at their positions, read-only.

        ``heads[b, k + offset]`` is the 1-based *position* + 1 of piece k's head (0 = ROOT); the
        positions before the first piece are roots of their own, and ``lengths = offset + len``
        (positions from there on are padding for ``synattn.trees.relations``).
        """
        def compute() -> tuple[np.ndarray, np.ndarray]:
            placed = np.zeros((len(self.heads), self.length), dtype=np.int64)
            lengths = np.array([self.offset + len(h) for h in self.heads], dtype=np.int64)
            for b, h in enumerate(self.heads):
                placed[b, self.offset: self.offset + len(h)] = np.where(h > 0, h + self.offset, 0)
            placed.flags.writeable = lengths.flags.writeable = False
            return placed, lengths
        return self.cached("placed_heads", compute)


@dataclass(frozen=True)
class SyntaxField:
    """One field of :class:`~synattn.attention.SyntaxInputs`.

    Attributes:
        name: the attribute name (``syntax.<name>``).
        kind: ``"token"`` (``[batch_size, n]``) or ``"pair"`` (``[batch_size, n, n]``).
        pad: the value outside the sentence, or a function of the batch's request giving it.
        build: ``build(trees: TreeBatch)`` returns the field of the whole batch
            (``[batch_size, n]`` or ``[batch_size, n, n]``, numpy or torch), or one array per
            example covering its first positions (``[offset + len]`` or square), the rest of
            which is filled with ``pad``.
        setting: the setting the builder reads from the request (``max_distance``: the clip of
            its labels), a key of :attr:`SyntaxRequest.settings
            <synattn.syntax.request.SyntaxRequest.settings>` and of the stack config (two stacks
            asking for the field must agree on it: ``synattn.train.syntax_request_for``; a stack
            without it gives ``default``).
        default: the setting's value when none is given (``max_distance`` 8).
        language_model: a language model's decoder may read it: built from the monolingual
            trees of its input ``<s> x``, it says nothing about the words a position predicts
            beyond what causal attention may see (the BET(SG) hints).
        positions: its values are positions in the sequence (``head_targets``, ``hints``;
            negative: none), so they move with the sequence: ``synattn.hf.SyntaxCollator`` adds
            the left padding to the values ``>= 0``.
        outside: the value ``synattn.hf``'s aligner gives the positions outside the sentence
            (special tokens such as ``[CLS]``/``</s>``, and padding), or a function of the request
            giving it; None: ``pad``. The tree relations use an extra label after ``<far>``
            there, so a special token is told apart from a far word (docs/hf.md).
        doc: one line saying what the field holds.
    """

    name: str
    kind: str
    pad: int | Callable[[Any], int]
    build: Callable[[TreeBatch], Any]
    setting: str | None = None
    default: int | None = None
    language_model: bool = False
    positions: bool = False
    outside: int | Callable[[Any], int] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"syntax field {self.name!r}: kind {self.kind!r}, expected one of {KINDS}")
        if (self.setting is None) != (self.default is None):
            raise ValueError(f"syntax field {self.name!r}: a setting needs its default and a default its "
                             f"setting (setting={self.setting!r}, default={self.default!r})")

    def pad_value(self, request: Any) -> int:
        """The value outside the sentence for ``request``."""
        return self.pad(request) if callable(self.pad) else self.pad

    def outside_value(self, request: Any) -> int:
        """The value of ``synattn.hf``'s aligner outside the sentence for ``request``."""
        value = self.pad if self.outside is None else self.outside
        return value(request) if callable(value) else value


_FIELDS: dict[str, SyntaxField] = {}


def register_field(spec: SyntaxField) -> SyntaxField:
    """Registers ``spec`` (a name may be registered once); returns it."""
    if spec.name in _FIELDS and _FIELDS[spec.name] != spec:
        raise ValueError(f"syntax field {spec.name!r} is registered twice")
    if spec.name.startswith("_"):
        raise ValueError(f"syntax field name {spec.name!r} must not start with '_'")
    if spec.setting is not None and declared_settings().get(spec.setting, spec.default) != spec.default:
        raise ValueError(f"syntax field {spec.name!r}: setting {spec.setting} defaults to {spec.default}, but "
                         f"another field declares it with {declared_settings()[spec.setting]}")
    if spec.setting is not None and (spec.setting in REQUEST_NAMES or not spec.setting.isidentifier()):
        raise ValueError(f"syntax field {spec.name!r}: setting {spec.setting!r} must be an identifier other "
                         f"than {', '.join(sorted(REQUEST_NAMES))}")
    _FIELDS[spec.name] = spec
    return spec


def unregister_field(name: str) -> SyntaxField:
    """Removes field ``name`` from the registry (e.g. one registered by a test); returns it."""
    return _FIELDS.pop(name)


def syntax_fields() -> list[SyntaxField]:
    """The registered fields, built-in ones first."""
    return list(_FIELDS.values())


def declared_settings() -> dict[str, int]:
    """The settings the registered fields declare, name → default (``{'max_distance': 8,
    'max_traversal': 4}`` for the built-in ones): what a request's :attr:`settings
    <synattn.syntax.request.SyntaxRequest.settings>` may hold."""
    # (a field declares a setting and its default together: SyntaxField.__post_init__)
    return {spec.setting: spec.default for spec in _FIELDS.values()
            if spec.setting is not None and spec.default is not None}


def is_field(name: str) -> bool:
    """Whether ``name`` is a registered field."""
    return name in _FIELDS


def syntax_field(name: str) -> SyntaxField:
    """The registered field ``name`` (``KeyError`` naming the registered ones otherwise)."""
    if name not in _FIELDS:
        raise KeyError(f"no syntax field {name!r}; registered: {', '.join(_FIELDS)}")
    return _FIELDS[name]


def build_field(name: str, trees: TreeBatch) -> Tensor:
    """Field ``name`` of one batch side, ``[batch_size, n]`` or ``[batch_size, n, n]``."""
    spec = syntax_field(name)
    value = spec.build(trees)
    b, n = len(trees.heads), trees.length
    if isinstance(value, list):  # one array per example: fill the rest with the pad value
        shape = (b, n) if spec.kind == "token" else (b, n, n)
        out = np.full(shape, spec.pad_value(trees.request), dtype=np.int64)
        for row, v in enumerate(value):
            index: tuple[int | slice, ...] = (row, *(slice(0, k) for k in np.shape(v)))
            out[index] = v
        value = out
    value = torch.as_tensor(value)
    expected = (b, n) if spec.kind == "token" else (b, n, n)
    if tuple(value.shape) != expected:
        raise ValueError(f"syntax field {name!r} ({spec.kind}) was built with shape {list(value.shape)}, "
                         f"expected {list(expected)}")
    return value


# ------------------------------------------------------------------------------------------------
# the built-in fields


def _relation_labels(trees: TreeBatch) -> tuple[np.ndarray, np.ndarray]:
    """Tree-distance and traversal labels of the batch, from one tree climb (shared by both)."""
    def compute() -> tuple[np.ndarray, np.ndarray]:
        request, offset = trees.request, trees.offset
        heads, lengths = trees.placed_heads()
        dist, trav = batch_relation_labels(heads, lengths, request.max_distance, request.max_traversal)
        if offset:  # positions before the first piece (<s>) are not words: overflow labels
            dist[:, :offset, :] = dist[:, :, :offset] = len(distance_vocab(request.max_distance)) - 1
            trav[:, :offset, :] = trav[:, :, :offset] = len(traversal_vocab(request.max_traversal)) - 1
        return dist, trav
    return trees.cached("relation_labels", compute)


def _labels(column: str) -> Callable[[TreeBatch], list[np.ndarray]]:
    def build(trees: TreeBatch) -> list[np.ndarray]:
        return [np.concatenate([np.zeros(trees.offset, np.int64), ids]) for ids in trees.column(column)]
    return build


def _head_targets(trees: TreeBatch) -> list[np.ndarray]:
    offset, targets = trees.offset, []
    for h in trees.heads:
        k = np.arange(len(h))
        t = np.where(h > 0, h - 1, k) + offset  # root piece targets itself
        if trees.causal:
            t = np.where(t - offset > k, IGNORE_INDEX, t)  # head to the right: left out
        targets.append(np.concatenate([np.full(offset, IGNORE_INDEX), t]))
    return targets


def _hints(trees: TreeBatch) -> np.ndarray:
    # the positions before the first piece (<s>) are extra roots, never ancestors of a piece, so
    # the hints of the placed trees give, at position t, the nearest ancestor of the piece at
    # t + 1 among positions <= t, else t
    heads, lengths = trees.placed_heads()
    hints = batch_syntax_hints(heads, lengths)  # [B, n]
    hints[np.arange(trees.length)[None, :] >= lengths[:, None]] = IGNORE_INDEX
    return hints


# pairs: the overflow label outside (synattn's batches); synattn.hf's aligner gives the pairs of
# special tokens one more label, "outside" (index len(vocab), after <far>)
register_field(SyntaxField(
    "tree_dist", "pair", lambda request: len(distance_vocab(request.max_distance)) - 1,
    lambda trees: _relation_labels(trees)[0], setting="max_distance", default=MAX_DISTANCE,
    outside=lambda request: len(distance_vocab(request.max_distance)),
    doc="tree-distance labels (docs/methods.md §1)"))
register_field(SyntaxField(
    "traversal", "pair", lambda request: len(traversal_vocab(request.max_traversal)) - 1,
    lambda trees: _relation_labels(trees)[1], setting="max_traversal", default=MAX_TRAVERSAL,
    outside=lambda request: len(traversal_vocab(request.max_traversal)),
    doc="tree-traversal labels (docs/methods.md §1)"))
register_field(SyntaxField("pos", "token", 0, _labels("upos"), doc="POS-tag ids (docs/methods.md §1)"))
register_field(SyntaxField("deprel", "token", 0, _labels("deprel"),
                           doc="dependency-label ids (docs/methods.md §1)"))
register_field(SyntaxField("head_targets", "token", IGNORE_INDEX, _head_targets, positions=True,
                           doc="supervised-head targets (docs/methods.md §2)"))
register_field(SyntaxField("hints", "token", IGNORE_INDEX, _hints, language_model=True, positions=True,
                           doc="BET(SG) syntax hints (docs/methods.md §4)"))
