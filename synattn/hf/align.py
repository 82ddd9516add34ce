"""Syntax for a fast tokenizer's pieces: dependency trees + ``word_ids()`` → ``syntax_*`` inputs.

A sentence's words are tokenized with ``is_split_into_words=True``; ``encoding.word_ids()`` gives
each token's word (None for special tokens). The word tree is projected onto the pieces by the
rules of :func:`synattn.trees.project_to_subwords` (a non-final piece hangs from the next piece,
a word's final piece from the first piece of its head word, a root word's final piece from ROOT),
then placed at the pieces' positions in the token sequence.

Every field is built by its registered builder (:mod:`synattn.syntax.fields`), as in synattn's
own batches, from a one-sentence ``TreeBatch`` whose ``offset`` is the position of the first
piece; so a field a method registers works here too. The pieces must be contiguous (special
tokens only before and after them).

Special tokens ([CLS], [SEP], <s>, </s>, BOS/EOS) and padding are outside the tree: they attach to
nothing and get each field's ``outside`` value (``SyntaxField.outside``, by default its pad): the
extra ``outside`` relation label (index ``len(vocab)``, after ``<far>``) in every pair they take
part in, the label id 0 (``<outside>``) in ``pos``/``deprel``, and ``IGNORE_INDEX`` (−100) as head
target and syntax hint, so no loss reads them. The syntax hint of the last piece (which predicts a
special token or nothing) is −100 too. A sentence cut by truncation keeps its first words; an arc
to a cut word becomes an arc to ROOT.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from synattn.errors import InputError
from synattn.syntax.fields import IGNORE_INDEX, TreeBatch, build_field, is_field, syntax_field, syntax_fields
from synattn.syntax.request import SyntaxRequest
from synattn.trees.dependency import DependencyTree
from synattn.trees.relations import MAX_DISTANCE, MAX_TRAVERSAL, head_targets
from synattn.trees.subword import project_to_subwords

OUTSIDE, UNKNOWN = "<outside>", "<unk>"


def as_tree(sentence: Any) -> DependencyTree:
    """A :class:`DependencyTree` from a tree, a spaCy ``Doc``/``Span`` or ``(words, heads)``.

    ``heads`` are 1-based, 0 = ROOT (CoNLL-U). A spaCy token whose head is itself is a root.
    """
    if isinstance(sentence, DependencyTree):
        return sentence
    if hasattr(sentence, "vocab") and hasattr(sentence, "__iter__") and not isinstance(sentence, (tuple, list)):
        tokens = list(sentence)  # spaCy Doc or Span
        start = tokens[0].i if tokens else 0
        heads = [0 if t.head.i == t.i else t.head.i - start + 1 for t in tokens]
        return DependencyTree([t.text for t in tokens], np.array(heads, dtype=np.int64),
                              [t.dep_ or "_" for t in tokens], [t.pos_ or "_" for t in tokens])
    if isinstance(sentence, (tuple, list)) and len(sentence) == 2:
        words, heads = sentence
        return DependencyTree(list(words), np.asarray(heads, dtype=np.int64))
    raise InputError(f"cannot read a dependency tree from {type(sentence).__name__}; give a "
                     "DependencyTree, a spaCy Doc or (words, heads)")


def piece_heads(heads: Sequence[int] | np.ndarray, word_ids: Sequence[int | None]) -> np.ndarray:
    """Heads of a token sequence from word heads and ``word_ids()``.

    Args:
        heads: ``[n]`` 1-based word heads, 0 = ROOT.
        word_ids: ``[T]`` the word of each token (None: special token), as given by
            ``encoding.word_ids()`` of a fast tokenizer.

    Returns:
        ``[T]`` int64: 1-based position of each token's head in the token sequence, 0 = ROOT,
        −1 for special tokens (outside the tree).

    Example:
        >>> piece_heads([2, 0], [None, 0, 0, 1, None]).tolist()  # [CLS] a ##b c [SEP]
        [-1, 3, 4, 0, -1]
    """
    word_heads = np.asarray(heads, dtype=np.int64)
    real = np.array([t for t, w in enumerate(word_ids) if w is not None], dtype=np.int64)
    words = np.array([word_ids[t] for t in real], dtype=np.int64)
    out = np.full(len(word_ids), -1, dtype=np.int64)
    if len(real) == 0:
        return out
    if (np.diff(words) < 0).any() or (np.diff(words) > 1).any() or words[0] != 0:
        gap = sorted(set(range(int(words.max()) + 1)) - set(words.tolist()))
        back = int(np.argmax(np.diff(words) < 0)) + 1 if (np.diff(words) < 0).any() else None
        what = (f"word {int(words[back])} follows word {int(words[back - 1])} (a second sentence, as a "
                "sentence pair's encoding has?)" if back is not None else f"words {gap} are missing")
        raise InputError(f"the tokens' word ids must run 0, 1, 2, ... in order with every word present, but "
                         f"{what}; tokenize one sentence with is_split_into_words=True")
    kept = int(words[-1]) + 1  # words beyond it were cut by truncation
    if kept > len(word_heads):
        raise InputError(f"the tokens cover {kept} words but the tree has {len(word_heads)}")
    word_heads = np.where(word_heads[:kept] > kept, 0, word_heads[:kept])  # arcs to cut words go to ROOT
    pieces = np.bincount(words, minlength=kept)
    sub = project_to_subwords(word_heads, pieces)  # [m] 1-based over the real pieces
    out[real] = np.where(sub > 0, real[np.maximum(sub - 1, 0)] + 1, 0)
    return out


def label_vocab(trees: Iterable[DependencyTree], column: str) -> list[str]:
    """``["<outside>", "<unk>", ...sorted labels]`` of a tree column (``"upos"``, ``"deprels"``)."""
    labels = sorted({label for tree in trees for label in getattr(tree, column)})
    return [OUTSIDE, UNKNOWN] + [x for x in labels if x not in (OUTSIDE, UNKNOWN)]


class SyntaxEncoder:
    """Computes the syntax fields of one tokenized sentence with the fields' registered builders.

    Args:
        fields: which registered syntax fields to compute (``synattn.syntax.fields``: the
            built-in ``tree_dist``, ``traversal``, ``head_targets``, ``hints``, ``pos``,
            ``deprel``, and any field a method registers).
        max_distance: largest tree distance with its own label (as the ``relations``
            feature's option of the same name).
        max_traversal: longest traversal path with its own label.
        pos_vocab: labels of ``pos`` (from :func:`label_vocab` of the ``upos`` column).
        deprel_vocab: labels of ``deprel`` (from :func:`label_vocab` of ``deprels``).
        settings: the settings other fields declare (a method's field ``depth`` with
            ``setting="max_depth"``: ``max_depth=6``; :class:`~synattn.syntax.request.SyntaxRequest`).
    """

    def __init__(self, fields: Sequence[str] = ("head_targets",), max_distance: int = MAX_DISTANCE,
                 max_traversal: int = MAX_TRAVERSAL, pos_vocab: Sequence[str] | None = None,
                 deprel_vocab: Sequence[str] | None = None, **settings: int):
        unknown = [f for f in fields if not is_field(f)]
        if unknown:
            raise ValueError(f"unknown syntax field(s) {unknown}; registered: "
                             f"{', '.join(f.name for f in syntax_fields())}")
        self.fields = tuple(fields)
        self.max_distance, self.max_traversal = max_distance, max_traversal
        self.request = SyntaxRequest(src=frozenset(self.fields), settings=settings, max_distance=max_distance,
                                     max_traversal=max_traversal)
        self.vocabs = {"pos": list(pos_vocab or []), "deprel": list(deprel_vocab or [])}
        for name in ("pos", "deprel"):
            if name in self.fields and not self.vocabs[name]:
                raise ValueError(f"syntax field {name!r} needs {name}_vocab (see label_vocab)")
        self._index = {k: {label: i for i, label in enumerate(v)} for k, v in self.vocabs.items()}

    def outside(self, field: str) -> int:
        """The value of ``field`` at special tokens and padding (a pair field's ``outside`` label)."""
        return syntax_field(field).outside_value(self.request)

    def encode(self, sentence: Any, word_ids: Sequence[int | None]) -> dict[str, np.ndarray]:
        """Returns the fields (numpy, ``[T]`` or ``[T, T]``) of one sentence's tokens.

        The pieces of the sentence's words must be contiguous (special tokens only before and
        after them): each field is built by its registered builder on the pieces placed at their
        positions (``TreeBatch.offset``: the position of the first piece).
        """
        tree = as_tree(sentence)
        full = piece_heads(tree.heads, word_ids)  # [T], -1 at special tokens
        real = np.flatnonzero(full >= 0)
        t, m = len(word_ids), len(real)
        offset = int(real[0]) if m else 0
        if m and real[-1] != offset + m - 1:
            inner = int(np.flatnonzero(full[offset: offset + m] < 0)[0]) + offset
            raise ValueError(f"the special token at position {inner} lies between the sentence's pieces; "
                             "special tokens may only come before and after them (tokenize one sentence)")
        word = [w for w in word_ids if w is not None]
        columns = {}
        for name, column, labels in (("pos", "upos", tree.upos), ("deprel", "deprel", tree.deprels)):
            if self.vocabs[name]:  # per piece, the label id of its word (1: <unk>)
                columns[column] = [np.array([self._index[name].get(labels[w], 1) for w in word], dtype=np.int64)]
        sub = full[real]
        heads = np.where(sub > 0, sub - offset, 0)  # 1-based over the real pieces, 0 = ROOT
        trees = TreeBatch([heads], columns, t, offset, False, self.request, where="SyntaxEncoder")
        outside = np.ones(t, dtype=bool)  # [T] the special tokens
        outside[offset: offset + m] = False
        out: dict[str, np.ndarray] = {}
        for name in self.fields:
            spec = syntax_field(name)
            value = build_field(name, trees)[0].numpy().astype(np.int64)  # [T] or [T, T], a copy
            # special tokens get the aligner's outside value, which differs from synattn's own
            # batches for the tree relations (an extra label after <far> instead of the overflow
            # label, fields.py) and, before the first piece, for the BET(SG) hint (-100 instead of
            # the position itself: synattn's decoder reads <s> there, which predicts the first piece)
            fill = spec.outside_value(self.request)
            if spec.kind == "pair":
                value[outside, :] = value[:, outside] = fill
                small = value.size == 0 or (value.min() >= -2 ** 15 and value.max() < 2 ** 15)
                value = value.astype(np.int16 if small else np.int64)
            else:
                value[outside] = fill
            if name == "hints" and m:
                # the hint of the last piece predicts a special token ([SEP], </s>) or nothing:
                # no target here, whereas synattn's own decoder input (<s> y, predicting y </s>)
                # keeps the piece's own position there
                value[offset + m - 1] = IGNORE_INDEX
            out[name] = value
        return out


def tokenize_trees(tokenizer: Any, sentences: Iterable[Any], encoder: SyntaxEncoder,
                   prefix: str = "syntax_", **tokenizer_kwargs: Any) -> list[dict[str, Any]]:
    """Tokenizes sentences given as trees and adds their ``syntax_*`` fields.

    Args:
        tokenizer: a fast tokenizer (``word_ids()`` is needed); for byte-level BPE (GPT-2,
            RoBERTa) create it with ``add_prefix_space=True``.
        sentences: trees, spaCy docs or ``(words, heads)``.
        encoder: which fields to compute.
        prefix: ``"syntax_"`` for ``input_ids``, ``"decoder_syntax_"`` for ``decoder_input_ids``.
        **tokenizer_kwargs: e.g. ``truncation=True, max_length=128``.

    Returns:
        One dict per sentence: the tokenizer's fields plus ``<prefix><field>`` numpy arrays.
    """
    out = []
    for sentence in sentences:
        tree = as_tree(sentence)
        encoding = tokenizer(tree.words, is_split_into_words=True, **tokenizer_kwargs)
        item = dict(encoding)
        item.update({prefix + k: v for k, v in encoder.encode(tree, encoding.word_ids()).items()})
        out.append(item)
    return out


class SyntaxCollator:
    """Pads a list of :func:`tokenize_trees` items into a batch (a dict of tensors).

    Token fields are padded by ``tokenizer.pad`` (its ``padding_side``); the syntax fields the
    same way, each with its registered ``outside`` value (head targets and hints −100,
    ``pos``/``deprel`` 0, pair fields their ``outside`` label); the values of position-valued
    fields (``SyntaxField.positions``: head targets, hints) are shifted by the padding when it is
    on the left. Pair fields are ``int8`` (``int16``, ``int64`` when their values need it), token
    fields ``int64``. A token-level ``labels`` list is padded with −100; ``lm_labels=True`` adds
    ``labels`` = ``input_ids`` with −100 at padding (language modelling).
    """

    def __init__(self, tokenizer: Any, encoder: SyntaxEncoder, lm_labels: bool = False):
        self.tokenizer, self.encoder, self.lm_labels = tokenizer, encoder, lm_labels

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        syntax_keys = [k for k in items[0] if "syntax_" in k]
        tokens = [{k: v for k, v in item.items() if k not in syntax_keys and k != "labels"}
                  for item in items]
        batch = dict(self.tokenizer.pad(tokens, return_tensors="pt"))
        t = batch["input_ids"].shape[1]
        left = self.tokenizer.padding_side == "left"
        lengths = [len(item["input_ids"]) for item in items]
        offsets = [t - n if left else 0 for n in lengths]
        if "labels" in items[0]:
            batch["labels"] = self._pad1(items, "labels", IGNORE_INDEX, offsets, t)
        if self.lm_labels:
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        for key in syntax_keys:
            spec = syntax_field(key.split("syntax_", 1)[1])
            fill = self.encoder.outside(spec.name)
            if spec.kind == "pair":
                arrays = [np.asarray(item[key]) for item in items]
                low = min([fill, *(int(v.min()) for v in arrays if v.size)])
                high = max([fill, *(int(v.max()) for v in arrays if v.size)])
                dtype = next(d for d in (torch.int8, torch.int16, torch.int64)
                             if torch.iinfo(d).min <= low and high <= torch.iinfo(d).max)
                grid = torch.full((len(items), t, t), fill, dtype=dtype)
                for b, (value, off) in enumerate(zip(arrays, offsets)):
                    n = lengths[b]
                    grid[b, off:off + n, off:off + n] = torch.as_tensor(value, dtype=dtype)
                batch[key] = grid
            else:
                values = self._pad1(items, key, fill, offsets, t)
                if spec.positions:  # positions in the sequence move with the left padding
                    shift = torch.tensor(offsets)[:, None]
                    values = torch.where(values >= 0, values + shift, values)
                batch[key] = values
        return batch

    @staticmethod
    def _pad1(items: list[dict[str, Any]], key: str, pad: int, offsets: list[int],
              t: int) -> torch.Tensor:
        out = torch.full((len(items), t), pad, dtype=torch.long)
        for b, (item, off) in enumerate(zip(items, offsets)):
            values = torch.as_tensor(np.asarray(item[key]), dtype=torch.long)
            out[b, off:off + len(values)] = values
        return out


def word_attachment(predicted: Sequence[int], word_ids: Sequence[int | None],
                    heads: Sequence[int]) -> tuple[int, int]:
    """(correct, total) unlabeled attachments of one sentence's words from a supervised head.

    A word's head is read at its final piece, whose target is the first piece of its head word
    (itself for a root word): ``predicted[t]`` is the position the head attends most at token t.
    """
    full = piece_heads(heads, word_ids)
    targets = head_targets(np.where(full < 0, 0, full))
    finals = [t for t, w in enumerate(word_ids)
              if w is not None and (t + 1 == len(word_ids) or word_ids[t + 1] != w)]
    correct = sum(int(predicted[t]) == int(targets[t]) for t in finals)
    return correct, len(finals)
