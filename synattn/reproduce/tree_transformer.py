"""``tree-transformer``: do the constituent links that a Tree Transformer (Wang, Lee & Chen 2019)
learns from masked-LM training alone decode into trees closer to gold constituents than the
right-branching, left-branching and random trees?

The model is a masked LM with constituent attention in every layer, trained on the treebank's
training text (its trees are not used for training) as the model whose trees Wang et al. report:
on whole words, the public code's near-zero diagonal of the constituent prior, the public code's
input ``<s> w1 … wn`` (``--framing eos``: ``w1 … wn </s>``), and Wang et al.'s language-model text
(lowercased, no punctuation, numbers as N; ``--text as-is``: the treebank's words);
``--subword-model unigram`` trains on sentencepiece pieces instead (docs/reproduce.md says why
each default). Its
trees are induced top-down (threshold 0.8, minimum layer 3; docs/methods.md §3) for the dev (and
test) sentences and scored by unlabeled bracket F1 without punctuation, single-word and
whole-sentence spans excluded, sentence-averaged (the paper's convention) and corpus-level, for all
sentences and for those of at most 10 words (punctuation excluded).

Gold brackets: ``--gold FILE …`` scores against PTB-bracketed trees (the Penn Treebank's .mrg
files as they are: traces and ``-NONE-`` elements dropped, the empty top bracket ``( (S …) )`` read;
with the language-model text, punctuation dropped by its tag and words as that text writes them,
as Wang et al. score against WSJ: :func:`~synattn.reproduce.treebank_data.lm_gold`); their words
are the sentences parsed. ``--corpus ptb`` trains on Mikolov et al.'s PTB language-model text, as
Wang et al. did, and needs ``--gold``. Without ``--gold`` the gold constituents are the yields of
the treebank's projective gold dependency trees (``synattn.trees.branching.dependency_spans``:
each word with all its descendants is a span; non-projective sentences are left out and counted).
The decoding rule of the public code (a part whose
links all exceed 0.7 is decoded one layer lower) is reported next to the paper's.

Along training: every run keeps its weights every 500 updates (``RUN/snapshots``), and the dev F1
of each snapshot is reported (``f1_dev_by_update``) and plotted (``plots/f1_by_update.png``), so
that a curve that rises and falls is seen, not only where it ended.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from synattn.data.prepared import PreparedData
from synattn.errors import InputError, UsageError
from synattn.reproduce.study import Arm, Context, Study, budget_train
from synattn.reproduce.treebank_data import (
    TEXTS,
    add_treebank_argument,
    lm_gold,
    prepare_ptb_text,
    prepare_treebank,
    treebank_files,
)
from synattn.trees.induce import BASELINES
from synattn.trees.subword import last_piece_index, word_heads_of_pieces

SUBWORD_MODEL = "word"
WORD_VOCAB = 10000
TEXT = "lm"
FRAMING = "bos"
SNAPSHOT_EVERY = 500  # updates between the snapshots scored along training
RECIPES = ("cpu", "gpu")
"""``cpu``: the study's model for a 2-core CPU (6 layers × 256, batches of 4,096 tokens, lr 1e-3 with
a cosine decay); ``gpu``: the public code's recipe (10 layers × 512, ffn 2048, 8 heads, batches of
64 sentences, Adam lr 1e-4 constant, β 0.9/0.98, clipping 1.5; configs/tree_transformer_ptb_gpu.yaml)."""
THRESHOLD, MIN_LAYER = 0.8, 3  # the paper's decoding


def framing_of(ctx: Context) -> str:
    return getattr(ctx.args, "framing", FRAMING)


def text_of(args: argparse.Namespace) -> str:
    """``--text``: the words as they are, or as language-model text."""
    return getattr(args, "text", TEXT)


def recipe_of(ctx: Context) -> str:
    return getattr(ctx.args, "recipe", RECIPES[0])


class TreeTransformerStudy(Study):
    name = "tree-transformer"
    title = "induced constituency trees of a Tree Transformer vs branching and random trees"
    question = ("Wang, Lee & Chen (2019) report ~49.5 unlabeled F1 on WSJ test, well above right-branching. "
                "Do a Tree Transformer's links, learned by masked-LM training alone, give trees that beat the "
                "right-branching baseline here?")
    task = "mlm"
    # The public code's near-zero diagonal of C (a word hardly attends to itself), not the paper's
    # C_ii = 1: its links came out more syntactic here (docs/reproduce.md, "Faithful options").
    arms = (Arm("tree-transformer", {"encoder": {"constituent": True, "constituent_diagonal": 1e-9}},
                "masked LM with constituent attention in every layer, the public code's diagonal of C "
                "(trees induced from its links)"),)
    seeds = 3
    minutes = 70.0
    primary = "f1_dev"
    columns = (("f1_dev", "sentence F1 dev"), ("corpus_f1_dev", "corpus F1 dev"),
               ("f1_dev_10", "sentence F1 dev ≤10"), ("f1_dev_original_rule", "sentence F1 dev, public-code rule"),
               ("f1_test", "sentence F1 test"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_treebank_argument(parser)
        parser.add_argument("--gold", nargs="+", metavar="FILE",
                            help="score against the PTB-bracketed trees of these files (e.g. WSJ .mrg files as "
                                 "they are; their words are the sentences parsed) instead of the dev split's "
                                 "dependency yields")
        parser.add_argument("--corpus", choices=("ptb",),
                            help="train on this built-in text instead of --src-trees: ptb, Mikolov et al.'s PTB "
                                 "language-model text, as Wang et al. (needs --gold)")
        parser.add_argument("--text", choices=TEXTS, default=TEXT,
                            help="the treebank's words as they are, or as language-model text (lowercased, "
                                 "punctuation dropped, numbers as N; Mikolov et al.'s PTB text, on which Wang "
                                 f"et al. train) for training and parsing alike (default {TEXT})")
        parser.add_argument("--framing", choices=("bos", "eos"), default=FRAMING,
                            help="the encoder's input: '<s> w1 … wn' as the public code's '[CLS] w1 … wn' (the "
                                 "first word has a left neighbour, the last none), or 'w1 … wn </s>' as synattn's "
                                 f"other models (default {FRAMING}; docs/reproduce.md, Faithful options)")
        parser.add_argument("--recipe", choices=RECIPES, default="cpu",
                            help="cpu: 6 layers × 256, lr 1e-3 decaying over the budget (default); gpu: the public "
                                 "code's 10 layers × 512, 64 sentences a batch, lr 1e-4 constant "
                                 "(configs/tree_transformer_ptb_gpu.yaml)")
        parser.add_argument("--subword-model", choices=("word", "unigram"), default=SUBWORD_MODEL,
                            help=f"the model's tokens: whole words (the {WORD_VOCAB} most frequent, others <unk>; "
                                 f"as Wang et al.) or unigram sentencepiece pieces (default {SUBWORD_MODEL})")

    def check(self, args: argparse.Namespace, arms: list[Arm]) -> None:
        """The training text (``--corpus ptb`` with ``--gold`` and ``--text lm``, or the treebank:
        :func:`treebank_files`) and every ``--gold`` file (read: one without a tree stops the study
        before its minutes of training, not after)."""
        gold = getattr(args, "gold", None)
        if getattr(args, "corpus", None) == "ptb":
            if getattr(args, "src_trees", None):
                raise UsageError("--corpus ptb and --src-trees: train on one text, give one of them")
            if not gold:
                raise UsageError("--corpus ptb: the PTB text has no trees to score against; give --gold FILE … "
                                 "(PTB-bracketed, e.g. WSJ .mrg files)")
            if text_of(args) != "lm":
                raise UsageError("--corpus ptb --text as-is: the PTB text is language-model text (give --text lm)")
        else:
            treebank_files(args, toy=args.toy)
        for path in gold or ():
            if not Path(path).is_file():
                raise UsageError(f"--gold: {path}: not a file")
            if not gold_trees(args, [path]):
                raise InputError("no tree with words: nothing to score the induced trees against", path)

    def prepare(self, ctx: Context) -> Path:
        words = getattr(ctx.args, "subword_model", SUBWORD_MODEL) == "word"
        if getattr(ctx.args, "corpus", None) == "ptb":
            # every word of Mikolov et al.'s 10,000 (its <unk> is sentencepiece's) beside the special pieces
            return prepare_ptb_text(ctx, vocab_size=300 if ctx.toy else WORD_VOCAB + 10 if words else 8000,
                                    subword_model="word" if words else "unigram")
        return prepare_treebank(ctx, vocab_size=300 if ctx.toy else WORD_VOCAB if words else 8000,
                                subword_model="word" if words else "unigram", text=text_of(ctx.args))

    def base_model(self, ctx: Context) -> dict:
        bos = framing_of(ctx) == "bos"
        if ctx.toy:
            return {"d_model": 32, "heads": 2, "ffn_dim": 64, "dropout": 0.1, "norm": "pre", "src_bos": bos,
                    "encoder": {"layers": 3}}
        if recipe_of(ctx) == "gpu":
            return {"d_model": 512, "heads": 8, "ffn_dim": 2048, "dropout": 0.1, "norm": "pre", "src_bos": bos,
                    "encoder": {"layers": 10}}
        return {"d_model": 256, "heads": 4, "ffn_dim": 1024, "dropout": 0.1, "norm": "pre", "src_bos": bos,
                "encoder": {"layers": 6}}

    def base_train(self, ctx: Context) -> dict:
        snapshots = {"snapshot_interval_updates": 2 if ctx.toy else SNAPSHOT_EVERY}
        if recipe_of(ctx) == "gpu":  # a constant rate: no warm-up, a "decay" to 1.0 of itself
            return {**budget_train(ctx, max_tokens=16384, lr=1e-4, warmup=0, min_lr_ratio=1.0, label_smoothing=0.0,
                                   bf16=True), "max_sentences": 64, "clip_norm": 1.5, "betas": [0.9, 0.98],
                    **snapshots}
        return {**budget_train(ctx, max_tokens=4096, lr=1e-3, warmup=150, min_lr_ratio=0.05, label_smoothing=0.0,
                               validate_every=5, bf16=True), **snapshots}

    def evaluate(self, ctx: Context, arm: Arm, seed: int, run_dir: Path) -> dict:
        model, exp = self.load(ctx, run_dir)
        data = Path(exp.data)
        out: dict = {}
        sets = {"dev": gold_sentences(ctx, data, "dev")}
        if (data / "test").exists() and not getattr(ctx.args, "gold", None):
            sets["test"] = gold_sentences(ctx, data, "test")
        for split, (sentences, gold, left_out) in sets.items():
            out[f"{split}_sentences"], out[f"{split}_left_out"] = len(gold), left_out
            for rule, descend in (("", None), ("_original_rule", 0.7)):
                scores = induced_scores(model, sentences, gold, seed, descend)
                for subset, table in scores.items():
                    suffix = f"{split}{subset}{rule}"
                    out[f"f1_{suffix}"] = 100 * table["induced"].sentence_f1
                    out[f"corpus_f1_{suffix}"] = 100 * table["induced"].f1
                    if not rule:
                        for name in BASELINES:
                            out[f"{name}_f1_{split}{subset}"] = 100 * table[name].sentence_f1
                            out[f"{name}_corpus_f1_{split}{subset}"] = 100 * table[name].f1
        out["f1_dev_by_update"] = f1_by_update(run_dir, sets["dev"], seed)
        return out

    def rescore(self, ctx: Context, run_dir: Path, metrics: dict) -> dict | None:
        """Adds what runs scored before it was reported: the F1 along training, the flat baseline."""
        from synattn.train.checkpoint import SNAPSHOTS, list_checkpoints

        seed = int(run_dir.name.removeprefix("seed"))
        added: dict = {}
        assert ctx.data is not None  # (set by Study.prepare)
        if "f1_dev_by_update" not in metrics and list_checkpoints(run_dir / SNAPSHOTS):
            added["f1_dev_by_update"] = f1_by_update(run_dir, gold_sentences(ctx, ctx.data, "dev"), seed)
        if "no brackets_f1_dev" not in metrics:  # from the gold trees alone: no model needed
            for split in ["dev"] + (["test"] if "f1_test" in metrics else []):
                _, gold, _ = gold_sentences(ctx, ctx.data, split)
                for subset, table in baseline_scores(gold).items():
                    added[f"no brackets_f1_{split}{subset}"] = 100 * table["no brackets"].sentence_f1
                    added[f"no brackets_corpus_f1_{split}{subset}"] = 100 * table["no brackets"].f1
        return {**metrics, **added} if added else None

    def table(self, ctx: Context, metrics: dict, comparisons: dict) -> str:
        from synattn.reproduce.stats import summarize

        runs = metrics[self.arms[0].name]
        splits = ["dev"] + (["test"] if any("f1_test" in m for m in runs.values()) else [])
        lines = ["| trees | " + " | ".join(f"sentence F1 {s} | corpus F1 {s} | sentence F1 {s} ≤10" for s in splits)
                 + " |", "|---|" + "---|---|---|" * len(splits)]
        names = [("tree transformer (paper's decoding)", ""),
                 ("tree transformer (public code's rule)", "_original_rule"),
                 ("right-branching", "right-branching"), ("left-branching", "left-branching"),
                 ("random binary", "random"), ("no brackets (flat: the floor of the F1 conventions)", "no brackets")]
        for title, key in names:
            cells = []
            for split in splits:
                for kind, subset in (("f1", ""), ("corpus_f1", ""), ("f1", "_10")):
                    if key in ("", "_original_rule"):
                        name = f"{kind}_{split}{subset}{key}"
                    else:
                        name = f"{key}_{kind}_{split}{subset}"
                    cells.append(summarize([m[name] for m in runs.values() if m.get(name) is not None]).format(1))
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        first = runs[min(runs)]
        gold = getattr(ctx.args, "gold", None)
        golds = (" ".join(gold) if len(gold) < 4 else f"({len(gold)} files: {gold[0]} … {gold[-1]})") if gold else ""
        scored = (f"dev: the {first.get('dev_sentences')} trees of --gold {golds}" if gold else
                  f"dev: {first.get('dev_sentences')} sentences scored, {first.get('dev_left_out', 0)} non-projective "
                  "left out")
        note = (f"\n\nMean ± std over {len(runs)} seed(s) (the random baseline's seed follows the run's). "
                f"{scored}; ≤10: at most 10 words without punctuation.")
        curves = [f"seed {seed}: " + ", ".join(f"{step}: {f1:.1f}" for step, f1 in curve_of(m))
                  for seed, m in sorted(runs.items()) if m.get("f1_dev_by_update")]
        if curves:
            scored = ", ".join(f"seed {seed} at update {m.get('best_step', m.get('train_step'))}"
                               for seed, m in sorted(runs.items()))
            note += ("\n\nSentence F1 dev along training (update: F1, the paper's decoding): " + "; ".join(curves)
                     + f". The table scores each run's checkpoint of lowest dev masked-LM loss ({scored}).")
        return "\n".join(lines) + note

    def plots(self, ctx: Context, metrics: dict, folder: Path) -> list[Path]:
        from synattn.viz.figure import pyplot, save

        runs = metrics[self.arms[0].name]
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        names = [("tree transformer", "f1_dev"), ("public-code rule", "f1_dev_original_rule"),
                 ("right-branching", "right-branching_f1_dev"), ("left-branching", "left-branching_f1_dev"),
                 ("random", "random_f1_dev"), ("no brackets", "no brackets_f1_dev")]
        for i, (_, key) in enumerate(names):
            values = [m[key] for m in runs.values() if m.get(key) is not None]
            if values:
                ax.bar(i, float(np.mean(values)), color="#9ecae1" if i < 2 else "#bdbdbd",
                       yerr=float(np.std(values, ddof=1)) if len(values) > 1 else None, capsize=4)
                ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([n for n, _ in names], rotation=15, ha="right")
        ax.set_ylabel("sentence-level F1 (%)")
        ax.set_title("induced trees vs baselines on dev (unlabeled bracket F1)", fontsize=9)
        fig.tight_layout()
        paths = [save(fig, folder / "f1_dev.png")]
        curves = {seed: curve_of(m) for seed, m in sorted(runs.items()) if m.get("f1_dev_by_update")}
        if curves:
            fig, ax = plt.subplots(figsize=(6.4, 3.4))
            for seed, curve in curves.items():
                ax.plot([s for s, _ in curve], [f for _, f in curve], marker="o", ms=3,
                        label=f"tree transformer, seed {seed}")
            for title, key, style in (("right-branching", "right-branching_f1_dev", "--"),
                                      ("random", "random_f1_dev", ":")):
                values = [m[key] for m in runs.values() if m.get(key) is not None]
                if values:
                    ax.axhline(float(np.mean(values)), color="#636363", ls=style, lw=1, label=title)
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("updates")
            ax.set_ylabel("sentence-level F1 dev (%)")
            ax.set_title("induced trees along training", fontsize=9)
            ax.legend(fontsize=7)
            fig.tight_layout()
            paths.append(save(fig, folder / "f1_by_update.png"))
        return paths


def curve_of(metrics: dict) -> list[tuple[int, float]]:
    """``(update, sentence F1 dev)`` along a run: its snapshots and the checkpoint it was scored at."""
    curve = {int(step): f1 for step, f1 in (metrics.get("f1_dev_by_update") or {}).items()}
    scored = metrics.get("best_step", metrics.get("train_step"))
    if scored is not None and metrics.get("f1_dev") is not None:
        curve.setdefault(int(scored), metrics["f1_dev"])
    return sorted(curve.items())


def f1_by_update(run_dir: Path, dev, seed: int) -> dict[str, float]:
    """Sentence F1 (the paper's decoding) of each weight snapshot of the run (``RUN/snapshots``),
    keyed by its update; ``dev`` is :func:`gold_sentences`'s triple."""
    from synattn.evaluate.runner import load_run
    from synattn.train.checkpoint import SNAPSHOTS, checkpoint_step, list_checkpoints

    sentences, gold, _ = dev
    curve = {}
    for snapshot in list_checkpoints(run_dir / SNAPSHOTS):
        model, _, _ = load_run(run_dir, str(snapshot))
        scores = induced_scores(model, sentences, gold, seed, None)
        curve[str(checkpoint_step(snapshot))] = 100 * scores[""]["induced"].sentence_f1
    return curve


def gold_sentences(ctx: Context, data: Path, split: str):
    """``(sentences, gold trees, left out)`` for scoring: the split's sentences with the yields of
    their projective gold trees, or the sentences of ``--gold``."""
    from synattn.data.sentences import Sentences
    from synattn.trees.branching import tree_from_dependency
    from synattn.trees.constituency import leaves

    gold_files = getattr(ctx.args, "gold", None)
    if gold_files:
        trees = gold_trees(ctx.args, gold_files)
        return words_as_sentences(data, [leaves(t) for t in trees]), trees, 0
    all_sentences = Sentences.from_split(data, split)
    labels = PreparedData(data).labels
    upos = labels.get("src_upos", [])
    keep, trees = [], []
    for k, (example, words) in enumerate(zip(all_sentences.examples, all_sentences.words)):
        heads = word_heads_of_pieces(example["src_heads"], example["src_word"])
        last = last_piece_index(example["src_word"])
        punct = [upos[i] == "PUNCT" if i < len(upos) else False for i in example["src_upos"][last]]
        try:
            trees.append(tree_from_dependency(words, heads, punct))
        except InputError:  # not projective: some yield is not a span
            continue
        keep.append(k)
    sentences = Sentences([all_sentences.examples[k] for k in keep], [all_sentences.words[k] for k in keep],
                          [all_sentences.numbers[k] for k in keep], len(keep))
    return sentences, trees, len(all_sentences.examples) - len(keep)


def gold_trees(args: argparse.Namespace, paths: list[str]) -> list:
    """The trees with words of the PTB-bracketed ``paths`` (in order; traces and ``-NONE-`` elements
    dropped, :func:`~synattn.trees.constituency.read_brackets`), over the words the model reads:
    with the language-model text (``--text lm``) as :func:`~synattn.reproduce.treebank_data.lm_gold`
    makes them."""
    from synattn.trees.constituency import leaves, read_brackets

    trees = [t for path in paths for t in read_brackets(path) if leaves(t)]
    if text_of(args) == "lm":
        trees = [g for g in map(lm_gold, trees) if g is not None]
    return trees


def words_as_sentences(data: Path, words: list[list[str]]):
    """Encodes given word lists with the dataset's sentencepiece model (no trees needed); with whole
    words as tokens, a word outside the vocabulary is sentencepiece's ``<unk>``, the piece that the
    PTB text's own ``<unk>`` is encoded as."""
    from synattn.data.encoding import encode_sentence
    from synattn.data.sentences import Sentences

    sp = PreparedData(data).tokenizer("src")
    examples = [encode_sentence("src", w, sp, {}) for w in words]
    return Sentences(examples, words, list(range(1, len(words) + 1)), len(words))


def induced_scores(model, sentences, gold, seed: int, descend_above: float | None) -> dict:
    """Bracket F1 of the induced trees and the baselines: all sentences (``""``) and ≤10 words (``"_10"``)."""
    from synattn.evaluate.induction import induce_sentences

    pred = induce_sentences(model, sentences, THRESHOLD, MIN_LAYER, 32, descend_above=descend_above)
    return scores_by_subset(pred, gold, seed)


def baseline_scores(gold) -> dict:
    """The baselines' bracket F1 (the induced trees' entry is the flat tree's: no model is read)."""
    from synattn.trees.branching import tree_from_spans
    from synattn.trees.constituency import leaves

    return scores_by_subset([tree_from_spans(leaves(g), set(), label="X") for g in gold], gold, 0)


def scores_by_subset(pred, gold, seed: int) -> dict:
    """:func:`~synattn.trees.induce.score_induced` of all sentences (``""``) and of those of at most 10
    words without punctuation (``"_10"``)."""
    from synattn.trees.induce import punctuation_mask, score_induced

    short = [k for k, g in enumerate(gold) if sum(not p for p in punctuation_mask(g)) <= 10]
    out = {"": score_induced(pred, gold, seed)}
    if short:
        out["_10"] = score_induced([pred[k] for k in short], [gold[k] for k in short], seed)
    return out
