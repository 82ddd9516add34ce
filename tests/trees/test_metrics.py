"""Bracket F1 and attachment scores (synattn.trees.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from synattn.errors import InputError
from synattn.trees.branching import left_branching, right_branching
from synattn.trees.constituency import parse_brackets
from synattn.trees.metrics import attachment_scores, bracket_f1


def test_bracket_f1_hand_worked():
    # sentence 1 (5 words)
    #   gold (S (NP a b) (VP c (NP d e)))  -> spans {(0,2), (2,5), (3,5)}  ((0,5) excluded)
    #   pred (S (X a b) (X c d) e)         -> spans {(0,2), (2,4)}
    #   matched {(0,2)}: P = 1/2, R = 1/3, F1 = 2 * (1/2)(1/3) / (1/2 + 1/3) = 2/5 = 0.4
    # sentence 2 (4 words)
    #   gold (S (A a) (B (C b) (D c) (E d))) -> spans {(1,4)}
    #   pred right-branching (X a (X b (X c d))) -> spans {(1,4), (2,4)}
    #   matched {(1,4)}: P = 1/2, R = 1, F1 = 2/3
    # sentence-averaged F1 = (0.4 + 2/3) / 2 = 0.5333...
    # corpus: matched 2, pred 4, gold 4 -> P = R = F1 = 0.5
    gold = [parse_brackets("(S (NP a b) (VP c (NP d e)))"),
            parse_brackets("(S (A a) (B (C b) (D c) (E d)))")]
    pred = [parse_brackets("(S (X a b) (X c d) e)"), right_branching(list("abcd"))]
    scores = bracket_f1(pred, gold)
    assert scores.per_sentence_f1 == pytest.approx([0.4, 2 / 3])
    assert scores.sentence_f1 == pytest.approx((0.4 + 2 / 3) / 2)
    assert (scores.precision, scores.recall, scores.f1) == pytest.approx((0.5, 0.5, 0.5))
    assert (scores.n_matched, scores.n_pred, scores.n_gold, scores.n_sentences) == (2, 4, 4, 2)


def test_bracket_f1_empty_cases():
    # two-word sentences have no non-trivial spans: both empty counts as F1 = 1
    two = parse_brackets("(S (A a) (B b))")
    scores = bracket_f1([two], [two])
    assert scores.sentence_f1 == 1.0 and (scores.precision, scores.recall, scores.f1) == (1, 1, 1)
    # only the prediction has spans: F1 = 0; corpus precision 0/1, recall 0/0 := 1
    scores = bracket_f1([{(0, 2)}], [set()])
    assert scores.sentence_f1 == 0.0 and (scores.precision, scores.recall, scores.f1) == (0, 1, 0)
    # only gold has spans
    scores = bracket_f1([set()], [{(0, 2)}])
    assert scores.sentence_f1 == 0.0 and (scores.precision, scores.recall, scores.f1) == (1, 0, 0)
    assert math.isnan(bracket_f1([], []).sentence_f1)


def test_bracket_f1_branching_baselines_disagree_completely():
    # for n >= 4, right-branching spans (i, n), i >= 1 and left-branching (0, j), j < n share none
    words = list("abcdef")
    scores = bracket_f1([left_branching(words)], [right_branching(words)])
    assert scores.n_matched == 0 and scores.n_pred == scores.n_gold == 4 and scores.f1 == 0.0
    assert bracket_f1([right_branching(words)], [right_branching(words)]).sentence_f1 == 1.0


def test_bracket_f1_errors():
    with pytest.raises(InputError, match="2 predicted trees for 1 gold"):
        bracket_f1([set(), set()], [set()])
    with pytest.raises(InputError, match=r"sentence 1\): predicted tree has 3 words, gold tree 4"):
        bracket_f1([right_branching(list("abc"))], [right_branching(list("abcd"))])


_span_sets = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)).map(
    lambda s: (s[0], s[0] + s[1] + 1)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_span_sets, _span_sets), max_size=6))
def test_bracket_f1_matches_loop_reference(pairs):
    pred = [set(p) for p, _ in pairs]
    gold = [set(g) for _, g in pairs]
    scores = bracket_f1(pred, gold)
    f1s, matched, n_pred, n_gold = [], 0, 0, 0
    for p, g in zip(pred, gold):
        m = sum(1 for s in p if s in g)
        prec = m / len(p) if p else 1.0
        rec = m / len(g) if g else 1.0
        f1s.append(1.0 if not p and not g else
                   (0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec)))
        matched, n_pred, n_gold = matched + m, n_pred + len(p), n_gold + len(g)
    if pairs:
        assert scores.sentence_f1 == pytest.approx(sum(f1s) / len(f1s))
    prec = matched / n_pred if n_pred else 1.0
    rec = matched / n_gold if n_gold else 1.0
    f1 = 1.0 if n_pred == n_gold == 0 else \
        (0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec))
    assert (scores.precision, scores.recall, scores.f1) == pytest.approx((prec, rec, f1))


def test_attachment_scores_hand_worked():
    # sentence 1: 4 words, the last is punctuation; heads right for words 1, 2, 4; labels right
    #   for words 1, 4 (word 2 has the right head but the wrong label)
    # sentence 2: 2 words, word 1 right (head and label), word 2 wrong head
    gold = [np.array([2, 0, 2, 2]), np.array([0, 1])]
    pred = [np.array([2, 0, 1, 2]), np.array([0, 2])]
    gold_rels = [["nsubj", "root", "obj", "punct"], ["root", "obj"]]
    pred_rels = [["nsubj", "dep", "obj", "punct"], ["root", "obj"]]
    upos = [["PRON", "VERB", "NOUN", "PUNCT"], ["VERB", "NOUN"]]
    # with punctuation: 6 words, 4 right heads (s1 w1, w2, w4; s2 w1) -> UAS 4/6;
    #   labeled right: s1 w1, w4; s2 w1 -> LAS 3/6
    s = attachment_scores(pred, gold, pred_rels, gold_rels, upos=upos)
    assert (s.uas, s.las, s.n_words) == (pytest.approx(4 / 6), pytest.approx(3 / 6), 6)
    # without punctuation: 5 words, right heads s1 w1, w2; s2 w1 -> 3/5; labeled s1 w1, s2 w1
    s = attachment_scores(pred, gold, pred_rels, gold_rels, upos=upos, punct=False)
    assert (s.uas, s.las, s.n_words) == (pytest.approx(3 / 5), pytest.approx(2 / 5), 5)
    assert (s.n_head_correct, s.n_labeled_correct) == (3, 2)
    # a custom punctuation tag set (here: treat NOUN as punctuation) leaves out s1 w3, s2 w2
    s = attachment_scores(pred, gold, upos=upos, punct=False, punct_tags={"PUNCT", "NOUN"})
    assert (s.uas, s.las, s.n_words) == (pytest.approx(3 / 3), None, 3)


def test_attachment_scores_errors_and_empty():
    with pytest.raises(InputError, match=r"sentence 2\): predicted heads has 1 entries for 2"):
        attachment_scores([[0], [0]], [[0], [0, 1]])
    with pytest.raises(InputError, match="needs upos"):
        attachment_scores([[0]], [[0]], punct=False)
    with pytest.raises(InputError, match="both pred_rels and gold_rels"):
        attachment_scores([[0]], [[0]], pred_rels=[["root"]])
    s = attachment_scores([[0]], [[0]], upos=[["PUNCT"]], punct=False)
    assert s.n_words == 0 and math.isnan(s.uas)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_attachment_scores_match_loop_reference(lengths, data):
    heads = lambda n: st.lists(st.integers(0, n), min_size=n, max_size=n)  # noqa: E731
    tags = lambda n: st.lists(st.sampled_from(["PUNCT", "X"]), min_size=n, max_size=n)  # noqa
    gold = [data.draw(heads(n)) for n in lengths]
    pred = [data.draw(heads(n)) for n in lengths]
    upos = [data.draw(tags(n)) for n in lengths]
    s = attachment_scores(pred, gold, upos=upos, punct=False)
    right = total = 0
    for p, g, u in zip(pred, gold, upos):
        for k in range(len(g)):
            if u[k] != "PUNCT":
                total += 1
                right += p[k] == g[k]
    assert s.n_words == total and s.n_head_correct == right
    if total:
        assert s.uas == pytest.approx(right / total)
