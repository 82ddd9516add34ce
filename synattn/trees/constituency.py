"""Constituency trees in PTB bracket notation and their spans (trees built from spans or from
dependency trees, and the branching baselines, are in :mod:`synattn.trees.branching`).

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
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

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
    return [node.word for event, node in _walk(tree) if event == "leaf" and node.word is not None]


def leaf_labels(tree: Tree) -> list[str]:
    """The POS tags (leaf labels) of ``tree`` from left to right."""
    return [node.label for event, node in _walk(tree) if event == "leaf"]


def to_brackets(tree: Tree) -> str:
    """Write ``tree`` in PTB notation on one line.

    An unlabelled leaf is its bare word; an unlabelled inner node opens with ``"( "`` (so that
    ``parse_brackets`` does not take its first word for a label). An inner node whose only
    child is an unlabelled leaf, ``(X w)``, reads back as a leaf tagged ``X``. Brackets inside
    words are written as the Penn Treebank writes them, ``-LRB-`` and ``-RRB-``, so that the
    output reads back.
    """
    parts: list[str] = []
    for event, node in _walk(tree):
        if event == "leaf" and node.word is not None:  # (a leaf has its word)
            word = node.word.replace("(", "-LRB-").replace(")", "-RRB-")
            parts.append(f"({node.label} {word})" if node.label else word)
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

