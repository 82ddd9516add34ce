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
    for module in ("synattn.viz.attention", "synattn.viz.demo", "synattn.viz.relations"):
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
        assert [t.get_text() for t in tree.texts if t.get_text()] == [
            "In", "the", "beginning", "God", "created", "the", "heaven", "·s", ".", "</s>"]
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


def _texts(fig) -> list[str]:
    found = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_position"))]
    return [t for t in found if t]


def test_the_attention_plot_is_read_at_a_glance(tmp_path, figures):
    """One colour scale for every head (the heads are compared), fitted to the weights, with one
    labelled colour bar; query and key axes; a key for the arcs' direction and the boxes; no ▁."""
    words = "▁In ▁the ▁beginning ▁God ▁created ▁the ▁heaven s ▁ . </s>".split()
    n = len(words)
    probs = np.random.default_rng(0).dirichlet(np.ones(n), size=(4, n))
    probs[2] *= 0.2  # a diffuse head: paler than the others on the shared scale, not stretched to its own
    plot_attention(probs, words, tmp_path / "a.png", heads=np.array([3, 3, 5, 5, 0, 7, 5, 7, 5, 5, -1]), columns=2)
    (fig,) = figures
    images = [image for ax in fig.axes for image in ax.images]
    assert len(images) == 4 and {image.get_clim() for image in images} == {(0.0, probs.max())}
    bars = [ax for ax in fig.axes if ax.get_ylabel().startswith("attention weight")]
    assert len(bars) == 1 and "one scale for every head" in bars[0].get_ylabel()
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert {(ax.get_xlabel(), ax.get_ylabel()) for ax in heatmaps} == {("key", "query")}
    (legend,) = fig.legends
    key = [t.get_text() for t in legend.get_texts()]
    assert any("arc: from a head to its dependent (arrowhead at the dependent)" in k for k in key)
    assert any("red box" in k for k in key) and any("·x" in k for k in key)
    texts = _texts(fig)
    assert not [t for t in texts if "▁" in t] and "beginning" in texts and "␣" in texts
    sizes = {label.get_fontsize() for ax in heatmaps for label in ax.get_xticklabels() + ax.get_yticklabels()}
    assert min(sizes) >= 10
    renderer = fig.canvas.get_renderer()
    boxes = [ax.get_window_extent(renderer) for ax in heatmaps] + [bars[0].get_tightbbox(renderer)]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])  # no label runs into a panel


def test_the_head_scores_use_a_scale_fitted_to_them(tmp_path, figures):
    from synattn.viz.demo import plot_head_attachment

    low = {"heads": {"encoder": [[[0.04, 0.0], [0.16, 0.0], [0.09, 0.0]]]}}  # 4 to 16%
    plot_head_attachment({"a": low, "b": low}, tmp_path / "heads.png")
    fig = figures[-1]
    images = [image for ax in fig.axes for image in ax.images]
    assert {image.get_clim() for image in images} == {(0.0, 20.0)}  # not 0 to 100: the cells are told apart
    assert any("one scale for every panel (0 to 20)" in ax.get_ylabel() for ax in fig.axes)


def test_the_relation_plot_leaves_out_the_empty_zero_and_explains_its_labels(tmp_path, figures):
    from synattn.trees import read_conllu
    from synattn.trees.samples import sample_conllu
    from synattn.trees.stats import treebank_statistics
    from synattn.viz import relations

    stats = treebank_statistics(read_conllu(sample_conllu("dev"))).relations
    relations.plot_relation_histograms({"words": stats}, tmp_path / "labels.png")
    fig = figures[-1]
    distance, traversal = fig.axes
    assert [t.get_text() for t in distance.get_xticklabels()] == [*map(str, range(1, 9)), "<far>"]
    assert "" not in [t.get_text() for t in traversal.get_xticklabels()]
    assert any(t.startswith("U: up to the head · D: down to a dependent") for t in _texts(fig))


def test_a_toy_studys_plots_say_so_above_their_titles(tmp_path, figures):
    from types import SimpleNamespace

    from synattn.reproduce.report import bar_plot
    from synattn.viz.figure import TOY_NOTE, noted

    study = SimpleNamespace(name="mt-syntax", columns=[("chrf", "chrF")], primary="chrf", scale=1.0)
    metrics = {"baseline": {1: {"chrf": 30.0}}, "traversal": {1: {"chrf": 32.0}}}
    with noted(TOY_NOTE):
        bar_plot(study, metrics, tmp_path / "toy.png")
    bar_plot(study, metrics, tmp_path / "real.png")
    toy, real = figures[-2:]
    assert TOY_NOTE in _texts(toy) and TOY_NOTE not in _texts(real)
    renderer = toy.canvas.get_renderer()
    note = next(t for t in toy.texts if t.get_text() == TOY_NOTE).get_window_extent(renderer)
    assert note.y0 >= toy.axes[0].title.get_window_extent(renderer).y1  # above the title, not over it
