"""Treebank statistics agree with counts made sentence by sentence."""

from collections import Counter

import numpy as np

from synattn.trees.dependency import DependencyTree
from synattn.trees.relations import distance_labels, syntax_hints, traversal_labels
from synattn.trees.stats import relation_statistics, treebank_statistics


def _random_heads(rng, n):
    order = rng.permutation(n)
    heads = np.zeros(n, dtype=np.int64)
    for k, word in enumerate(order[1:], start=1):
        heads[word] = order[rng.integers(0, k)] + 1
    if n > 3 and rng.random() < 0.3:
        heads[order[-1]] = 0  # a second root word
    return heads


def test_relation_histograms_equal_per_sentence_counts():
    rng = np.random.default_rng(7)
    heads = [_random_heads(rng, int(n)) for n in rng.integers(1, 25, size=60)]
    stats = relation_statistics(heads, max_distance=3, max_traversal=2, chunk=16)
    dist, trav, pairs, prev, n_hints = Counter(), Counter(), 0, 0, 0
    for h in heads:
        off = ~np.eye(len(h), dtype=bool)
        dist.update(distance_labels(h, 3)[off].tolist())
        trav.update(traversal_labels(h, 2)[off].tolist())
        pairs += int(off.sum())
        hints = syntax_hints(h)[: len(h) - 1]
        prev += int((hints == np.arange(len(h) - 1)).sum())
        n_hints += len(h) - 1
    assert stats.n_pairs == pairs
    assert stats.distance_counts.tolist() == [dist[i] for i in range(len(stats.distance_vocab))]
    assert stats.traversal_counts.tolist() == [trav[i] for i in range(len(stats.traversal_vocab))]
    assert (stats.hint_is_previous, stats.n_hints) == (prev, n_hints)


def test_treebank_summary():
    trees = [DependencyTree(["a", "b", "c", "d"], np.array([3, 4, 0, 3]), deprels=["x", "y", "root", "x"]),
             DependencyTree(["e"], np.array([0]), deprels=["root"])]
    stats = treebank_statistics(trees)
    assert (stats.n_sentences, stats.n_words, stats.n_nonprojective) == (2, 5, 1)  # a<-c crosses b<-d
    assert stats.roots_per_tree == Counter({1: 2})
    assert stats.arc_lengths == Counter({2: 2, 1: 1})
    assert stats.deprels["root"] == 2 and "sentences" in stats.format()


def test_stats_clips_beyond_memory_are_refused_naming_the_option(tmp_path, capsys, monkeypatch):
    """stats --max-distance 1e9 exhausted memory; one sentence of 20,000 words took 6.9 GB."""
    import synattn.limits as limits
    from synattn.cli.main import main

    conllu = tmp_path / "s.conllu"
    conllu.write_text("1\tThe\t_\t_\t_\t_\t2\tdet\t_\t_\n2\tcat\t_\t_\t_\t_\t0\troot\t_\t_\n\n")
    for option, value in (("--max-distance", 10 ** 9), ("--max-traversal", 10 ** 5)):
        assert main(["stats", str(conllu), option, str(value)]) == 2
        err = capsys.readouterr().err
        assert f"{option}={value} is too large: its tree-relation label tables" in err
    long = tmp_path / "long.conllu"
    long.write_text("".join(f"{i}\tw\t_\t_\t_\t_\t0\tdep\t_\t_\n" for i in range(1, 20_001)) + "\n")
    monkeypatch.setattr(limits, "memory_bytes", lambda: 4 * 10 ** 9)  # less than its 20,000^2 pairs need
    assert main(["stats", str(long)]) == 2
    assert "words in a sentence=20000 is too large" in capsys.readouterr().err


def test_the_most_frequent_traversal_labels_are_labels_that_occur(tmp_path, monkeypatch):
    """A small treebank has few of the traversal labels: the report and the plot list those that
    occur, not zero-count ones to fill up the top 20."""
    from synattn.viz import relations as viz_relations

    trees = [DependencyTree(["a", "b", "c"], np.array([2, 0, 2]), deprels=["x", "root", "y"])]
    stats = treebank_statistics(trees)
    occurring = int((stats.relations.traversal_counts > 0).sum())
    assert 0 < occurring < 10
    shown = stats.relations.top_traversals(20)
    assert len(shown) == occurring and all(stats.relations.traversal_counts[shown] > 0)
    line = next(x for x in stats.format().splitlines() if "traversal labels:" in x)
    assert line.startswith(f"top {occurring} traversal labels: ") and ":0.0%" not in line
    titles = []
    plt = viz_relations.pyplot()
    monkeypatch.setattr(plt.Axes, "set_title", lambda ax, text, *a, **k: titles.append(text))
    viz_relations.plot_relation_histograms({"words": stats.relations}, tmp_path / "labels.png")
    assert f"words: the {occurring} most frequent traversal labels (path from i to j)" in titles
