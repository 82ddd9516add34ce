"""Syntax for a tokenizer's pieces: word trees + word_ids() -> syntax fields, and the collator."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from synattn.errors import InputError
from synattn.hf import SyntaxCollator, SyntaxEncoder, piece_heads, tokenize_trees
from synattn.hf.align import as_tree, label_vocab, word_attachment
from synattn.trees import DependencyTree
from synattn.trees.relations import batch_relation_labels, distance_vocab, head_targets, syntax_hints, traversal_vocab
from synattn.trees.subword import project_to_subwords
from tests.helpers.hf_models import wordpiece_tokenizer
from tests.helpers.strategies import trees_with_pieces

ALL = ("tree_dist", "traversal", "head_targets", "hints")


def bert_word_ids(pieces):
    return [None] + [w for w, p in enumerate(pieces) for _ in range(p)] + [None]


@settings(max_examples=60, deadline=None)
@given(trees_with_pieces())
def test_piece_tree_is_the_subword_projection_between_special_tokens(case):
    heads, pieces = case
    full = piece_heads(heads, bert_word_ids(pieces))
    sub = project_to_subwords(heads, pieces)
    assert full[0] == full[-1] == -1
    assert full[1:-1].tolist() == np.where(sub > 0, sub + 1, 0).tolist()


@settings(max_examples=40, deadline=None)
@given(trees_with_pieces())
def test_fields_are_those_of_the_subword_tree_with_special_tokens_outside(case):
    heads, pieces = case
    encoder = SyntaxEncoder(ALL, max_distance=3, max_traversal=2)
    out = encoder.encode((["w"] * len(heads), heads), bert_word_ids(pieces))
    sub = project_to_subwords(heads, pieces)
    m = len(sub)
    assert out["head_targets"].tolist() == [-100] + (head_targets(sub) + 1).tolist() + [-100]
    hints = (syntax_hints(sub) + 1).tolist()
    assert out["hints"].tolist() == [-100] + hints[:-1] + [-100, -100]
    dist, trav = batch_relation_labels(sub[None], None, 3, 2)
    for name, labels, vocab in (("tree_dist", dist, distance_vocab(3)),
                                ("traversal", trav, traversal_vocab(2))):
        grid = out[name]
        assert encoder.outside(name) == len(vocab)
        assert (grid[1:m + 1, 1:m + 1] == labels[0]).all()
        assert (grid[0] == len(vocab)).all() and (grid[:, -1] == len(vocab)).all()


def test_tokenizer_pieces_and_collated_batch():
    tokenizer = wordpiece_tokenizer()
    trees = [DependencyTree("the cat sat on the mat".split(), np.array([2, 3, 0, 6, 6, 3])),
             DependencyTree("she reads".split(), np.array([2, 0]))]
    encoder = SyntaxEncoder(ALL)
    items = tokenize_trees(tokenizer, trees, encoder)
    word_ids = tokenizer(trees[0].words, is_split_into_words=True).word_ids()
    assert word_ids == [None, 0, 1, 2, 2, 3, 3, 4, 5, 5, None]
    # sat = s ##at (positions 3, 4) is the root; mat = ma ##t heads to sat's first piece
    assert items[0]["syntax_head_targets"].tolist() == [-100, 2, 3, 4, 4, 6, 8, 8, 9, 3, -100]
    batch = SyntaxCollator(tokenizer, encoder)(items)
    n0, n1 = len(items[0]["input_ids"]), len(items[1]["input_ids"])
    assert batch["input_ids"].shape == batch["syntax_head_targets"].shape == (2, n0)
    assert batch["syntax_tree_dist"].shape == (2, n0, n0)
    assert batch["syntax_tree_dist"].dtype == torch.int8
    assert (batch["syntax_tree_dist"][1, n1:] == encoder.outside("tree_dist")).all()
    assert (batch["syntax_head_targets"][1, n1:] == -100).all()


def test_left_padding_shifts_the_positions():
    tokenizer = wordpiece_tokenizer()
    tokenizer.padding_side = "left"
    trees = [("the cat sat on the mat".split(), [2, 3, 0, 6, 6, 3]), ("she reads".split(), [2, 0])]
    encoder = SyntaxEncoder(ALL)
    items = tokenize_trees(tokenizer, trees, encoder)
    batch = SyntaxCollator(tokenizer, encoder, lm_labels=True)(items)
    n0, n1 = len(items[0]["input_ids"]), len(items[1]["input_ids"])
    pad = n0 - n1
    expected = [t + pad if t >= 0 else t for t in items[1]["syntax_head_targets"].tolist()]
    assert batch["syntax_head_targets"][1, pad:].tolist() == expected
    assert (batch["labels"][1, :pad] == -100).all()
    assert torch.equal(batch["syntax_traversal"][1, pad:, pad:],
                       torch.as_tensor(items[1]["syntax_traversal"]).to(torch.int8))


def test_truncation_sends_arcs_to_cut_words_to_root():
    # words: a b c d, heads: a->d, b->a, c->d, d root; keep a and b only
    full = piece_heads([4, 1, 4, 0], [None, 0, 1, None])
    assert full.tolist() == [-1, 0, 2, -1]


def test_missing_word_is_an_error():
    with pytest.raises(InputError, match=r"word ids must run .* but words \[1\] are missing"):
        piece_heads([2, 0, 2], [None, 0, 2, None])
    with pytest.raises(InputError, match="word 0 follows word 1 .a second sentence"):  # a sentence pair
        piece_heads([2, 0], [None, 0, 1, None, 0, 1, None])


def test_pos_and_deprel_ids_with_outside_and_unknown():
    tree = DependencyTree(["she", "reads"], np.array([2, 0]), ["nsubj", "root"], ["PRON", "VERB"])
    pos_vocab = label_vocab([tree], "upos")
    encoder = SyntaxEncoder(["pos", "deprel"], pos_vocab=pos_vocab, deprel_vocab=["<outside>", "<unk>", "root"])
    out = encoder.encode(tree, [None, 0, 1, 1, None])
    assert pos_vocab == ["<outside>", "<unk>", "PRON", "VERB"]
    assert out["pos"].tolist() == [0, 2, 3, 3, 0]
    assert out["deprel"].tolist() == [0, 1, 2, 2, 0]


def test_spacy_doc_gives_the_same_tree():
    spacy = pytest.importorskip("spacy")
    vocab = spacy.vocab.Vocab()
    doc = spacy.tokens.Doc(vocab, words=["she", "reads", "books"], heads=[1, 1, 1],
                           deps=["nsubj", "ROOT", "obj"])
    tree = as_tree(doc)
    assert tree.words == ["she", "reads", "books"]
    assert tree.heads.tolist() == [2, 0, 2]
    assert tree.deprels == ["nsubj", "ROOT", "obj"]


def test_word_attachment_reads_the_final_pieces():
    word_ids = [None, 0, 1, 1, None]  # she | re ##ads
    heads = [2, 0]
    full = piece_heads(heads, word_ids)
    gold = head_targets(np.where(full < 0, 0, full))
    assert word_attachment(gold, word_ids, heads) == (2, 2)
    wrong = gold.copy()
    wrong[3] = 1
    assert word_attachment(wrong, word_ids, heads) == (1, 2)


def test_byte_level_pieces_train_a_gpt2_pointer_loss():
    import synattn.hf as sh
    from tests.helpers.hf_models import byte_bpe_tokenizer, gpt2
    tokenizer = byte_bpe_tokenizer()
    tokenizer.padding_side = "left"
    trees = [("colourless green ideas sleep furiously".split(), [3, 3, 4, 0, 4]),
             ("she reads".split(), [2, 0])]
    encoder = SyntaxEncoder(["hints", "head_targets"])
    items = tokenize_trees(tokenizer, trees, encoder)
    word_ids = tokenizer(trees[0][0], is_split_into_words=True).word_ids()
    assert None not in word_ids and len(word_ids) > 5  # no special tokens; words split
    full = piece_heads(trees[0][1], word_ids)
    assert items[0]["syntax_hints"].tolist() == syntax_hints(full).tolist()[:-1] + [-100]
    batch = SyntaxCollator(tokenizer, encoder, lm_labels=True)(items)
    torch.manual_seed(0)
    model = gpt2().train()
    model.resize_token_embeddings(len(tokenizer))
    sh.attach(model, [{"feature": "bird_eye", "variant": "sg", "side": "decoder", "layers": [1]},
                      {"feature": "supervised_head", "side": "decoder", "layers": [0]}])
    out = model(**batch)
    assert set(out.synattn_losses) == {"decoder_1.pointer", "decoder_0.parse"}
    assert torch.isfinite(out.loss)
