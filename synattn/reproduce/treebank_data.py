"""Datasets of the studies that train on a dependency treebank (gold CoNLL-U trees) or on the
language-model text of the Penn Treebank, and the language-model text's words (Mikolov et al. 2011)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

from synattn.errors import UsageError
from synattn.reproduce.study import NEW_FOLDER, Context
from synattn.trees.dependency import DependencyTree
from synattn.trees.induce import is_punctuation

TOY_SENTENCES = 40
TEXTS = ("as-is", "lm")  # the treebank's words, or lm_text


def add_treebank_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src-trees", nargs="+", metavar="SPLIT=FILE",
                        help="the treebank, CoNLL-U per split: train=… dev=… [test=…] "
                             "(e.g. UD English-EWT)")


def prepare_ptb_text(ctx: Context, vocab_size: int, subword_model: str = "word") -> Path:
    """Prepares Mikolov et al.'s PTB language-model text (the ``treebank`` package: train, valid as
    dev, test; no trees) as a monolingual dataset under ``OUT/data``, as ``synattn prepare --corpus
    ptb --no-parse-source`` does; a toy run takes the first training sentences only."""
    from synattn.data.prepare import PrepareConfig, prepare

    return prepare(PrepareConfig(out=str(ctx.out / "data"), corpus="ptb", parse_source=False, pretokenized=True,
                                 vocab_size=vocab_size, subword_model=subword_model,
                                 limit=TOY_SENTENCES * 5 if ctx.toy else None), remedy=NEW_FOLDER)


def treebank_files(args: argparse.Namespace, toy: bool = False) -> dict[str, str] | None:
    """``--src-trees`` as ``{split: resolved path}``, checked before any work: each item
    ``SPLIT=FILE`` of a split train, dev or test, named once, of a file that exists, no file (or
    two files of the same contents) for two splits (a model scored on the sentences it trained on
    measures nothing), train and dev given. None for a ``--toy`` run without it (the package's
    own tiny treebank, :mod:`synattn.reproduce.toy_treebank`).

    Raises:
        UsageError: naming ``--src-trees`` and the item.
    """
    given = getattr(args, "src_trees", None)
    if not given and toy:
        return None
    if not given:
        raise UsageError("--src-trees: this study trains on a dependency treebank; give "
                         "train=FILE dev=FILE [test=FILE] (CoNLL-U, e.g. UD English-EWT)")
    splits: dict[str, str] = {}
    for item in given:
        split, sep, path = item.partition("=")
        if not sep or split not in ("train", "dev", "test") or not path:
            raise UsageError(f"--src-trees: expected train=FILE, dev=FILE or test=FILE, got {item!r}")
        if split in splits:
            raise UsageError(f"--src-trees: {split}= is given twice ({splits[split]} and {path}); give one file "
                             "per split")
        if not Path(path).is_file():
            raise UsageError(f"--src-trees: {split}={path}: not a file")
        for other, known in splits.items():
            if _same_contents(known, path):
                raise UsageError(f"--src-trees: {other}={known} and {split}={path} are the same treebank; a model "
                                 f"scored on the sentences it was trained on, or {other} scored as {split}, measures "
                                 "nothing: give each split its own file")
        splits[split] = str(Path(path).resolve())
    missing = {"train", "dev"} - set(splits)
    if missing:
        raise UsageError(f"--src-trees: missing {' and '.join(sorted(missing))}=FILE")
    return splits


def _same_contents(a: str, b: str) -> bool:
    """Whether the files ``a`` and ``b`` are one file, or hold the same bytes."""
    import os

    from synattn.io import file_digest

    try:
        if os.path.samefile(a, b):
            return True
        return os.path.getsize(a) == os.path.getsize(b) and file_digest(a) == file_digest(b)
    except OSError:
        return False  # not readable: preparing it says so


def treebank_splits(ctx: Context) -> dict[str, str]:
    """``--src-trees`` as ``{split: path}`` (:func:`treebank_files`); a ``--toy`` run without it
    takes the package's own tiny treebank, written into ``OUT/builtin-treebank``."""
    splits = treebank_files(ctx.args, ctx.toy)
    if splits is None:
        from synattn.reproduce.toy_treebank import write_toy_treebank

        return write_toy_treebank(ctx.out / "builtin-treebank", ctx.write)
    return splits


def prepare_treebank(ctx: Context, vocab_size: int, subword_model: str = "unigram", text: str = "as-is") -> Path:
    """Prepares the treebank as a monolingual dataset (words as tokens, gold trees projected onto
    sentencepiece pieces; ``subword_model="word"``: one piece per word) under ``OUT/data``; a toy
    run takes the first sentences only. ``text="lm"``: every split as :func:`lm_text` first."""
    from synattn.data.prepare import PrepareConfig, prepare

    if text not in TEXTS:
        raise UsageError(f"text must be one of {', '.join(TEXTS)}, got {text!r}")
    given = splits = treebank_splits(ctx)
    if ctx.toy:
        splits = _copies(ctx, splits, ctx.out / "toy-treebank", lambda trees: trees[:TOY_SENTENCES], given)
    if text == "lm":
        splits = _copies(ctx, splits, ctx.out / "lm-text",
                         lambda trees: [t for t in map(lm_text, trees) if t is not None], given)
    return prepare(PrepareConfig(out=str(ctx.out / "data"), src_trees=splits, tgt_lang=None,
                                 vocab_size=vocab_size, subword_model=subword_model), remedy=NEW_FOLDER)


_NUMBER = re.compile(r"[\d.,:/\\-]*\d[\d.,:/\\-]*|%")
"""A token Mikolov et al.'s PTB text writes ``N``: a number (``61``, ``3.5``, ``1,000``, ``3\\/4``,
``10-20``) or ``%``; a word with a digit in it (``1980s``, ``30-day``) stays a word. Measured on
WSJ 0001–0099 (1,921 sentences): made by :func:`lm_gold`, with the words outside the PTB text's
vocabulary as ``<unk>``, 1,913 equal their lines of the PTB text word for word but for ``$`` and
``#``, which that text keeps and the gold drops (the evaluation Wang et al. use, from Shen et al.'s
ON-LSTM code, keeps no currency sign)."""


def lm_word(word: str) -> str:
    """A word as Mikolov et al.'s (2011) language-model text writes it: lowercased, ``N`` for a
    number or ``%`` (:data:`_NUMBER`)."""
    return "N" if _NUMBER.fullmatch(word) else word.lower()


def lm_gold(tree):
    """A PTB-bracketed gold tree (:class:`~synattn.trees.constituency.Tree`) over the words the
    language-model text has, as Wang et al. (2019) score against WSJ: punctuation and the currency
    signs ``$``, ``#`` dropped by their PTB tags (by the characters where a leaf has no tag;
    ``-NONE-`` elements are gone already,
    :func:`~synattn.trees.constituency.read_brackets`), constituents left empty removed, words as
    :func:`lm_word`. ``None`` when no word is left."""
    from synattn.trees.constituency import Tree, drop_leaves, leaves
    from synattn.trees.induce import punctuation_mask

    keep = [not p for p in punctuation_mask(tree)]
    if not any(keep):
        return None
    kept = drop_leaves(tree, keep)
    words = iter(lm_word(w) for w in leaves(kept))

    def rename(node: Tree) -> Tree:
        if node.is_leaf:
            return Tree(node.label, word=next(words))
        return Tree(node.label, tuple(rename(c) for c in node.children))

    return rename(kept)


def lm_text(tree: DependencyTree) -> DependencyTree | None:
    """The sentence as the language-model text of Mikolov et al. (2011), on which Wang et al. (2019)
    train their Tree Transformer: punctuation dropped (UPOS ``PUNCT``; by its characters where the
    treebank has no UPOS), words lowercased, every word with a digit as ``N``. The gold tree
    follows (:meth:`DependencyTree.keep_words`). ``None`` when the sentence is all punctuation."""
    keep = [u != "PUNCT" if u != "_" else not is_punctuation(w)
            for w, u in zip(tree.words, tree.upos or ["_"] * len(tree))]
    if not any(keep):
        return None
    kept = tree.keep_words(keep)
    kept.words = [lm_word(w) for w in kept.words]
    kept.text = " ".join(kept.words)
    return kept


def _copies(ctx: Context, splits: dict[str, str], folder: Path, change: Callable[[list], list],
            given: dict[str, str]) -> dict[str, str]:
    """Each split's trees passed through ``change``, written as ``folder/SPLIT.conllu`` (:meth:`Context.write`);
    written again when the split's file has other contents than those the copy was made from (its
    SHA-256 is kept beside it, ``SPLIT.source``), so a study rerun on edited or other files never
    trains on stale copies.

    Raises:
        DataError: ``change`` leaves no sentence of a split (the error names the user's file, ``given``).
    """
    import io
    import json

    from synattn.errors import DataError
    from synattn.io import file_digest
    from synattn.trees.conllu_io import read_conllu, write_conllu

    out = {}
    for split, path in splits.items():
        target, source = folder / f"{split}.conllu", folder / f"{split}.source"
        digest = file_digest(path)
        try:
            made_from = json.loads(source.read_text())["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            made_from = None
        if made_from != digest or not target.exists():
            trees = change(read_conllu(path))
            if not trees:
                raise DataError(f"no sentence of split {split} is left for {folder.name} (its sentences were "
                                "all punctuation, or there were none)", given[split])
            text = io.StringIO()
            write_conllu(trees, text)
            ctx.write(target, text.getvalue())
            ctx.write(source, json.dumps({"path": path, "sha256": digest}))
        out[split] = str(target)
    return out
