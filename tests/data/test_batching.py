"""Batches from prepared datasets: token budget, determinism, syntax fields equal per-sentence ones."""

import numpy as np
import pytest
import torch

from synattn.syntax.inputs import IGNORE_INDEX
from synattn.data.batching import PreparedDataset, collate, token_batches
from synattn.syntax.request import SyntaxRequest
from synattn.data.prepare import PrepareConfig, prepare
from synattn.data.subwords import BOS, EOS, PAD
from synattn.trees.relations import distance_labels, traversal_labels, traversal_vocab
from tests.helpers.treebank import CONLLU


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ds")
    (tmp / "t.conllu").write_text(CONLLU * 4)
    out = prepare(PrepareConfig(out=str(tmp / "d"), src_trees={"train": str(tmp / "t.conllu")},
                                tgt_lang=None, vocab_size=40))
    return PreparedDataset(out, "train")


def test_token_batches_respect_budget_and_are_deterministic():
    lengths = np.random.default_rng(0).integers(1, 40, size=500)
    batches = token_batches(lengths, 200, seed=3, epoch=1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    assert all(len(b) * lengths[b].max() <= 200 for b in batches)
    again = token_batches(lengths, 200, seed=3, epoch=1)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))
    other = token_batches(lengths, 200, seed=3, epoch=2)
    assert any(not np.array_equal(a, b) for a, b in zip(batches, other))
    assert [len(b) for b in token_batches(np.array([500, 3]), 100, shuffle=False)] == [1, 1]


def test_collate_source_syntax_matches_per_sentence(dataset):
    wanted = frozenset({"tree_dist", "traversal", "pos", "head_targets"})
    batch = collate(dataset, np.arange(6), SyntaxRequest(src=wanted, max_distance=2, max_traversal=2))
    syntax = batch.src_syntax
    far_t = len(traversal_vocab(2)) - 1
    for b in range(6):
        ex = dataset[b]
        heads, n = ex["src_heads"], len(ex["src_heads"])
        assert batch.src[b, n] == EOS and bool(batch.src_padding[b, n + 1:].all())
        assert np.array_equal(syntax.tree_dist[b, :n, :n].numpy(), distance_labels(heads, 2))
        assert np.array_equal(syntax.traversal[b, :n, :n].numpy(), traversal_labels(heads, 2))
        assert (syntax.tree_dist[b, n:, :] == 3).all() and (syntax.traversal[b, :, n:] == far_t).all()
        expected = np.where(heads > 0, heads - 1, np.arange(n))
        assert np.array_equal(syntax.head_targets[b, :n].numpy(), expected)
        assert (syntax.head_targets[b, n:] == IGNORE_INDEX).all()
        assert np.array_equal(syntax.pos[b, :n].numpy(), ex["src_upos"])


def test_a_source_framed_with_bos_shifts_its_syntax_by_one(dataset):
    wanted = frozenset({"tree_dist", "head_targets"})
    plain = collate(dataset, np.arange(6), SyntaxRequest(src=wanted, max_distance=2))
    framed = collate(dataset, np.arange(6), SyntaxRequest(src=wanted, max_distance=2, src_bos=True))
    assert (plain.src_offset, framed.src_offset) == (0, 1) and framed.src.shape == plain.src.shape
    for b in range(6):
        n = len(dataset[b]["src_ids"])
        assert framed.src[b, 0] == BOS and (framed.src[b, 1:n + 1] == plain.src[b, :n]).all()
        assert (framed.src[b] != EOS).all() and bool(framed.src_padding[b, n + 1:].all())
        assert (framed.src_syntax.tree_dist[b, 1:n + 1, 1:n + 1] == plain.src_syntax.tree_dist[b, :n, :n]).all()
        targets = plain.src_syntax.head_targets[b, :n]
        assert (framed.src_syntax.head_targets[b, 1:n + 1] == targets + 1).all()


def test_target_side_shift_and_causal_targets(dataset):
    # Use the source trees as if they were target trees: decoder positions are shifted by <s>.
    dataset.fields.update({k.replace("src", "tgt"): v for k, v in list(dataset.fields.items())})
    try:
        batch = collate(dataset, np.arange(3), SyntaxRequest(tgt=frozenset({"head_targets", "tree_dist"})))
    finally:
        for k in [k for k in dataset.fields if k.startswith("tgt")]:
            del dataset.fields[k]
    for b in range(3):
        ex = dataset[b]
        ids, heads = ex["src_ids"], ex["src_heads"]
        m = len(ids)
        assert batch.tgt_in[b, 0] == BOS and torch.equal(batch.tgt_in[b, 1:m + 1], torch.tensor(ids, dtype=torch.long))
        assert batch.tgt_out[b, m] == EOS and torch.equal(batch.tgt_out[b, :m], batch.tgt_in[b, 1:m + 1])
        targets = batch.tgt_syntax.head_targets[b]
        assert targets[0] == IGNORE_INDEX
        for k, h in enumerate(heads):
            head_pos = (h if h > 0 else k + 1)  # decoder position of the head piece (root: itself)
            assert targets[k + 1] == (head_pos if head_pos <= k + 1 else IGNORE_INDEX)
        assert np.array_equal(batch.tgt_syntax.tree_dist[b, 1:m + 1, 1:m + 1].numpy(), distance_labels(heads))
        assert (batch.tgt_syntax.tree_dist[b, 0] == 9).all()
    assert (batch.tgt_out == PAD).equal(batch.tgt_padding)


def test_missing_trees_is_a_clear_error(dataset):
    with pytest.raises(ValueError, match="on the target side, but the dataset is monolingual"):
        collate(dataset, np.arange(2), SyntaxRequest(tgt=frozenset({"tree_dist"})))

    with pytest.raises(ValueError, match="needs tree_dist on the src side, but the dataset has no src trees"):
        ds = PreparedDataset(dataset.folder, "train")
        del ds.fields["src_heads"]
        collate(ds, np.arange(2), SyntaxRequest(src=frozenset({"tree_dist"})))
