"""The Hugging Face aligner goes through the syntax-field registry: its fields equal those of the
hand-written aligner it replaced, field by field (dtype and values, before and after collation);
a field registered elsewhere flows through tokenize_trees and SyntaxCollator into a batch."""

from __future__ import annotations

import io
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.hf import SyntaxCollator, SyntaxEncoder, tokenize_trees
from synattn.hf.align import as_tree, label_vocab, piece_heads
from synattn.hf.features import relation_labels
from synattn.syntax.fields import IGNORE_INDEX, SyntaxField, TreeBatch, register_field, unregister_field
from synattn.trees import DependencyTree, read_conllu
from synattn.trees.relations import batch_relation_labels, head_targets, syntax_hints
from tests.helpers.hf_models import CONLLU, byte_bpe_tokenizer, wordpiece_tokenizer
from tests.helpers.strategies import trees_with_pieces
from tests.helpers.syntax_fields import piece_depths

ALL = ("tree_dist", "traversal", "head_targets", "hints", "pos", "deprel")
PAIR_FIELDS = ("tree_dist", "traversal")


# ------------------------------------------------------------------------------------------------
# the hand-written aligner the registry replaced (synattn/hf/align.py before), verbatim


class OldSyntaxEncoder:
    def __init__(self, fields=("head_targets",), max_distance=8, max_traversal=4, pos_vocab=None,
                 deprel_vocab=None):
        known = ("tree_dist", "traversal", "head_targets", "hints", "pos", "deprel")
        unknown = [f for f in fields if f not in known]
        if unknown:
            raise ValueError(f"unknown syntax field(s) {unknown}; use some of {list(known)}")
        self.fields = tuple(fields)
        self.max_distance, self.max_traversal = max_distance, max_traversal
        self.vocabs = {"pos": list(pos_vocab or []), "deprel": list(deprel_vocab or [])}
        for name in ("pos", "deprel"):
            if name in self.fields and not self.vocabs[name]:
                raise ValueError(f"syntax field {name!r} needs {name}_vocab (see label_vocab)")
        self._index = {k: {label: i for i, label in enumerate(v)} for k, v in self.vocabs.items()}

    def outside(self, field):
        return relation_labels(field, self.max_distance, self.max_traversal) - 1

    def encode(self, sentence, word_ids):
        tree = as_tree(sentence)
        full = piece_heads(tree.heads, word_ids)  # [T], -1 at special tokens
        real = np.flatnonzero(full >= 0)
        t = len(word_ids)
        out = {}
        if "head_targets" in self.fields:
            targets = np.full(t, IGNORE_INDEX, dtype=np.int64)
            targets[real] = head_targets(np.where(full < 0, 0, full))[real]
            out["head_targets"] = targets
        if "hints" in self.fields:
            hints = syntax_hints(np.where(full < 0, 0, full))  # special tokens: roots of their own
            following = np.append(full[1:] >= 0, False)  # the next token is a piece of a word
            out["hints"] = np.where((full >= 0) & following, hints, IGNORE_INDEX)
        pair = [f for f in PAIR_FIELDS if f in self.fields]
        if pair:
            sub = full[real]
            sub = np.where(sub > 0, np.searchsorted(real, sub - 1) + 1, 0)[None]  # over real pieces
            dist, trav = batch_relation_labels(sub, None, self.max_distance, self.max_traversal)
            for name, labels in (("tree_dist", dist), ("traversal", trav)):
                if name in pair:
                    grid = np.full((t, t), self.outside(name), dtype=np.int16)
                    grid[np.ix_(real, real)] = labels[0]
                    out[name] = grid
        for name, column in (("pos", tree.upos), ("deprel", tree.deprels)):
            if name in self.fields:
                index = self._index[name]
                ids = np.zeros(t, dtype=np.int64)
                word = [w for w in word_ids if w is not None]
                ids[real] = [index.get(column[w], 1) for w in word]
                out[name] = ids
        return out


class OldSyntaxCollator:
    def __init__(self, tokenizer, encoder, lm_labels=False):
        self.tokenizer, self.encoder, self.lm_labels = tokenizer, encoder, lm_labels

    def __call__(self, items):
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
            field = key.split("syntax_", 1)[1]
            if field in PAIR_FIELDS:
                fill = self.encoder.outside(field)
                dtype = torch.int8 if fill < 127 else torch.int16
                grid = torch.full((len(items), t, t), fill, dtype=dtype)
                for b, (item, off) in enumerate(zip(items, offsets)):
                    n = lengths[b]
                    grid[b, off:off + n, off:off + n] = torch.as_tensor(np.asarray(item[key]), dtype=dtype)
                batch[key] = grid
            else:
                pad = IGNORE_INDEX if field in ("head_targets", "hints") else 0
                values = self._pad1(items, key, pad, offsets, t)
                if field in ("head_targets", "hints"):
                    shift = torch.tensor(offsets)[:, None]
                    values = torch.where(values >= 0, values + shift, values)
                batch[key] = values
        return batch

    @staticmethod
    def _pad1(items, key, pad, offsets, t):
        out = torch.full((len(items), t), pad, dtype=torch.long)
        for b, (item, off) in enumerate(zip(items, offsets)):
            values = torch.as_tensor(np.asarray(item[key]), dtype=torch.long)
            out[b, off:off + len(values)] = values
        return out


# ------------------------------------------------------------------------------------------------
# equivalence


def _assert_same_arrays(new: dict[str, Any], old: dict[str, Any]) -> None:
    assert sorted(new) == sorted(old)  # the order of the keys follows the requested fields now
    for key, value in old.items():
        got = new[key]
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype and got.shape == value.shape and torch.equal(got, value), key
        elif isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.shape == value.shape, key
            np.testing.assert_array_equal(got, value, err_msg=key)
        else:
            assert got == value, key


def _trees() -> list[DependencyTree]:
    trees = read_conllu(io.StringIO(CONLLU))
    # several roots, a word with a label the vocabularies lack, a one-word sentence
    trees.append(DependencyTree("green ideas sleep furiously now".split(), np.array([2, 0, 0, 3, 3]),
                                ["amod", "root", "root", "advmod", "weird"], ["ADJ", "NOUN", "VERB", "ADV", "X"]))
    trees.append(DependencyTree(["dogs"], np.array([0]), ["root"], ["NOUN"]))
    return trees


def _vocabs(trees):
    # built from the first sentences only, so later ones have labels mapped to <unk>
    return label_vocab(trees[:2], "upos"), label_vocab(trees[:2], "deprels")


def _bos_bpe(template: str):
    from tokenizers import processors
    tokenizer = byte_bpe_tokenizer()
    eid = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[("<|endoftext|>", eid)])
    return tokenizer


TOKENIZERS = {
    "wordpiece [CLS] x [SEP]": wordpiece_tokenizer,
    "byte BPE, no specials": byte_bpe_tokenizer,
    "byte BPE, BOS only": lambda: _bos_bpe("<|endoftext|> $A"),
    "byte BPE, two before and one after": lambda: _bos_bpe("<|endoftext|> <|endoftext|> $A <|endoftext|>"),
}


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_encoder_and_collator_equal_the_hand_written_aligner(name, side):
    tokenizer = TOKENIZERS[name]()
    tokenizer.padding_side = side
    trees = _trees()
    pos_vocab, deprel_vocab = _vocabs(trees)
    for fields, max_distance, max_traversal, kwargs in (
            (ALL, 8, 4, {}), (ALL, 2, 1, {}), (("hints", "traversal", "pos"), 3, 6, {}),
            (("head_targets",), 8, 4, {}), (ALL, 1, 2, dict(truncation=True, max_length=6))):
        vocabs = dict(pos_vocab=pos_vocab, deprel_vocab=deprel_vocab, max_distance=max_distance,
                      max_traversal=max_traversal)
        new, old = SyntaxEncoder(fields, **vocabs), OldSyntaxEncoder(fields, **vocabs)
        new_items = tokenize_trees(tokenizer, trees, new, **kwargs)
        old_items = tokenize_trees(tokenizer, trees, old, **kwargs)
        for a, b in zip(new_items, old_items, strict=True):
            _assert_same_arrays(a, b)
        for field in PAIR_FIELDS:
            assert new.outside(field) == old.outside(field)
        for lm_labels in (False, True):
            for chunk in (slice(0, 1), slice(0, 3), slice(2, None)):
                _assert_same_arrays(SyntaxCollator(tokenizer, new, lm_labels=lm_labels)(new_items[chunk]),
                                    OldSyntaxCollator(tokenizer, old, lm_labels=lm_labels)(old_items[chunk]))


WORD_IDS = {
    "[CLS] x [SEP]": lambda pieces: [None, *_words(pieces), None],
    "no specials": lambda pieces: _words(pieces),
    "BOS only": lambda pieces: [None, *_words(pieces)],
    "EOS only": lambda pieces: [*_words(pieces), None],
    "two before, two after": lambda pieces: [None, None, *_words(pieces), None, None],
}


def _words(pieces):
    return [w for w, p in enumerate(pieces) for _ in range(p)]


@settings(max_examples=40, deadline=None)
@given(trees_with_pieces(), st.sampled_from(list(WORD_IDS)), st.integers(0, 4), st.integers(0, 4),
       st.randoms(use_true_random=False))
def test_encode_equals_the_hand_written_aligner_on_random_trees(case, layout, max_distance, max_traversal, rng):
    heads, pieces = case
    labels = ["NOUN", "VERB", "ADJ", "X"]
    tree = DependencyTree(["w"] * len(heads), heads, [rng.choice(labels) for _ in heads],
                          [rng.choice(labels) for _ in heads])
    vocab = ["<outside>", "<unk>", "ADJ", "NOUN", "VERB"]
    kwargs = dict(max_distance=max_distance, max_traversal=max_traversal, pos_vocab=vocab, deprel_vocab=vocab)
    word_ids = WORD_IDS[layout](pieces)
    _assert_same_arrays(SyntaxEncoder(ALL, **kwargs).encode(tree, word_ids),
                        OldSyntaxEncoder(ALL, **kwargs).encode(tree, word_ids))


def test_a_sentence_cut_to_its_special_tokens_is_all_outside():
    tree = DependencyTree(["she", "reads"], np.array([2, 0]), ["nsubj", "root"], ["PRON", "VERB"])
    vocab = label_vocab([tree], "upos")
    kwargs = dict(pos_vocab=vocab, deprel_vocab=vocab)
    for word_ids in ([None, None], []):
        _assert_same_arrays(SyntaxEncoder(ALL, **kwargs).encode(tree, word_ids),
                            OldSyntaxEncoder(ALL, **kwargs).encode(tree, word_ids))


def test_special_tokens_between_pieces_and_unknown_fields_are_errors():
    with pytest.raises(ValueError, match=r"special token at position 2 lies between the sentence's pieces"):
        SyntaxEncoder(ALL[:4]).encode((["a", "b"], [2, 0]), [None, 0, None, 1, None])
    with pytest.raises(ValueError, match=r"unknown syntax field\(s\) \['depth'\]; registered: tree_dist, "
                                         r"traversal, pos, deprel, head_targets, hints"):
        SyntaxEncoder(["hints", "depth"])
    with pytest.raises(ValueError, match="syntax field 'pos' needs pos_vocab"):
        SyntaxEncoder(["pos"])


# ------------------------------------------------------------------------------------------------
# fields registered here flow through tokenize_trees and SyntaxCollator


def _grandparent(trees: TreeBatch) -> list[np.ndarray]:
    """The position of each piece's head's head (None at roots and their dependents: −100)."""
    out = []
    for heads in trees.heads:
        parent = np.concatenate([[0], heads])[heads]  # 1-based head of the head, 0 = none
        at = np.where(parent > 0, parent - 1 + trees.offset, IGNORE_INDEX)
        out.append(np.concatenate([np.full(trees.offset, IGNORE_INDEX), at]))
    return out


def _siblings(trees: TreeBatch) -> np.ndarray:
    """1 where pieces i and j share a head (roots share ROOT), else 0; 2 outside the sentence."""
    heads, lengths = trees.placed_heads()
    same = (heads[:, :, None] == heads[:, None, :]).astype(np.int64)
    inside = (np.arange(trees.length) >= trees.offset)[None] & (np.arange(trees.length)[None] < lengths[:, None])
    same[~(inside[:, :, None] & inside[:, None, :])] = 2
    return same


NEW_FIELDS = (SyntaxField("depth", "token", 0, piece_depths),
              SyntaxField("grandparent", "token", IGNORE_INDEX, _grandparent, positions=True),
              SyntaxField("siblings", "pair", 2, _siblings, outside=lambda request: 3))


@contextmanager
def _registered(*fields: SyntaxField):
    for spec in fields:
        register_field(spec)
    try:
        yield
    finally:
        for spec in fields:
            unregister_field(spec.name)


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_field_registered_here_flows_into_a_batch(side):
    tokenizer = wordpiece_tokenizer()
    tokenizer.padding_side = side
    trees = [("the cat sat on the mat".split(), [2, 3, 0, 6, 6, 3]), ("the mat".split(), [2, 0])]
    with _registered(*NEW_FIELDS):
        encoder = SyntaxEncoder(["depth", "grandparent", "siblings", "head_targets"])
        items = tokenize_trees(tokenizer, trees, encoder)
        batch = SyntaxCollator(tokenizer, encoder)(items)
    word_ids = tokenizer(trees[1][0], is_split_into_words=True).word_ids()
    assert word_ids == [None, 0, 1, 1, None]  # [CLS] the ma ##t [SEP]
    item = items[1]
    assert item["syntax_depth"].tolist() == [0, 3, 2, 1, 0]  # the -> ma -> ##t (the root)
    assert item["syntax_grandparent"].tolist() == [-100, 3, -100, -100, -100]
    assert item["syntax_siblings"].tolist() == [[3] * 5, [3, 1, 0, 0, 3], [3, 0, 1, 0, 3],
                                                [3, 0, 0, 1, 3], [3] * 5]
    n0, n1 = len(items[0]["input_ids"]), len(items[1]["input_ids"])
    off = n0 - n1 if side == "left" else 0
    assert batch["syntax_depth"].shape == (2, n0) and batch["syntax_depth"].dtype == torch.long
    assert batch["syntax_depth"][1, off:off + n1].tolist() == [0, 3, 2, 1, 0]
    assert batch["syntax_grandparent"][1, off:off + n1].tolist() == [-100, 3 + off, -100, -100, -100]
    assert batch["syntax_siblings"].shape == (2, n0, n0) and batch["syntax_siblings"].dtype == torch.int8
    assert batch["syntax_siblings"][1, off:off + n1, off:off + n1].tolist() == item["syntax_siblings"].tolist()
    pad = torch.ones(n0, dtype=torch.bool)
    pad[off:off + n1] = False
    assert (batch["syntax_depth"][1, pad] == 0).all() and (batch["syntax_grandparent"][1, pad] == -100).all()
    assert (batch["syntax_siblings"][1, pad] == 3).all() and (batch["syntax_siblings"][1, :, pad] == 3).all()
    assert torch.equal(batch["syntax_head_targets"][0], torch.as_tensor(items[0]["syntax_head_targets"]))


def test_the_built_in_fields_declare_positions_and_outside_values():
    from synattn.syntax.fields import syntax_fields
    assert [f.name for f in syntax_fields() if f.positions] == ["head_targets", "hints"]
    encoder = SyntaxEncoder(["hints"], max_distance=3, max_traversal=2)
    assert {f.name: encoder.outside(f.name) for f in syntax_fields()} == {
        "tree_dist": relation_labels("tree_dist", 3, 2) - 1, "traversal": relation_labels("traversal", 3, 2) - 1,
        "pos": 0, "deprel": 0, "head_targets": IGNORE_INDEX, "hints": IGNORE_INDEX}
