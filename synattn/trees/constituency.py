"""Constituency trees in PTB bracket notation, their spans, and branching baselines.

A ``Tree`` is immutable: a leaf has a ``word`` (and its POS tag as ``label``, possibly ``""``);
an inner node has ``children``. Spans are ``(start, end)`` word offsets, end exclusive. Every
traversal here is iterative, so right-branching trees of long sentences are no problem.

Example:
    >>> t = parse_brackets("(S (NP (DT the) (NN cat)) (VP (VBZ sleeps)))")
    >>> leaves(t), sorted(spans(t)), to_brackets(t)
    (['the', 'cat', 'sleeps'], [(0, 2)], '(S (NP (DT the) (NN cat)) (VP (VBZ sleeps)))')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, Sequence

import numpy as np

from synattn.errors import InputError, TreebankError
from synattn.trees.conllu_io import PathOrFile, bad_byte_cause, read_text

PTB_PUNCT_TAGS = frozenset({"''", "``", ",", ".", ":", "-LRB-", "-RRB-", "#", "$"})
TRACE_TAG = "-NONE-"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_FUNCTION_TAG = re.compile(r"[-=]")


@dataclass(frozen=True, eq=False)
class Tree:
    """A node of a constituency tree.

    Attributes:
        label: the constituent label, or the POS tag of a leaf ("" when unlabelled).
        children: the subtrees of an inner node (empty for a leaf; also empty for the empty
            tree that pruning every word leaves behind).
        word: the word of a leaf, ``None`` for an inner node.
    """

    label: str
    children: tuple[Tree, ...] = ()
    word: str | None = None

    def __post_init__(self) -> None:
        if self.word is not None and self.children:
            raise InputError(f"leaf {self.word!r} cannot have children")

    @property
    def is_leaf(self) -> bool:
        return self.word is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tree):
            return NotImplemented
        return to_brackets(self) == to_brackets(other)

    def __hash__(self) -> int:
        return hash(to_brackets(self))

    def __repr__(self) -> str:
        return f"Tree({to_brackets(self)!r})"


def _walk(tree: Tree) -> Iterator[tuple[str, Tree]]:
    """Yield ``("open", node)``, ``("leaf", leaf)`` and ``("close", node)`` in document order."""
    stack: list[tuple[Tree, int]] = [(tree, 0)]
    while stack:
        node, k = stack.pop()
        if node.is_leaf:
            yield "leaf", node
            continue
        if k == 0:
            yield "open", node
        if k < len(node.children):
            stack.append((node, k + 1))
            stack.append((node.children[k], 0))
        else:
            yield "close", node


def leaves(tree: Tree) -> list[str]:
    """The words of ``tree`` from left to right."""
    return [node.word for event, node in _walk(tree) if event == "leaf"]


def leaf_labels(tree: Tree) -> list[str]:
    """The POS tags (leaf labels) of ``tree`` from left to right."""
    return [node.label for event, node in _walk(tree) if event == "leaf"]


def to_brackets(tree: Tree) -> str:
    """Write ``tree`` in PTB notation on one line.

    An unlabelled leaf is its bare word; an unlabelled inner node opens with ``"( "`` (so that
    ``parse_brackets`` does not take its first word for a label). An inner node whose only
    child is an unlabelled leaf, ``(X w)``, reads back as a leaf tagged ``X``.
    """
    parts: list[str] = []
    for event, node in _walk(tree):
        if event == "leaf":
            parts.append(f"({node.label} {node.word})" if node.label else node.word)
        elif event == "open":
            parts.append(f"({node.label}")
        else:
            parts[-1] += ")"
    return " ".join(parts)


def spans(tree: Tree, include_trivial: bool = False) -> set[tuple[int, int]]:
    """Word spans ``(start, end)`` (end exclusive) of the inner nodes of ``tree``.

    Args:
        tree: the tree.
        include_trivial: also keep single-word spans and the whole-sentence span, which are
            excluded by default (bracket F1 convention of docs/methods.md §3).

    Returns:
        The set of spans (unary chains give one span); an inner node without words (the empty
        tree left when every word was dropped) spans nothing.
    """
    out, starts, position = set(), [], 0
    for event, _ in _walk(tree):
        if event == "leaf":
            position += 1
        elif event == "open":
            starts.append(position)
        else:
            start = starts.pop()
            if start < position:
                out.add((start, position))
    if not include_trivial:
        out = {(i, j) for i, j in out if j - i > 1 and (i, j) != (0, position)}
    return out


def _rebuild(tree: Tree, keep: Sequence[bool] | None = None,
             relabel: Callable[[str], str] | None = None) -> Tree:
    """Copy ``tree`` without the leaves where ``keep`` is False (constituents left empty are
    removed) and with inner labels mapped by ``relabel``. Pruning every word gives an empty
    tree ``Tree(label)``."""
    if keep is not None and len(keep) != (n := len(leaves(tree))):
        raise InputError(f"keep has {len(keep)} entries for {n} words")
    stack: list[list[Tree]] = [[]]
    position = 0
    for event, node in _walk(tree):
        if event == "leaf":
            if keep is None or keep[position]:
                stack[-1].append(node)
            position += 1
        elif event == "open":
            stack.append([])
        else:
            children = stack.pop()
            if children:
                label = relabel(node.label) if relabel else node.label
                stack[-1].append(Tree(label, tuple(children)))
    return stack[0][0] if stack[0] else Tree(tree.label)


def drop_leaves(tree: Tree, keep: Sequence[bool]) -> Tree:
    """Remove the words where ``keep`` is False, then every constituent left empty.

    Use it to evaluate an induced tree over a sentence with punctuation against a gold tree
    without it.

    Args:
        tree: the tree over n words.
        keep: ``[n]`` booleans.

    Returns:
        The pruned tree (``Tree(label)`` with no children when nothing is kept).
    """
    return _rebuild(tree, keep=keep)


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``PP=2`` -> ``PP``; labels starting with ``-`` (``-NONE-``,
    ``-LRB-``) are kept."""
    if label.startswith("-"):
        return label
    return _FUNCTION_TAG.split(label, maxsplit=1)[0]


def _parse_tokens(text: str, path: str) -> Iterator[Tree]:
    """Yield the tree of each top-level bracket group of ``text``."""
    # open constituents: (label, children, line of its "(")
    stack: list[tuple[str | None, list, int]] = []
    line, last = 1, 0

    def fail(cause: str, line: int) -> TreebankError:
        return TreebankError(cause, path=path, line=line)

    for match in _TOKEN.finditer(text):
        token = match.group()
        line += text.count("\n", last, match.start())
        last = match.start()
        if token == "(":
            stack.append((None, [], line))
        elif token == ")":
            if not stack:
                raise fail("')' without a matching '('", line)
            label, children, _ = stack.pop()
            if not children:
                raise fail(f"empty constituent '({label or ''})'", line)
            if len(children) == 1 and isinstance(children[0], str):
                node = Tree(label or "", word=children[0])  # (TAG word)
            else:
                node = Tree(label or "", tuple(Tree("", word=c) if isinstance(c, str) else c
                                               for c in children))
            if stack:
                stack[-1][1].append(node)
            else:
                yield node
        elif not stack:
            raise fail(f"text {token!r} outside brackets", line)
        else:
            label, children, start = stack[-1]
            if label is None and not children and text[match.start() - 1] == "(":
                stack[-1] = (token, children, start)  # a label touches its "("
            else:
                children.append(token)
    if stack:
        raise fail(f"'(' opened here is never closed ({len(stack)} open at the end)",
                   stack[0][2])


def parse_brackets(text: str, path: str = "<input>") -> Tree:
    """Parse exactly one bracketed tree, e.g. ``(S (NP (DT the) (NN cat)) (VP (VBZ sleeps)))``.

    A label is the word that touches its ``(``; ``( (S ...))`` or ``( a b)`` (space after the
    bracket) is an unlabelled node. ``(TAG word)`` is a leaf; a bare word among other children
    is an unlabelled leaf. No pruning or relabelling is done (see ``read_brackets``).

    Args:
        text: the bracketed tree (may span several lines).
        path: the name used in error messages.

    Returns:
        The tree.

    Raises:
        TreebankError: unbalanced brackets, an empty constituent, text outside brackets, or not
            exactly one tree.
    """
    trees = list(_parse_tokens(text, path))
    if len(trees) != 1:
        raise TreebankError(f"expected one tree, found {len(trees)}", path=path, line=1)
    return trees[0]


def read_brackets(path_or_file: PathOrFile, drop_traces: bool = True, drop_punct: bool = False,
                  punct_tags: Collection[str] = PTB_PUNCT_TAGS,
                  strip_functions: bool = True, name: str | None = None) -> list[Tree]:
    """Read a file of PTB-style bracketed trees (one per top-level bracket group; a tree may
    span several lines, and several trees may share one).

    Args:
        path_or_file: a path, or an open text or binary file (UTF-8).
        drop_traces: remove ``-NONE-`` leaves (traces, empty elements), then the constituents
            left empty.
        drop_punct: remove leaves whose POS tag is in ``punct_tags``, then empty constituents.
        punct_tags: the punctuation POS tags (default: the PTB's ``'' `` , . : -LRB- -RRB- # $``).
        strip_functions: map ``NP-SBJ-1`` to ``NP`` on inner nodes (see
            ``strip_function_tags``).
        name: the file name used in error messages.

    Returns:
        The trees in file order. A tree whose words are all removed is kept as an empty tree
        (``leaves`` is ``[]``), so that trees stay aligned with other files.

    Raises:
        TreebankError: naming file and line: bytes that are not UTF-8, unbalanced brackets,
            empty constituents, text outside brackets.
    """
    text, path = read_text(path_or_file, name)
    if bad_byte_cause(text) is not None:
        line = next(line for line in text.split("\n") if bad_byte_cause(line) is not None)
        raise TreebankError(str(bad_byte_cause(line)), path=path,
                            line=text.count("\n", 0, text.index(line)) + 1)
    drop = set(punct_tags) if drop_punct else set()
    if drop_traces:
        drop.add(TRACE_TAG)
    relabel = strip_function_tags if strip_functions else None
    trees = []
    for tree in _parse_tokens(text, path):
        keep = [label not in drop for label in leaf_labels(tree)] if drop else None
        trees.append(_rebuild(tree, keep, relabel) if drop or relabel else tree)
    return trees


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
        >>> to_brackets(tree_from_dependency(["the", "cat", "saw", "a", "dog", "."],
        ...                                  [2, 3, 0, 5, 3, 3], [False] * 5 + [True]))
        '(X (X the cat) saw (X a dog) (. .))'
    """
    tags = ["." if p else "" for p in (punctuation or [False] * len(words))]
    return tree_from_spans(words, dependency_spans(heads), label=label, leaf_labels=tags)
