"""Top-down decoding of Tree Transformer link probabilities into trees (docs/methods.md §3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.errors import InputError
from synattn.trees.constituency import parse_brackets, spans, to_brackets
from synattn.trees.induce import induce_tree, induce_trees, induced_spans

WORDS = ["the", "cute", "dog", "is", "wagging", "its", "tail"]


def brackets(a, words=None, **kw) -> str:
    return to_brackets(induce_tree(np.array(a, dtype=float), words, **kw))


def test_one_layer_splits_at_the_weakest_link_recursively():
    # links: the-cute .5, cute-dog .7, dog-is .1, is-wagging .6, wagging-its .3, its-tail .9
    a = [[0.5, 0.7, 0.1, 0.6, 0.3, 0.9]]
    assert brackets(a, WORDS, min_layer=1) == \
        "(X (X the (X cute dog)) (X (X is wagging) (X its tail)))"


def test_untrusted_split_goes_one_layer_down():
    top = [0.95, 0.95, 0.9, 0.85, 0.99, 0.9]  # nothing below 0.8: look lower
    mid = [0.9, 0.95, 0.1, 0.85, 0.5, 0.9]  # splits dog|is, then wagging|its, rest trusted lower
    low = [0.5, 0.2, 0.05, 0.3, 0.1, 0.4]
    a = [low, mid, top]
    # min layer 2 (index 1): spans without a trusted split on the middle layer stay flat
    assert brackets(a, WORDS, min_layer=2) == "(X (X the cute dog) (X (X is wagging) (X its tail)))"
    # min layer 1: the flat spans are split further on the bottom layer
    assert brackets(a, WORDS, min_layer=1) == \
        "(X (X (X the cute) dog) (X (X is wagging) (X its tail)))"


def test_split_continues_at_the_layer_where_it_was_found():
    # the top layer splits a|bcd; bcd has no trusted split on the top layer -> flat, even though
    # the bottom layer would split it, because the top layer is the minimum (min_layer = 2)
    a = [[0.9, 0.1, 0.9], [0.2, 0.9, 0.9]]
    assert brackets(a, list("abcd"), min_layer=2) == "(X a (X b c d))"
    assert brackets(a, list("abcd"), min_layer=1) == "(X a (X b (X c d)))"


def test_threshold_and_minimum_layer_are_configurable():
    a = [[0.7, 0.75, 0.9]]
    assert brackets(a, list("abcd"), min_layer=1) == "(X a (X b (X c d)))"
    assert brackets(a, list("abcd"), min_layer=1, threshold=0.72) == "(X a (X b c d))"
    assert brackets(a, list("abcd"), min_layer=1, threshold=0.6) == "(X a b c d)"
    # a link equal to the threshold is trusted (only a_b > threshold is not)
    assert brackets([[0.8, 0.9]], list("abc"), min_layer=1) == "(X a (X b c))"
    # with fewer layers than min_layer, the top layer is the minimum
    assert brackets(a, list("abcd"), threshold=0.6) == "(X a b c d)"


def test_default_minimum_is_the_third_layer_from_the_bottom():
    high = [0.95, 0.95, 0.95]
    a = [[0.9, 0.1, 0.9], high, high, high]  # only the bottom layer has a trusted split
    assert brackets(a, list("abcd")) == "(X a b c d)"
    assert brackets(a, list("abcd"), min_layer=1) == "(X (X a b) (X c d))"
    a = [high, [0.9, 0.1, 0.9], high, high]  # second layer: still below the default minimum
    assert brackets(a, list("abcd")) == "(X a b c d)"
    a = [high, high, [0.9, 0.1, 0.9], high]  # third layer: found with the defaults
    assert brackets(a, list("abcd")) == "(X (X a b) (X c d))"


def test_short_sentences_and_default_words():
    assert brackets(np.zeros((3, 0))) == "(X 0)"
    assert brackets([[0.99], [0.99]], min_layer=1) == "(X 0 1)"
    tree = induce_tree(torch.tensor([[0.1, 0.2]]))
    assert to_brackets(tree) == "(X 0 (X 1 2))"


def reference_spans(a, threshold, min_layer):
    """The decoding of docs/methods.md §3 written recursively."""
    bottom = min(min_layer - 1, len(a) - 1)

    def decode(start, end, layer):
        if end - start < 2:
            return set()
        links = a[layer][start:end - 1]
        b = start + int(np.argmin(links))
        if a[layer][b] > threshold:
            return {(start, end)} | (decode(start, end, layer - 1) if layer > bottom else set())
        return {(start, end)} | decode(start, b + 1, layer) | decode(b + 1, end, layer)

    return decode(0, len(a[0]) + 1, len(a) - 1)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5), st.integers(1, 9), st.integers(1, 6), st.integers(0, 2 ** 31 - 1))
def test_batch_matches_recursive_reference(layers, n, min_layer, seed):
    rng = np.random.default_rng(seed)
    a = np.sort(rng.random((layers, n - 1)), axis=0)  # non-decreasing across layers
    found = induced_spans(a, 0.8, min_layer)
    assert found == reference_spans(a, 0.8, min_layer)
    tree = induce_tree(a, min_layer=min_layer)
    assert spans(tree, include_trivial=True) - {(i, i + 1) for i in range(n)} == found
    assert ((0, n) in found) == (n >= 2)
    assert parse_brackets(to_brackets(tree)) == tree
    # batched with padding equals one by one
    pad = rng.random((2, layers, 3))
    batch = np.concatenate([a[None], np.zeros((1, layers, n - 1))], axis=0)
    batch = np.concatenate([batch, pad], axis=2)  # [2, L, n − 1 + 3]
    trees = induce_trees(torch.tensor(batch), [n, 1], min_layer=min_layer)
    assert trees[0] == tree and to_brackets(trees[1]) == "(X 0)"


def test_errors():
    with pytest.raises(InputError):
        induce_tree(np.zeros(3))
    with pytest.raises(InputError):
        induce_tree(np.zeros((1, 2)), ["a", "b"])
    with pytest.raises(InputError):
        induced_spans(np.zeros((1, 2)), min_layer=0)
    with pytest.raises(InputError):
        induce_trees(np.zeros((2, 1, 3)), [5, 2])


def test_public_code_rule_sends_a_part_with_strong_links_one_layer_down():
    """Worked by hand: after the top-layer split at link 1, part (2, 5) has links 0.75 and 0.85 at
    the top. The paper's rule keeps decoding it there (split at 0.75 -> (3, 5)); the public code,
    all links > 0.7, decodes it one layer lower, where link 3 (0.2) is the split (-> (2, 4))."""
    a = np.array([[0.5, 0.9, 0.95, 0.2],     # layer 1 (bottom)
                  [0.9, 0.3, 0.75, 0.85]])   # layer 2 (top)
    paper = induced_spans(a, threshold=0.8, min_layer=1)
    original = induced_spans(a, threshold=0.8, min_layer=1, descend_above=0.7)
    assert paper == {(0, 5), (0, 2), (2, 5), (3, 5)}
    assert original == {(0, 5), (0, 2), (2, 5), (2, 4)}
    # never below the minimum layer: with min_layer = 2 the rule has nowhere to go
    assert induced_spans(a, 0.8, min_layer=2, descend_above=0.7) == induced_spans(a, 0.8, min_layer=2)


def public_code_build_tree(break_probs, layer, start, end, threshold=0.8, min_layer=2):
    """``build_tree`` of Wang, Lee & Chen's public code (2019, parse.py), transcribed: ``end`` is
    the index of the span's last link + 1, brackets are word spans (end exclusive)."""
    brackets = set()
    layer_probs = break_probs[layer, start:end]
    if end - start > 1:
        point = np.argmin(layer_probs)
        if layer_probs[point] > threshold:
            if layer == min_layer:
                brackets.add((start, end + 1))
                return brackets
            return public_code_build_tree(break_probs, max(layer - 1, min_layer), start, end, threshold)
        for span in (layer_probs[:point], layer_probs[point + 1:]):
            span_size = span.shape[0]
            if span_size > 0:
                part_layer = max(layer - 1, min_layer) if np.min(span) > 0.7 else layer
                brackets.add((start, start + span_size + 1))
                brackets.update(public_code_build_tree(break_probs, part_layer, start, start + span_size))
            start += span_size + 1
        return brackets
    brackets.add((start, start + 2))
    return brackets


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 6), st.integers(2, 12), st.integers(0, 2 ** 31 - 1))
def test_public_code_rule_equals_the_public_code_decoder(layers, n, seed):
    """With ``descend_above=0.7`` and the default minimum layer, the decoding is the public code's
    (the whole-sentence span, which its test script removes, left aside)."""
    rng = np.random.default_rng(seed)
    a = np.sort(rng.random((layers, n - 1)) ** 0.3, axis=0)  # non-decreasing, many links > 0.7
    theirs = public_code_build_tree(a, layers - 1, 0, n - 1) - {(0, n)}
    assert induced_spans(a, 0.8, 3, descend_above=0.7) - {(0, n)} == theirs
