"""Dependency trees over the words of one sentence, and validation of head arrays.

A tree over n words is an int array ``heads`` of length n in the CoNLL-U convention: word ``i``
(1-based) hangs from word ``heads[i-1]``, and 0 is the artificial ROOT. Several words may hang
from ROOT (all of them are root words); every word must reach ROOT by following heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from synattn.errors import InputError, brief


def head_problem(heads: Sequence[int] | np.ndarray,
                 words: Sequence[str] | None = None) -> tuple[int, str] | None:
    """Find what makes ``heads`` fail to be a tree, and where.

    Checks, in order: at least one word; every head an integer in ``0..n``; no word on a cycle
    (a cycle is named by its word numbers, and by its word forms when ``words`` is given).
    "No root" (no head is 0) always implies a cycle and is reported as such.

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT.
        words: optional ``[n]`` word forms, only used to name the words in the message.

    Returns:
        ``None`` for a valid tree, else ``(index, cause)`` where ``index`` is the 0-based index
        of the first word involved (the first bad head; the smallest word on the cycle).
    """
    heads = np.asarray(heads)
    if heads.ndim != 1:
        return 0, f"heads must be one list of the words' heads, got an array of shape {heads.shape}"
    n = len(heads)
    if n == 0:
        return 0, "sentence has no words"
    if not np.issubdtype(heads.dtype, np.integer):
        return 0, f"heads must be integers, got dtype {heads.dtype}"
    bad = np.flatnonzero((heads < 0) | (heads > n))
    if len(bad):
        i = int(bad[0])
        return i, f"head {int(heads[i])} of word {i + 1} is out of range 0..{n}"
    # Pointer jumping: node n stands for ROOT and points to itself; after 2^k >= n steps a word
    # has reached ROOT unless it lies on, or leads into, a cycle.
    parent = np.where(heads == 0, n, heads - 1).astype(np.int64)
    parent = np.append(parent, n)  # [n + 1]
    reach = parent  # 2^0 steps up
    for _ in range(int(np.ceil(np.log2(n)))):
        reach = reach[reach]  # twice as many steps up
    stuck = np.flatnonzero(reach[:n] != n)
    if len(stuck) == 0:
        return None
    # reach[w] is n steps up from w, hence on the cycle that w leads into; walk that cycle once.
    start = int(reach[stuck[0]])
    cycle = [start]
    while int(parent[cycle[-1]]) != start:
        cycle.append(int(parent[cycle[-1]]))
    cycle = cycle[cycle.index(min(cycle)):] + cycle[:cycle.index(min(cycle))]
    path = " -> ".join(str(w + 1) for w in cycle + cycle[:1])
    if words is not None:
        path += " (" + ", ".join(brief(words[w], 40) for w in cycle) + ")"
    cause = f"cycle in heads: {path}"
    if not np.any(heads == 0):
        cause = f"no root (no word has head 0); {cause}"
    return cycle[0], cause


def validate_heads(heads: Sequence[int] | np.ndarray,
                   words: Sequence[str] | None = None) -> str | None:
    """Say why ``heads`` is not a valid dependency tree, or return ``None`` if it is.

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT (several root words allowed).
        words: optional ``[n]`` word forms to name the words on a cycle.

    Returns:
        ``None`` or the cause: no words, out-of-range head, cycle (naming the words), no root.

    Example:
        >>> validate_heads([2, 0, 2]) is None
        True
        >>> validate_heads([2, 1], ["a", "b"])
        "no root (no word has head 0); cycle in heads: 1 -> 2 -> 1 ('a', 'b')"
    """
    problem = head_problem(heads, words)
    return None if problem is None else problem[1]


def is_projective_heads(heads: Sequence[int] | np.ndarray) -> bool:
    """Whether no two arcs cross when drawn above the sentence with ROOT at position 0.

    Arcs from ROOT count. For a tree this is the same as: every word between a head and its
    dependent descends from that head. Vectorised over all arc pairs (``[n, n]`` booleans).

    Args:
        heads: ``[n]`` a valid tree (see ``validate_heads``).

    Returns:
        True when projective.

    Raises:
        InputError: (a ``ValueError``) ``heads`` are not a tree (a cycle, a head out of range):
            projectivity is a property of trees only.
    """
    problem = head_problem(heads)
    if problem is not None:
        raise InputError(f"is_projective_heads: not a tree: {problem[1]}")
    heads = np.asarray(heads, dtype=np.int64)
    dep = np.arange(1, len(heads) + 1)
    lo = np.minimum(heads, dep)  # [n] arc left ends (ROOT = 0)
    hi = np.maximum(heads, dep)  # [n] arc right ends
    # arcs a, b cross iff lo_a < lo_b < hi_a < hi_b
    cross = ((lo[:, None] < lo[None, :]) & (lo[None, :] < hi[:, None])
             & (hi[:, None] < hi[None, :]))  # [n, n]
    return not bool(cross.any())


@dataclass
class DependencyTree:
    """One sentence with its dependency tree (syntactic words, CoNLL-U conventions).

    Attributes:
        words: ``[n]`` word forms (syntactic words; multiword tokens are not words).
        heads: ``[n]`` int64, 1-based head of each word, 0 = ROOT.
        deprels: ``[n]`` dependency labels ("_" when unknown).
        upos: ``[n]`` universal POS tags ("_" when unknown).
        xpos: ``[n]`` language-specific POS tags ("_" when unknown).
        sent_id: the ``# sent_id`` comment, if any.
        text: the ``# text`` comment, if any.
        metadata: everything else a reader keeps for writing the sentence back. The CoNLL-U
            reader fills ``comments`` (``(key, value-or-None)`` of every comment line in
            order; the writer takes ``sent_id`` and ``text`` from the fields),
            ``lemma``/``feats``/``deps``/``misc`` (``[n]`` raw column strings),
            ``multiword_tokens`` (list of ``(first, last, form, misc)``, 1-based word ids) and
            ``empty_nodes`` (list of ``(after_word, raw_line)``).

    Raises:
        InputError: when the columns have different lengths or the heads are not a tree.

    Example:
        >>> t = DependencyTree(["She", "sleeps"], np.array([2, 0]))
        >>> len(t), t.roots().tolist(), t.deprels
        (2, [1], ['_', '_'])
    """

    words: list[str]
    heads: np.ndarray
    deprels: list[str] = field(default_factory=list)
    upos: list[str] = field(default_factory=list)
    xpos: list[str] = field(default_factory=list)
    sent_id: str | None = None
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.words = list(self.words)
        self.heads = np.asarray(self.heads)
        if self.heads.dtype.kind not in "iu":
            raise InputError(f"heads must be integers, got dtype {self.heads.dtype}",
                             sent_id=self.sent_id)
        self.heads = self.heads.astype(np.int64)
        n = len(self.words)
        for name in ("deprels", "upos", "xpos"):
            column = list(getattr(self, name)) or ["_"] * n
            if len(column) != n:
                raise InputError(f"{name} has {len(column)} entries for {n} words",
                                 sent_id=self.sent_id)
            setattr(self, name, column)
        if len(self.heads) != n:
            raise InputError(f"heads has {len(self.heads)} entries for {n} words",
                             sent_id=self.sent_id)
        cause = validate_heads(self.heads, self.words)
        if cause is not None:
            raise InputError(cause, sent_id=self.sent_id)

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DependencyTree):
            return NotImplemented
        return (self.words == other.words and np.array_equal(self.heads, other.heads)
                and self.deprels == other.deprels and self.upos == other.upos
                and self.xpos == other.xpos and self.sent_id == other.sent_id
                and self.text == other.text and self.metadata == other.metadata)

    def roots(self) -> np.ndarray:
        """0-based indices of the root words (those whose head is ROOT), ``[r]`` int64."""
        return np.flatnonzero(self.heads == 0)

    def is_projective(self) -> bool:
        """Whether the tree is projective (no crossing arcs, ROOT at position 0)."""
        return is_projective_heads(self.heads)

    def keep_words(self, keep: Sequence[bool] | np.ndarray) -> DependencyTree:
        """The tree over the kept words, in their order.

        A kept word whose head is dropped hangs from its nearest kept ancestor, or from ROOT when
        it has none (so dropping a root word with dependents leaves several root words). Per-word
        columns (deprels, tags, the reader's raw columns) follow their words; multiword tokens and
        empty nodes, which name word ids, are not kept.

        Args:
            keep: ``[n]`` which words stay (at least one).

        Raises:
            InputError: a mask of the wrong length, or one that keeps no word.

        Example:
            >>> t = DependencyTree(["the", "cat", "sleeps", "."], np.array([2, 3, 0, 3]))
            >>> t.keep_words([True, True, True, False]).heads.tolist()
            [2, 3, 0]
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (len(self),):
            raise InputError(f"keep has shape {list(keep.shape)}, the sentence {len(self)} words",
                             sent_id=self.sent_id)
        if not keep.any():
            raise InputError("no word kept", sent_id=self.sent_id)
        kept = np.flatnonzero(keep)
        new_id = np.cumsum(keep)  # [n] 1-based id among the kept words
        heads = []
        for i in kept:
            h = int(self.heads[i])
            while h and not keep[h - 1]:
                h = int(self.heads[h - 1])
            heads.append(int(new_id[h - 1]) if h else 0)

        def column(values: list) -> list:
            return [values[i] for i in kept] if len(values) == len(self) else list(values)

        metadata = {k: column(v) if k in ("lemma", "feats", "deps", "misc") else v
                    for k, v in self.metadata.items() if k not in ("multiword_tokens", "empty_nodes")}
        return DependencyTree(column(self.words), np.array(heads, dtype=np.int64), column(self.deprels),
                              column(self.upos), column(self.xpos), self.sent_id, self.text, metadata)
