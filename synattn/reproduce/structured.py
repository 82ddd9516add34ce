"""``structured-attention``: does attention over a structure (Kim, Denton, Hoang & Rush 2017)
beat softmax attention when the task has that structure?

The task: **characters → words**. The source is an English Bible verse's first words, lowercased,
letters only, written as one character stream without spaces (``i n t h e b e g i n n i n g``);
the target is the words (``in the beginning``). Every target word is a contiguous block of source
characters, and finding the blocks is the whole difficulty: the structure that segmentation
attention (a binary linear-chain CRF over source positions whose marginals are the attention
weights) builds in, and the one Kim et al. tested with character-to-word Japanese→English
translation (softmax 12.6, sigmoid 13.1, structured 14.6 BLEU). It isolates that alignment from
the rest of translation, so minutes of CPU training suffice to see a difference. Syntactic
attention (the soft parent of each character under a projective dependency CRF, inside-outside
over Eisner's algorithm) is the encoder-side arm: grouping characters into words is the tree it
could learn. Scores: exact match of whole outputs, word accuracy (position by position), chrF.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from synattn.io import atomic_write
from synattn.option_types import positive_int
from synattn.reproduce.study import NEW_FOLDER, Arm, Context, Study, budget_train

WORDS = 6


def char_word_pair(text: str, words: int = WORDS) -> tuple[str, str] | None:
    """``(source characters, target words)`` of one verse, or None when it has < 3 words.

    Example:
        >>> char_word_pair("In the beginning, God created the heavens and the earth.")
        ('i n t h e b e g i n n i n g g o d c r e a t e d t h e', 'in the beginning god created the')
    """
    found = re.findall(r"[a-z]+", text.lower())[:words]
    if len(found) < 3:
        return None
    return " ".join("".join(found)), " ".join(found)


class StructuredAttentionStudy(Study):
    name = "structured-attention"
    title = "segmentation and syntactic attention vs softmax attention on characters → words"
    question = ("Kim et al. (2017) report that structured (segmentation) attention beats softmax and sigmoid "
                "attention on character-to-word translation. Does it, and does syntactic attention in the "
                "encoder, on a task whose alignments are contiguous character blocks?")
    task = "mt"
    arms = (Arm("softmax", {}, "softmax cross-attention (the baseline)"),
            Arm("sigmoid", {"decoder": {"cross_attention": "sigmoid"}},
                "independent sigmoid weights (the segmentation CRF without pairwise terms)"),
            Arm("segmentation", {"decoder": {"cross_attention": "segmentation"}},
                "segmentation attention: marginals of a binary linear-chain CRF per head"),
            Arm("syntactic", {"encoder": {"syntactic_attention": {"layer": 1, "head": 0}}},
                "encoder head 0 of layer 1 replaced by the soft parent under a projective dependency CRF"))
    seeds = 3
    minutes = 10.0
    primary = "word_accuracy"
    columns = (("exact", "exact match %"), ("word_accuracy", "word accuracy %"), ("chrf", "chrF"),
               ("train_step", "updates"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--examples", type=positive_int, default=None,
                            help="training verses (default: all; a toy run takes 60)")

    def prepare(self, ctx: Context) -> Path:
        from synattn.data.corpora import load_bible_pairs
        from synattn.data.prepare import PrepareConfig, prepare

        folder = ctx.out / "text"
        prefixes = {}
        for split in ("train", "dev", "test"):
            limit = (60 if split == "train" else 20) if ctx.toy else (ctx.args.examples if split == "train" else 500)
            pairs = [p for p in (char_word_pair(v.source) for v in load_bible_pairs("4", "l", split)) if p]
            pairs = pairs[:limit] if limit else pairs
            for side, k in (("src", 0), ("tgt", 1)):
                ctx.write(folder / f"{split}.{side}", "\n".join(p[k] for p in pairs) + "\n")
            prefixes[split] = str(folder / split)
        return prepare(PrepareConfig(out=str(ctx.out / "data"), prefixes=prefixes, src_lang="src", tgt_lang="tgt",
                                     parse_source=False, pretokenized=True, vocab_size=200 if ctx.toy else 4000),
                       remedy=NEW_FOLDER)

    def base_model(self, ctx: Context) -> dict:
        d, layers = (32, 2) if ctx.toy else (128, 2)
        return {"d_model": d, "heads": 4 if not ctx.toy else 2, "ffn_dim": 4 * d, "dropout": 0.1, "norm": "pre",
                "encoder": {"layers": layers}, "decoder": {"layers": layers}}

    def base_train(self, ctx: Context) -> dict:
        return budget_train(ctx, max_tokens=3000, lr=2e-3, warmup=100)

    def base_eval(self, ctx: Context) -> dict:
        return {"beam": 1, "bleu_sentences": 0, "batch_size": 64, "max_len_a": 0.5, "max_len_b": 10}

    def evaluate(self, ctx: Context, arm: Arm, seed: int, run_dir: Path) -> dict:
        from synattn.evaluate.runner import evaluate_run

        model, exp = self.load(ctx, run_dir)
        ev = evaluate_run(model, exp, "test", translate=True, show_progress=ctx.progress and not ctx.toy)
        assert ev.hypotheses is not None and ev.translation is not None  # (translate=True)
        refs = (ctx.out / "text" / "test.tgt").read_text(encoding="utf-8").splitlines()[:len(ev.hypotheses)]
        exact = sum(h.split() == r.split() for h, r in zip(ev.hypotheses, refs))
        words = sum(len(r.split()) for r in refs)
        right = sum(sum(int(a == b) for a, b in zip(h.split(), r.split())) for h, r in zip(ev.hypotheses, refs))
        with atomic_write(run_dir / "test.hyp") as f:
            f.write("\n".join(ev.hypotheses) + "\n")
        return {"exact": 100 * exact / max(len(refs), 1), "word_accuracy": 100 * right / max(words, 1),
                "chrf": ev.translation["chrf"], "bleu": ev.translation["bleu"]}
