"""Constituency trees built from other structures, and the branching baselines: a tree from a set
of spans, right- and left-branching and random binary trees, and the constituents of a projective
dependency tree (the word with its dependents' spans).

Example:
    >>> from synattn.trees.constituency import to_brackets
    >>> to_brackets(tree_from_dependency(["the", "cat", "sleeps"], [2, 3, 0]))
    '(X (X the cat) sleeps)'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synattn.errors import InputError
from synattn.trees.constituency import Tree


def tree_from_spans(words: Sequence[str], spans: set[tuple[int, int]] | Sequence[tuple[int, int]],
                    label: str = "X", leaf_labels: Sequence[str] | None = None) -> Tree:
    """Build the tree whose constituents are ``spans`` plus the whole sentence.

    Spans must be nested or disjoint (no crossing); single-word spans and the whole-sentence
    span may be given or not. A span with more than two children is a flat constituent.

    Args:
        words: ``[n]`` the words (n >= 1).
        spans: ``(start, end)`` word spans, end exclusive.
        label: the label of every inner node.
        leaf_labels: ``[n]`` POS tags of the leaves (default: unlabelled leaves).

    Returns:
        The tree; ``spans(result, include_trivial=True)`` is ``spans`` with ``(0, n)`` added
        (single-word spans only where given).

    Raises:
        InputError: a span is out of range or empty, or two spans cross.

    Example:
        >>> from synattn.trees.constituency import to_brackets
        >>> to_brackets(tree_from_spans(["a", "b", "c"], {(1, 3)}))
        '(X a (X b c))'
    """
    n = len(words)
    if n == 0:
        raise InputError("cannot build a tree over no words")
    tags = list(leaf_labels) if leaf_labels is not None else [""] * n
    if len(tags) != n:
        raise InputError(f"leaf_labels has {len(tags)} entries for {n} words")
    todo = set(spans) | {(0, n)}
    for i, j in todo:
        if not 0 <= i < j <= n:
            raise InputError(f"span ({i}, {j}) is empty or outside 0..{n}")
    # spans in order of start, outer first; open spans are a stack of (start, end, children)
    ordered = sorted(todo, key=lambda s: (s[0], -s[1]))
    stack: list[tuple[int, int, list[Tree]]] = []
    root, k = None, 0
    for position in range(n + 1):
        while stack and stack[-1][1] == position:
            node = Tree(label, tuple(stack.pop()[2]))
            if stack:
                stack[-1][2].append(node)
            else:
                root = node
        while k < len(ordered) and ordered[k][0] == position:
            start, end = ordered[k]
            if stack and end > stack[-1][1]:
                raise InputError(f"span ({start}, {end}) crosses span "
                                 f"({stack[-1][0]}, {stack[-1][1]})")
            stack.append((start, end, []))
            k += 1
        if position < n:
            stack[-1][2].append(Tree(tags[position], word=words[position]))
    return root  # type: ignore[return-value]  # (0, n) is always closed last


def right_branching(words: Sequence[str]) -> Tree:
    """``(w1 (w2 (... (w_{n-1} w_n))))``: spans ``(i, n)`` for every i (baseline, docs/methods.md §3)."""
    n = len(words)
    return tree_from_spans(words, {(i, n) for i in range(n - 1)})


def left_branching(words: Sequence[str]) -> Tree:
    """``((((w1 w2) w3) ...) w_n)``: spans ``(0, j)`` for every j >= 2 (baseline)."""
    return tree_from_spans(words, {(0, j) for j in range(2, len(words) + 1)})


def random_binary(words: Sequence[str], rng: np.random.Generator) -> Tree:
    """A random binary tree (baseline): every span of two or more words is split top-down at
    a split point drawn uniformly among its ``length - 1`` positions.

    Args:
        words: ``[n]`` the words.
        rng: the random generator (e.g. ``np.random.default_rng(seed)``).

    Returns:
        A binary tree over ``words``.
    """
    n = len(words)
    out, todo = set(), [(0, n)]
    while todo:
        i, j = todo.pop()
        if j - i < 2:
            continue
        out.add((i, j))
        split = int(rng.integers(i + 1, j))
        todo += [(i, split), (split, j)]
    return tree_from_spans(words, out)


def dependency_spans(heads: Sequence[int] | np.ndarray) -> set[tuple[int, int]]:
    """The yields of a projective dependency tree as constituent spans.

    The yield of word i is i with all its descendants; in a projective tree it is a contiguous
    span. Every yield of two or more words becomes a constituent (a head with several
    dependents gives one flat constituent; a chain of single dependents gives nested ones).
    This is the usual conversion for scoring unsupervised constituency parsers on dependency
    treebanks when no constituency treebank is at hand (e.g. Klein & Manning 2004 relate the
    two; the yields are the constituents of the dependency tree's phrase structure with
    maximal projections only).

    Args:
        heads: ``[n]`` 1-based heads, 0 = ROOT, projective (every root word's yield is a span;
            several root words are allowed).

    Returns:
        ``(start, end)`` spans, end exclusive, of two or more words; the whole sentence is
        included when a single root word covers it.

    Raises:
        InputError: the tree is not projective (a yield is not contiguous).

    Example:
        >>> sorted(dependency_spans([2, 0, 4, 2]))   # the cat <- saw -> (a <- dog)
        [(0, 4), (2, 4)]
    """
    heads = np.asarray(heads, dtype=np.int64)
    n = len(heads)
    low, high, size = np.arange(n), np.arange(n) + 1, np.ones(n, dtype=np.int64)
    order = _bottom_up(heads)
    for i in order:  # children before their heads
        h = heads[i] - 1
        if h >= 0:
            low[h], high[h], size[h] = min(low[h], low[i]), max(high[h], high[i]), size[h] + size[i]
    if ((high - low) != size).any():
        word = int(np.flatnonzero((high - low) != size)[0])
        raise InputError(f"the tree is not projective: the yield of word {word + 1} is not contiguous")
    return {(int(s), int(e)) for s, e in zip(low, high) if e - s >= 2}


def _bottom_up(heads: np.ndarray) -> list[int]:
    """Word indices (0-based) ordered so that every word comes before its head."""
    depth = np.zeros(len(heads), dtype=np.int64)
    for i in range(len(heads)):
        j, d = i, 0
        while heads[j] != 0:
            j, d = heads[j] - 1, d + 1
            if d > len(heads):
                raise InputError("the heads contain a cycle")
        depth[i] = d
    return list(np.argsort(-depth, kind="stable"))


def tree_from_dependency(words: Sequence[str], heads: Sequence[int] | np.ndarray,
                         punctuation: Sequence[bool] | None = None, label: str = "X") -> Tree:
    """The constituency tree of a projective dependency tree's yields (:func:`dependency_spans`).

    Args:
        words: ``[n]`` the words.
        heads: ``[n]`` 1-based heads, 0 = ROOT.
        punctuation: ``[n]`` which words are punctuation: their leaves get the PTB tag ``.`` so
            that bracket scoring leaves them out (other leaves are unlabelled).
        label: the label of every inner node.

    Example:
        >>> from synattn.trees.constituency import to_brackets
        >>> to_brackets(tree_from_dependency(["the", "cat", "saw", "a", "dog", "."],
        ...                                  [2, 3, 0, 5, 3, 3], [False] * 5 + [True]))
        '(X (X the cat) saw (X a dog) (. .))'
    """
    tags = ["." if p else "" for p in (punctuation or [False] * len(words))]
    return tree_from_spans(words, dependency_spans(heads), label=label, leaf_labels=tags)
