"""Plots are written as images; bad shapes are refused."""

import numpy as np
import pytest

from synattn.trees import parse_brackets
from synattn.viz.attention import plot_attention, plot_constituency


def test_attention_heatmaps_with_arcs(tmp_path):
    words = "I think this is a good idea .".split()
    probs = np.random.default_rng(0).dirichlet(np.ones(8), size=(3, 8))  # [H, n, n]
    out = plot_attention(probs, words, tmp_path / "a.png", heads=np.array([2, 0, 4, 2, 7, 7, 4, 0]))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(ValueError, match=r"attention of shape \(3, 8, 8\) for 7 tokens"):
        plot_attention(probs, words[:7], tmp_path / "b.png")


def test_a_long_sentence_gives_a_bounded_image(tmp_path):
    from PIL import Image

    n = 300
    probs = np.random.default_rng(0).dirichlet(np.ones(n), size=(2, n))
    out = plot_attention(probs, [f"w{i}" for i in range(n)], tmp_path / "long.png", heads=np.zeros(n, dtype=int))
    with Image.open(out) as image:
        assert max(image.size) <= 2 * 2_000 + 400  # two heatmaps of at most 20 inches at 100 dpi, and margins


def test_constituency_tree(tmp_path):
    tree = parse_brackets("(S (NP I) (VP think (SBAR (NP this) (VP is (NP a good idea)))) .)")
    out = plot_constituency(tree, tmp_path / "t.svg", title="parse")
    assert out.read_text().lstrip().startswith("<?xml") and out.stat().st_size > 5_000
