"""Evaluation helpers: sacreBLEU wrapper, perplexity, word-level attachment of supervised heads."""

import math

import numpy as np
import pytest
import sacrebleu
from hypothesis import given, settings, strategies as st

from synattn.evaluate import head_agreement, perplexity, supervised_attachment, translation_scores, word_predictions
from synattn.evaluate.attachment import tree_predictions, word_arc_scores
from tests.helpers.trees import all_trees


def test_translation_scores_match_sacrebleu():
    hyp = ["the cat sat on the mat", "a dog barks"]
    ref = ["the cat sat on a mat", "the dog barks"]
    scores = translation_scores(hyp, ref)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(hyp, [ref]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(hyp, [ref]).score)
    assert scores.bleu_signature.startswith("nrefs:1|") and "chrF" in scores.format()
    assert translation_scores(ref, ref).bleu == pytest.approx(100.0)
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        translation_scores(hyp, ref[:1])


def test_perplexity():
    assert perplexity(10 * math.log(5), 10) == pytest.approx(5)
    assert perplexity(1e6, 1) == math.inf
    with pytest.raises(ValueError):
        perplexity(1.0, 0)


def test_word_predictions_read_the_final_piece():
    # words: w0 = pieces 0,1; w1 = piece 2 (root); w2 = pieces 3,4. Gold: w0 <- w1, w2 <- w1.
    word_of_piece = np.array([0, 0, 1, 2, 2])
    scores = np.full((5, 5), -5.0)
    scores[0, 1] = scores[3, 4] = 0  # non-final pieces point right (ignored for the word's arc)
    scores[1, 2] = 0  # final piece of w0 -> piece of w1
    scores[2, 2] = 0  # root word attends itself
    scores[4, 0] = 0  # final piece of w2 -> first piece of w0 (wrong: gold is w1)
    assert word_predictions(scores, word_of_piece).tolist() == [2, 0, 1]
    result = supervised_attachment([scores], [word_of_piece], [np.array([2, 0, 2])])
    assert result.uas == pytest.approx(2 / 3)


def test_word_arc_scores_sum_the_mass_on_each_words_pieces():
    # w0 = pieces 0,1; w1 = piece 2; w2 = pieces 3,4. Final pieces: 1, 2, 4.
    word_of_piece = np.array([0, 0, 1, 2, 2])
    probs = np.array([[.2, .2, .2, .2, .2],
                      [.1, .1, .5, .2, .1],   # w0 -> w1 0.5, own word (ROOT) 0.2, w2 0.3
                      [.3, .3, .1, .2, .1],   # w1 -> w0 0.6, own 0.1, w2 0.3
                      [.2, .2, .2, .2, .2],
                      [.05, .05, .3, .3, .3]])  # w2 -> w1 0.3, own 0.6, w0 0.1
    s = np.exp(word_arc_scores(np.log(probs), word_of_piece))  # [h, d], 0 = ROOT
    expected = np.array([[0, .2, .1, .6],
                         [0, 0, .6, .1],
                         [0, .5, 0, .3],
                         [0, .3, .3, 0]])
    np.testing.assert_allclose(s, expected, atol=1e-12)


def test_tree_predictions_repair_what_the_argmax_reading_breaks():
    # The argmax reading makes w0 and w1 each other's heads (a cycle, no root): w0 -> w1 (.55),
    # w1 -> w0 (.6). The best single-root tree keeps the stronger of the two arcs.
    word_of_piece = np.array([0, 1])
    probs = np.array([[.45, .55], [.6, .4]])  # row 0: w0 puts .45 on itself (ROOT), .55 on w1
    assert word_predictions(np.log(probs), word_of_piece).tolist() == [2, 1]  # a cycle
    scores = word_arc_scores(np.log(probs), word_of_piece)
    # trees: w0 root & w1 -> w0: .45 * .6 = .27; w1 root & w0 -> w1: .4 * .55 = .22
    assert [h.tolist() for h in tree_predictions([scores])] == [[0, 1]]


@pytest.mark.parametrize("projective", [True, False])
@given(st.integers(1, 5), st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_tree_predictions_are_the_best_trees_by_enumeration(projective, n, seed):
    rng = np.random.default_rng(seed)
    word_of_piece = np.repeat(np.arange(n), rng.integers(1, 4, size=n))  # 1-3 pieces per word
    logits = rng.normal(size=(len(word_of_piece), len(word_of_piece)))
    log_probs = logits - np.logaddexp.reduce(logits, -1, keepdims=True)
    scores = word_arc_scores(log_probs, word_of_piece)
    trees = all_trees(n, projective, False)  # [T, n]
    totals = scores[trees, np.arange(1, n + 1)].sum(1)
    pred = tree_predictions([scores, scores[:2, :2]], projective)[0]  # padded beside a 1-word sentence
    assert scores[pred, np.arange(1, n + 1)].sum() == pytest.approx(totals.max())


def test_head_agreement():
    heads = np.array([2, 0, 2])
    probs = np.zeros((2, 3, 3))
    probs[0, [0, 1, 2], [1, 1, 1]] = 1  # head 0 matches gold at every word (root attends itself)
    probs[1, [0, 1, 2], [0, 0, 0]] = 1  # head 1 always attends to w0: wrong for every word
    assert head_agreement(probs, heads).tolist() == [1.0, 0.0]


def test_word_predictions_over_leading_dimensions_equal_one_head_at_a_time():
    from synattn.evaluate.attachment import word_predictions

    rng = np.random.default_rng(3)
    word = np.array([0, 0, 1, 2, 2, 2, 3])
    scores = rng.normal(size=(3, 2, 7, 7))  # [layers, heads, p, p]
    stacked = word_predictions(scores, word)
    assert stacked.shape == (3, 2, 4)
    for layer in range(3):
        for head in range(2):
            assert np.array_equal(stacked[layer, head], word_predictions(scores[layer, head], word))
