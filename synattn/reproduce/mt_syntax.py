"""``mt-syntax``: does syntax in the attention of a translation model improve translation?

Every arm is the same encoder-decoder on the same Bible task (World English Bible → Louis Segond
1910, split by whole chapters; the English side parsed by spaCy, the French side too for the
decoder-side methods) and the same budget; only the attention differs: tree-distance or traversal
relations in the encoder (Shaw et al. 2018 style, docs/methods.md §1),
a dependency-supervised head in the encoder or the decoder (Deguchi et al. 2019), the Bird-Eye
decoder's pointer loss BET(SG) or its diagonal-free attention BET(SF) (Sha et al. 2022), and
segmentation (structured) cross-attention (Kim et al. 2017). Scores: sacreBLEU BLEU and chrF with
signatures on the test verses; the noise is the std over seeds and, for each seed, sacreBLEU's
paired bootstrap test against the baseline of the same seed.

Sweeps (arms run only when asked, ``--sweep GROUP`` or ``--arms NAME``): the loss weight λ ∈ {0.1,
0.3, 1} and the placement of BET(SG), of the supervised decoder and encoder heads, and of
segmentation attention, one setting at a time from the group's reference arm (the method placed
as its paper places it). A sweep arm is named after its group's reference arm and what it
changes: ``-w1`` the loss weight, ``-layer2`` one layer only, ``-all`` every layer, ``-head0``
one head instead of the head average (:func:`sweep_arm`). The default arms weigh their auxiliary
losses λ = 0.1: at λ = 1 against a translation loss of 900 updates they lost up to 8 chrF, at 0.1
they do not (docs/results.md, the sweeps of 2026-11-26). Of BET(SG) and segmentation attention
the default arms are the sweeps' settings that were not worse than the baseline
(``bet-sg-head0``, ``segmentation-layer2``; the sweeps of 2026-11-27).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from synattn.io import atomic_write
from synattn.option_types import positive_int
from synattn.reproduce.study import NEW_FOLDER, Arm, Context, Study, budget_train, merge

LAYERS = 3
"""Encoder and decoder layers of every arm (toy and full size): the sweeps' placements name them."""

WEIGHT = 0.1
"""The default arms' auxiliary loss weight (λ of the supervised heads, λ_p of BET(SG)); it was 1
until the sweeps showed its cost at this budget (docs/results.md)."""

SUPERVISED = {"layer": 2, "head": 0, "weight": WEIGHT}

WEIGHTS = (0.3, 1.0)
"""The sweeps' loss weights besides the default arms' 0.1."""

BASELINE = Arm("baseline", {}, "Transformer, sinusoidal positions, softmax attention")
SUPERVISED_ENC = Arm("supervised-enc", {"encoder": {"supervised_head": SUPERVISED}},
                     "encoder head 0 of layer 2 supervised by the source dependency trees (λ = 0.1)")
SUPERVISED_DEC = Arm("supervised-dec", {"decoder": {"supervised_head": SUPERVISED}},
                     "decoder head 0 of layer 2 supervised by the target trees (causal; λ = 0.1)")
BET_SG = Arm("bet-sg", {"decoder": {"bird_eye": {"variant": "sg", "pointer_weight": WEIGHT}}},
             "BET(SG): pointer loss toward the syntax hints (λ_p = 0.1, every block, head average)")
SEGMENTATION = Arm("segmentation", {"decoder": {"cross_attention": "segmentation"}},
                   "segmentation (binary linear-chain CRF) cross-attention")

SUFFIXES = {"weight": "w", "pointer_weight": "w", "pointer_head": "head"}
"""How a changed setting names a sweep arm (layers: ``-layerL`` or ``-all``)."""


def sweep_arm(arm: Arm, side: str, section: str | None, description: str, **change) -> Arm:
    """``arm`` with ``change`` made to its ``side``'s ``section`` (None: flat keys of the stack),
    named ``arm.name`` plus one suffix per change: ``-w`` λ, ``-head`` H, ``-layer`` L (one layer)
    or ``-all`` (every layer, for a method whose default is one layer).

    Example:
        >>> sweep_arm(BET_SG, "decoder", "bird_eye", "", pointer_weight=1).name
        'bet-sg-w1'
    """
    name = arm.name
    for key, value in change.items():
        if key.endswith("layers"):
            name += "-all" if value == list(range(LAYERS)) else "-layer" + "-".join(map(str, value))
        else:
            name += f"-{SUFFIXES[key]}{value:g}"
    current = arm.model[side] if section is None else arm.model[side][section]
    if isinstance(current, str):  # bird_eye: sg
        current = {"variant": current}
    model = merge(arm.model, {side: change if section is None else {section: {**current, **change}}})
    return Arm(name, model, description)


def _bet_sg(description: str, **change) -> Arm:
    return sweep_arm(BET_SG, "decoder", "bird_eye", description, **change)


SWEEPS = {
    "bet-sg": (BET_SG,
               *(_bet_sg(f"BET(SG), λ_p = {w:g} (every block, head average)", pointer_weight=w) for w in WEIGHTS),
               _bet_sg(f"BET(SG) on the last block only (λ_p = {WEIGHT:g}, head average; a third of {BET_SG.name}'s "
                       "summed pointer weight)", layers=[LAYERS - 1]),
               _bet_sg(f"BET(SG) on head 0 of every block instead of the head average (λ_p = {WEIGHT:g})",
                       pointer_head=0)),
    **{arm.name: (arm,
                  *(sweep_arm(arm, side, "supervised_head", f"{side} head 0 of layer 2 supervised (λ = {w:g})",
                              weight=w) for w in WEIGHTS),
                  sweep_arm(arm, side, "supervised_head", f"{side} head 0 of every layer supervised (λ = "
                            f"{WEIGHT:g}, the parse loss averaged over the {LAYERS} layers)",
                            layers=list(range(LAYERS))))
       for arm, side in ((SUPERVISED_DEC, "decoder"), (SUPERVISED_ENC, "encoder"))},
    "segmentation": (SEGMENTATION, *(
        sweep_arm(SEGMENTATION, "decoder", None, f"segmentation cross-attention in decoder layer {layer} only "
                  "(softmax in the others)", cross_attention_layers=[layer]) for layer in (0, LAYERS - 1))),
}
"""The study's sweeps (``--sweep GROUP``): each group's reference arm (the method as its paper
places it, at λ = 0.1), then one change at a time."""

BET_SG_HEAD0 = next(arm for arm in SWEEPS["bet-sg"] if arm.name == "bet-sg-head0")
SEGMENTATION_LAST = next(arm for arm in SWEEPS["segmentation"] if arm.name == f"segmentation-layer{LAYERS - 1}")
"""The settings of BET(SG) and segmentation attention that the study runs by default: of each
sweep's settings, those not worse than the baseline at 900 updates (the pointer loss on one head
of every block; segmentation attention in the last decoder layer only), where the reference
arms lost (docs/results.md, the sweeps of 2026-11-27)."""


BOOTSTRAP = "bootstrap.json"
"""Where a run keeps its paired bootstrap test against the baseline (:func:`cached_bootstrap`)."""


def cached_bootstrap(run: Path, base_run: Path, references: list[str], samples: int) -> dict:
    """:func:`synattn.reproduce.stats.paired_bootstrap` of ``run``'s test translations against
    ``base_run``'s, read from ``run/bootstrap.json`` when that file was made of the same
    translations, references and number of resamples, else computed and written there."""
    import hashlib
    import json

    from synattn.reproduce.stats import paired_bootstrap

    hyp = (run / "test.hyp").read_text(encoding="utf-8").splitlines()
    base = (base_run / "test.hyp").read_text(encoding="utf-8").splitlines()
    refs = references[:len(hyp)]
    digest = hashlib.sha256(json.dumps([base, hyp, refs, samples]).encode()).hexdigest()
    path = run / BOOTSTRAP
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(kept, dict) and kept.get("digest") == digest and isinstance(kept.get("test"), dict):
            return kept["test"]
    except (OSError, ValueError):
        pass  # none yet, or unreadable: made again
    test = paired_bootstrap(base, hyp, refs, samples=samples)
    with atomic_write(path) as f:
        json.dump({"digest": digest, "baseline_run": str(base_run), "samples": samples, "test": test}, f, indent=1)
    return test


def resamples(ctx: Context) -> int:
    """Resamples of the paired bootstrap (fewer for a toy run)."""
    return 100 if ctx.toy else 1000


class MTSyntaxStudy(Study):
    name = "mt-syntax"
    title = "syntax-aware attention in translation (Bible en→fr): BLEU and chrF against a plain Transformer"
    question = ("Tree-relative attention, dependency-supervised heads (Deguchi et al. 2019 report +0.6 to +1.0 "
                "BLEU on ASPEC Ja→En), Bird-Eye attention (Sha et al. 2022) and structured cross-attention "
                "(Kim et al. 2017): does each beat the same Transformer without it, on the same data and budget?")
    task = "mt"
    arms = (BASELINE,
            Arm("tree-distance", {"encoder": {"relations": ["tree_distance"]}},
                "encoder self-attention with tree-distance key/value embeddings (max distance 8)"),
            Arm("traversal", {"encoder": {"relations": ["traversal"]}},
                "encoder self-attention with tree-traversal (U*D*, LD*, RD*) key/value embeddings"),
            SUPERVISED_ENC,
            SUPERVISED_DEC,
            BET_SG_HEAD0,
            Arm("bet-sf", {"decoder": {"bird_eye": "sf"}}, "BET(SF): diagonal-free reweighted decoder attention"),
            SEGMENTATION_LAST)
    sweeps = SWEEPS
    seeds = 2
    minutes = 60.0
    primary = "chrf"
    columns = (("bleu", "BLEU"), ("chrf", "chrF"), ("ppl", "test ppl"), ("uas", "supervised-head UAS % (best layer)"),
               ("train_step", "updates"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--pairs", type=positive_int, default=None,
                            help="training verse pairs (default: all 29,560; a toy run takes 60)")
        parser.add_argument("--test-sentences", type=positive_int, default=None,
                            help="test verses translated (default: all 758)")

    def prepare(self, ctx: Context) -> Path:
        from synattn.data.prepare import PrepareConfig, prepare

        if ctx.toy:  # a few verses of each split, written as text
            from synattn.data.corpora import load_bible_pairs

            prefixes = {}
            for split, n in (("train", 60), ("dev", 10), ("test", 20)):
                pairs = load_bible_pairs("4", "l", split, limit=n)
                for side, lang in (("source", "en"), ("target", "fr")):
                    ctx.write(ctx.out / "text" / f"{split}.{lang}", "\n".join(getattr(p, side) for p in pairs) + "\n")
                prefixes[split] = str(ctx.out / "text" / split)
            return prepare(PrepareConfig(out=str(ctx.out / "data"), prefixes=prefixes, parse_target=True,
                                         vocab_size=400), remedy=NEW_FOLDER)
        return prepare(PrepareConfig(out=str(ctx.out / "data"), corpus="bible", bible_source="4", bible_target="l",
                                     limit=ctx.args.pairs, parse_target=True, vocab_size=6000), remedy=NEW_FOLDER)

    def base_model(self, ctx: Context) -> dict:
        if ctx.toy:
            return {"d_model": 32, "heads": 2, "ffn_dim": 64, "dropout": 0.1, "norm": "pre",
                    "encoder": {"layers": LAYERS}, "decoder": {"layers": LAYERS}}
        return {"d_model": 256, "heads": 4, "ffn_dim": 1024, "dropout": 0.1, "norm": "pre",
                "encoder": {"layers": LAYERS}, "decoder": {"layers": LAYERS}}

    def base_train(self, ctx: Context) -> dict:
        return budget_train(ctx, max_tokens=4000, lr=2e-3, warmup=200, validate_every=2, bf16=True)

    def base_eval(self, ctx: Context) -> dict:
        if ctx.toy:  # an untrained model writes every hypothesis to its longest: most of a toy run's time
            return {"beam": 2, "bleu_sentences": 0, "batch_size": 32, "max_len_a": 0.5, "max_len_b": 10}
        return {"beam": 4, "bleu_sentences": 0, "batch_size": 32}

    def evaluate(self, ctx: Context, arm: Arm, seed: int, run_dir: Path) -> dict:
        from synattn.evaluate.runner import evaluate_run

        model, exp = self.load(ctx, run_dir)
        count = 20 if ctx.toy else ctx.args.test_sentences
        ev = evaluate_run(model, exp, "test", translate=True, max_translate=count,
                          show_progress=ctx.progress and not ctx.toy)
        assert ev.hypotheses is not None and ev.translation is not None  # (translate=True)
        with atomic_write(run_dir / "test.hyp") as f:
            f.write("\n".join(ev.hypotheses) + "\n")
        out = {"bleu": ev.translation["bleu"], "chrf": ev.translation["chrf"], "ppl": ev.perplexity,
               "bleu_signature": ev.translation["bleu_signature"], "chrf_signature": ev.translation["chrf_signature"],
               "sentences": len(ev.hypotheses), "detokenized": True}
        if ev.attachment:  # a head in several layers: the best of them
            out["uas"] = 100 * max(ev.attachment.values())
        return out

    def rescore(self, ctx: Context, run_dir: Path, metrics: dict) -> dict | None:
        """Runs scored before translations were detokenized (``test.hyp`` holds tokens separated by
        spaces): their output written as text with the dataset's spacing, BLEU and chrF again."""
        if metrics.get("detokenized") or not (run_dir / "test.hyp").is_file():
            return None
        from synattn.data.batching import PreparedDataset
        from synattn.data.prepared import PreparedData
        from synattn.evaluate.translation import translation_scores

        assert ctx.data is not None  # (set by Study.prepare)
        spacing = PreparedData(ctx.data).spacing("tgt")
        tokens = (run_dir / "test.hyp").read_text(encoding="utf-8").splitlines()
        text = [spacing.detokenize(t) for t in tokens] if spacing is not None else tokens
        scores = translation_scores(text, PreparedDataset(ctx.data, "test").text("tgt")[:len(text)])
        with atomic_write(run_dir / "test.hyp") as f:
            f.write("\n".join(text) + "\n")
        return {**metrics, "bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
                "chrf_signature": scores.chrf_signature, "detokenized": True, "bleu_tokenized": metrics["bleu"]}

    def compare(self, ctx: Context, runs: dict[str, dict[int, Path]]) -> dict:
        """sacreBLEU's paired bootstrap of every arm against the baseline of the same seed.

        Each test (a few seconds for 758 verses) is kept in the run's folder (``bootstrap.json``,
        with digests of the two translations, the references and the resamples it was made of), so
        that a study run again, or continued, tests only what changed."""
        from synattn.data.batching import PreparedDataset
        from synattn.progress import progress

        baseline = self.arms[0].name
        assert ctx.data is not None  # (set by Study.prepare)
        references = PreparedDataset(ctx.data, "test").text("tgt")
        pairs = [(arm, seed, run, runs[baseline][seed]) for arm, by_seed in runs.items() if arm != baseline
                 for seed, run in by_seed.items() if seed in runs[baseline]]
        out: dict = {}
        for arm, seed, run, base_run in progress(pairs, desc="paired bootstrap", unit="run"):
            out.setdefault(arm, {})[str(seed)] = cached_bootstrap(run, base_run, references, resamples(ctx))
        return out

    def table(self, ctx: Context, metrics: dict, comparisons: dict) -> str:
        from synattn.reproduce.report import default_table

        lines = [default_table(self, metrics)]
        if comparisons:
            lines += ["", f"Paired bootstrap (sacreBLEU, {resamples(ctx)} resamples) against the baseline of the same "
                          "seed: Δ and p-value per seed. It measures the noise of the test sample, not that of "
                          "training: a difference holds only if it holds over seeds (Δ ± std in the table)."]
        for arm, by_seed in comparisons.items():
            cells = [f"seed {s}: ΔBLEU {c['bleu']['delta']:+.2f} (p = {c['bleu']['p_value']:.3f}), "
                     f"ΔchrF {c['chrf']['delta']:+.2f} (p = {c['chrf']['p_value']:.3f})" for s, c in by_seed.items()]
            lines.append(f"- `{arm}`: " + "; ".join(cells))
        first: dict = next((m for runs in metrics.values() for m in runs.values()), {})
        if first:
            lines += ["", f"BLEU: `{first.get('bleu_signature')}`; chrF: `{first.get('chrf_signature')}`; "
                          f"{first.get('sentences')} test verses."]
        return "\n".join(lines)
