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


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots make, kept open (``save`` writes them as usual first)."""
    from synattn.viz import figure

    kept, save = [], figure.save

    def keep(fig, path, dpi=110):
        fig.canvas.draw()
        kept.append(fig)
        monkeypatch.setattr(figure.pyplot(), "close", lambda *a: None)
        return save(fig, path, dpi)

    monkeypatch.setattr(figure, "save", keep)
    for module in ("synattn.viz.attention", "synattn.viz.demo"):
        monkeypatch.setattr(f"{module}.save", keep)
    return kept


def test_the_tree_is_drawn_on_the_heatmaps_columns_with_its_words(tmp_path, figures):
    """Each heatmap carries its own tree panel on the same x scale (arcs over their columns), the
    words written under the arcs; positions that are no word of the tree (``</s>``: head -1) get
    no root arrow and no box."""
    words = "▁In ▁the ▁beginning ▁God ▁created ▁the ▁heaven s ▁. </s>".split()
    n = len(words)
    probs = np.random.default_rng(0).dirichlet(np.ones(n), size=(4, n))
    heads = np.array([3, 3, 5, 5, 0, 7, 5, 7, 5, -1])
    plot_attention(probs, words, tmp_path / "a.png", heads=heads, columns=2)
    (fig,) = figures
    renderer = fig.canvas.get_renderer()
    heatmaps = [ax for ax in fig.axes if ax.images and ax.child_axes]
    assert len(heatmaps) == 4
    for ax in heatmaps:
        (tree,) = ax.child_axes
        assert tree.get_xlim() == ax.get_xlim()
        box, above = ax.get_window_extent(renderer), tree.get_window_extent(renderer)
        assert abs(box.x0 - above.x0) < 1 and abs(box.x1 - above.x1) < 1 and above.y0 >= box.y1 - 1
        assert [t.get_text() for t in tree.texts if t.get_text()] == words
        roots = [t for t in tree.texts if not t.get_text()]  # the ROOT stubs (annotations)
        assert [round(r.xy[0]) for r in roots] == [4]  # '▁created' only, not '</s>'
        (boxes,) = ax.collections
        assert len(boxes.get_offsets()) == n - 1


def test_the_demo_plots_explain_themselves(tmp_path, figures):
    from synattn.reproduce.supervised_head import _head_grid
    from synattn.train.run_log import RunLog
    from synattn.viz.demo import plot_head_attachment, plot_learning_curves

    runs = {}
    for name in ("baseline", "syntax"):
        run = tmp_path / name
        run.mkdir()
        log = RunLog(run, enabled=True, tensorboard=False)
        for step in (25, 50, 75):
            log.write("train", step, 1, {"loss": 5.0 - step / 50, "task_loss": 4.9 - step / 50})
        log.write("valid", 75, 1, {"loss": 4.0, "task_loss": 3.5})  # validated once, at the end
        log.close()
        runs[name] = run
    plot_learning_curves(runs, tmp_path / "curves.png")
    fig = figures[-1]
    assert len(fig.axes) == 1  # no panel of one dot per model
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == [f"{name} (validation loss 3.50 at update 75)" for name in runs]

    grid = [[[0.5, 0.4]] * 4] * 4  # [layers][heads] of (UAS, UAS without punctuation)
    table = {"heads": {"encoder": grid}}
    plot_head_attachment({"baseline": table, "tree+supervised": table}, tmp_path / "heads.png",
                         marks={"tree+supervised": (0, 0)})
    legends = [ax.get_legend() for ax in figures[-1].axes if ax.get_legend()] + figures[-1].legends
    assert [t.get_text() for legend in legends for t in legend.get_texts()] == ["red box: the supervised head"]

    metrics = {arm: {1: {"all_heads_dev": {"encoder": grid}}} for arm in ("plain", "supervised")}
    _head_grid(metrics, tmp_path / "heads_dev.png")
    fig = figures[-1]
    renderer = fig.canvas.get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    assert len(titles) == 2 and not titles[0].overlaps(titles[1])
