"""``pretrained-syntax``: how much dependency syntax a pretrained encoder holds, and how far one
of its attention heads gets as a parser when it is supervised (LISA, Strubell et al. 2018) —
all-MiniLM-L6-v2 (6 layers × 12 heads, installed offline, :mod:`synattn.hf.pretrained`) on a gold
treebank (UD English-EWT through ``--src-trees``).

Arms, all scored by word-level UAS (a word's head read at its final piece; itself = root) on dev
(and test when given), with and without punctuation:

- ``probe``: the pretrained model's own heads, untrained; the best head on dev stands for what
  pretraining put into attention (Clark et al. 2019, "What does BERT look at?"); every head is also
  scored as Clark et al. score it (word-level attention, both directions, best head per relation,
  against the fixed-offset baseline: :mod:`synattn.evaluate.probe`) with a heat map;
- ``finetuned``: synattn.hf's supervised head on one head of one layer, the whole model fine-tuned
  on the head's loss alone (``mlm: false``: the package ships the encoder without its masked-LM
  head, so there is no pretrained language-model loss to keep);
- ``frozen``: the same head with the pretrained weights frozen: only the head's biaffine
  parameters (U, u; 32 × 32 + 32) train, on the head's own frozen queries and keys;
- ``relpos``: ``finetuned`` with Shaw et al. (2018) relative positions (clip 16) in every layer
  below the supervised one: graph-based parsers score arcs with their distance, which MiniLM's
  absolute positions give only indirectly. They must sit below: the head's scores are read from its
  layer's queries and keys, which that layer's own relation embeddings do not touch (in the
  supervised layer they would receive no gradient at all). Tree-distance or traversal relations are
  no arm here: at test time they would read the gold tree the head is asked to find.

The supervised head's layer and head (``--layer``, ``--head``) were chosen by a short sweep
(docs/results.md); λ does not matter when the head's loss is the only loss (Adam's update does
not depend on its scale), so it stays 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from synattn.option_types import nonnegative_int, positive_float
from synattn.reproduce.heads import head_metrics
from synattn.reproduce.study import Arm, Context, Study, budget_train
from synattn.reproduce.treebank_data import add_treebank_argument, prepare_treebank, treebank_files

MODEL = "all-MiniLM-L6-v2"
# Chosen by the sweeps in docs/results.md (EWT dev, one seed each): layer 5's head 10, the head of that layer whose
# own attention attaches most words before training, beat head 0 by 2.6 points at 400 updates and reached 90.0%
# at 1,500 (layer 4 head 0, the earlier default: 89.4 ± 0.2% in 30 minutes)
LAYER, HEAD = 5, 10
# Measured on EWT (one seed each): at 400 updates, 5e-5 with its cosine decay over those 400 reached a
# dev parse loss of 0.84 (UAS 78.3%); 1e-4 over a 30-minute schedule was at 0.46 by update 400 and
# 0.36 by update 1,032 (UAS 89.5%)
LR = 1e-4
FROZEN_LR = 3e-3  # only 1,056 parameters train: a fine-tuning rate would barely move them


def _supervised(ctx: Context) -> dict:
    return {"feature": "supervised_head", "layers": [_layer(ctx.args)], "head": _head(ctx.args), "weight": 1.0}


def _layer(args: argparse.Namespace) -> int:
    return LAYER if getattr(args, "layer", None) is None else args.layer


def _head(args: argparse.Namespace) -> int:
    return HEAD if getattr(args, "head", None) is None else args.head


def _shape(folder: Path, spec: str) -> tuple[int, int]:
    """``(layers, attention heads per layer)`` of the model in ``folder`` (its config.json).

    Raises:
        UsageError: naming ``--model``, when its config does not say them.
    """
    from synattn.errors import MissingDependencyError, UsageError
    from synattn.hf.pretrained import model_shape

    try:
        return model_shape(folder)
    except MissingDependencyError as err:
        raise UsageError(f"--model {spec}: reading it needs {err}") from None
    except Exception as err:  # noqa: BLE001 (a damaged or foreign config.json: whatever transformers raises)
        raise UsageError(f"--model {spec}: {folder / 'config.json'} gives no number of layers and heads "
                         f"({type(err).__name__}: {err})") from None


class PretrainedSyntaxStudy(Study):
    name = "pretrained-syntax"
    title = "a pretrained encoder's own heads vs one supervised head, fine-tuned or frozen (UAS on gold trees)"
    question = ("Clark et al. (2019) found single BERT heads that track dependency relations; Strubell et al. "
                "(2018) train one head toward each token's dependency head. In a pretrained encoder "
                "(all-MiniLM-L6-v2), how well do its own heads attach words, and how far does one supervised "
                "head get when the whole model is fine-tuned, or when only the head's own weights train?")
    task = "mlm"
    arms = (Arm("probe", {}, "the pretrained model's own heads, no training: its best head on dev (word-level UAS)",
                trained=False),
            Arm("finetuned", {}, "one supervised head, the whole model fine-tuned on its loss"),
            Arm("frozen", {"freeze": True}, "one supervised head, the pretrained weights frozen "
                "(only the head's biaffine U, u train)", train={"lr": FROZEN_LR}),
            Arm("relpos", {}, "finetuned + Shaw relative positions (clip 16) in every layer below the supervised one"))
    seeds = 3
    minutes = 30.0
    primary = "uas_dev"
    columns = (("uas_dev", "UAS dev %"), ("uas_dev_nopunct", "UAS dev, no punct. %"),
               ("uas_dev_tree", "UAS dev, decoded tree %"), ("uas_test", "UAS test %"),
               ("uas_test_nopunct", "UAS test, no punct. %"), ("uas_test_tree", "UAS test, decoded tree %"),
               ("clark_dev", "best head, Clark et al. dev %"), ("train_step", "updates"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_treebank_argument(parser)
        parser.add_argument("--model", default=MODEL,
                            help=f"the pretrained encoder: {MODEL} (installed offline by scripts/setup.sh) or a "
                                 "folder with config.json, model.safetensors and tokenizer.json")
        parser.add_argument("--layer", type=nonnegative_int,
                            help=f"layer of the supervised head, from 0 (default {LAYER})")
        parser.add_argument("--head", type=nonnegative_int, help=f"the head it replaces, from 0 (default {HEAD})")
        parser.add_argument("--lr", type=positive_float, help=f"peak learning rate of the fine-tuned arms (default "
                                                              f"{LR:g}; the frozen arm's is {FROZEN_LR:g})")

    def check(self, args: argparse.Namespace, arms: list[Arm]) -> None:
        """The treebank (:func:`treebank_files`), ``--model`` (a model folder or a model installed
        offline), ``--layer`` and ``--head`` within the model's layers and heads, and ``--layer 0``
        without the relpos arm (which needs layers below the supervised one)."""
        from synattn.errors import InputError, MissingDependencyError, UsageError
        from synattn.hf.pretrained import model_folder

        treebank_files(args, toy=args.toy)
        spec = getattr(args, "model", None) or MODEL
        try:
            folder = model_folder(spec)
        except (InputError, MissingDependencyError) as err:
            raise UsageError(f"--model: {err}") from None
        layers, heads = _shape(folder, spec)
        for option, value, count, what in (("--layer", _layer(args), layers, "layers"),
                                           ("--head", _head(args), heads, "attention heads a layer")):
            if value >= count:
                raise UsageError(f"{option} {value}: the model {spec} has {count} {what} ({option} 0 to "
                                 f"{count - 1})")
        if _layer(args) == 0 and any(arm.name == "relpos" for arm in arms):
            raise UsageError("--layer 0: the relpos arm puts relative positions in the layers below the "
                             "supervised head, and layer 0 has none (leave relpos out with --arms)")

    def prepare(self, ctx: Context) -> Path:
        # the dataset's own sentencepiece pieces only spell the words back: the model reads its own
        return prepare_treebank(ctx, vocab_size=300 if ctx.toy else 4000)

    def base_model(self, ctx: Context) -> dict:
        from synattn.hf.task import KEY  # the model section's key of a Hugging Face model

        return {KEY: getattr(ctx.args, "model", None) or MODEL, "mlm": False,
                "features": [_supervised(ctx)]}

    def experiment(self, ctx: Context, arm: Arm, seed: int, budget) -> dict:
        exp = super().experiment(ctx, arm, seed, budget)
        if arm.name == "relpos":  # (Study.check refuses --layer 0 with it)
            below = list(range(_layer(ctx.args)))
            exp["model"]["features"] = [{"feature": "relations", "relations": ["sequential"],
                                         "layers": below, "max_relative_position": 16},
                                        _supervised(ctx)]
        return exp

    def base_train(self, ctx: Context) -> dict:
        lr = LR if getattr(ctx.args, "lr", None) is None else ctx.args.lr
        train = budget_train(ctx, max_tokens=1024, lr=lr, warmup=100, min_lr_ratio=0.05, label_smoothing=0.0)
        # a pretrained run learns most in its first epoch: validate (and keep the best) every 200 updates
        train.update(validate_interval_updates=0 if ctx.toy else 200, weight_decay=0.01)
        return train

    def evaluate(self, ctx: Context, arm: Arm, seed: int, run_dir: Path) -> dict:
        from synattn.hf.pretrained import load_pretrained
        from synattn.hf.task import tokenizer_of
        from synattn.reproduce.heads import hf_head_attachment

        spec = getattr(ctx.args, "model", None) or MODEL
        if arm.trained:
            model, _ = self.load(ctx, run_dir)
            tokenizer = tokenizer_of(spec)
        else:
            earlier = run_dir.parent / "seed1" / "metrics.json"
            if seed > 1 and earlier.is_file():  # no training: every seed scores the same model
                return {k: v for k, v in json.loads(earlier.read_text()).items() if not k.startswith("train_")}
            model, tokenizer = load_pretrained(spec, attn_implementation="eager")  # the base model
        assert ctx.data is not None  # (set by Study.prepare)
        splits = ["dev"] + (["test"] if (Path(ctx.data) / "test").is_dir() else [])
        scores = {split: hf_head_attachment(model, ctx.data, split, tokenizer, probe=not arm.trained)
                  for split in splits}
        out = head_metrics(scores, supervised=arm.trained)
        if not arm.trained:
            out["clark_dev"] = 100 * scores["dev"]["probe"]["best"]["accuracy"]
            out["probe_dev"] = scores["dev"]["probe"]
        return out

    def table(self, ctx: Context, metrics: dict, comparisons: dict) -> str:
        from synattn.reproduce.report import default_table

        text = default_table(self, metrics)
        probe = next((m["probe_dev"] for m in metrics.get("probe", {}).values() if m.get("probe_dev")), None)
        return text if probe is None else text + "\n\n" + relation_table(probe)

    def plots(self, ctx: Context, metrics: dict, folder: Path) -> list[Path]:
        from synattn.reproduce.report import bar_plot

        paths = [bar_plot(self, metrics, folder / "uas_dev.png")]
        probe = next((m["probe_dev"] for m in metrics.get("probe", {}).values() if m.get("probe_dev")), None)
        if probe is not None:
            paths.append(probe_heatmap(probe, folder / "probe_heads_dev.png"))
        return paths


def relation_table(probe: dict, top: int = 15) -> str:
    """Markdown: the most frequent relations, the best head for each (Clark et al. 2019) and the
    fixed-offset baseline."""
    lines = [f"Every head as a parser on dev, as Clark et al. (2019) score it ({probe['words']} non-root words; "
             f"word-level attention, the most-attended other word; layer and head from 0): best head overall "
             f"layer {probe['best']['layer']} head {probe['best']['head']} ({probe['best']['direction']} "
             f"direction) {100 * probe['best']['accuracy']:.1f}%.", "",
             "| relation | dependents | best head | direction | accuracy % | fixed offset | offset accuracy % |",
             "|---|---|---|---|---|---|---|"]
    for rel, r in list(probe["relations"].items())[:top]:
        lines.append(f"| {rel} | {r['count']} | {r['layer']}-{r['head']} | {r['direction']} | "
                     f"{100 * r['accuracy']:.1f} | {r['offset']:+d} | {100 * r['offset_accuracy']:.1f} |")
    return "\n".join(lines)


def probe_heatmap(probe: dict, path: Path) -> Path:
    """Accuracy of every head (layer × head), one panel per direction."""
    import numpy as np

    from synattn.viz.figure import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), constrained_layout=True)
    titles = {"parent": "dependent → its head", "child": "head → its dependent"}
    top = max(50.0, 100 * max(float(np.max(probe[d])) for d in titles))  # one colour scale for both panels
    for ax, direction in zip(axes, ("parent", "child")):
        grid = 100 * np.asarray(probe[direction])  # [L, H]
        image = ax.imshow(grid, vmin=0, vmax=top, cmap="viridis", aspect="auto")
        for (layer, head), value in np.ndenumerate(grid):
            ax.text(head, layer, f"{value:.0f}", ha="center", va="center", fontsize=8,
                    color="black" if value > 0.6 * top else "white")
        ax.set_xticks(range(grid.shape[1]))
        ax.set_yticks(range(grid.shape[0]))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"{titles[direction]}: accuracy on dev (%)", fontsize=10)
    fig.colorbar(image, ax=list(axes), shrink=0.85).set_label(f"accuracy (%), one scale for both (0 to {top:.0f})")
    fig.suptitle("Each attention head of the pretrained model as a dependency parser (Clark et al. 2019)",
                 fontsize=11)
    return save(fig, path)
