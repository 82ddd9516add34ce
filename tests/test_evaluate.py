"""Evaluation helpers: sacreBLEU wrapper, perplexity, word-level attachment of supervised heads."""

import math

import numpy as np
import pytest
import sacrebleu

from synattn.evaluate import head_agreement, perplexity, supervised_attachment, translation_scores, word_predictions


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


def test_head_agreement():
    heads = np.array([2, 0, 2])
    probs = np.zeros((2, 3, 3))
    probs[0, [0, 1, 2], [1, 1, 1]] = 1  # head 0 matches gold at every word (root attends itself)
    probs[1, [0, 1, 2], [0, 0, 0]] = 1  # head 1 always attends to w0: wrong for every word
    assert head_agreement(probs, heads).tolist() == [1.0, 0.0]
