"""The read step of ``prepare`` (:mod:`synattn.data.prepare`): the configured input -- a built-in
corpus, text files (parallel, a TSV or monolingual) or CoNLL-U treebanks -- read into the
:class:`Side` of each split, its lines checked (errors name file and line) before anything is
written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from synattn.data.text import SkipReport, check_text_file, count_lines, read_lines
from synattn.errors import DataError, UsageError
from synattn.trees.conllu_io import read_conllu
from synattn.trees.dependency import DependencyTree

if TYPE_CHECKING:
    from synattn.data.prepare import PrepareConfig

logger = logging.getLogger(__name__)
SPLITS = ("train", "dev", "test")
"""The splits of a built-in corpus."""


@dataclass
class Side:
    """One side (source or target) of one split while preparing."""

    lines: list[str]
    line_numbers: list[int]
    path: str
    trees: list[DependencyTree] | None = None

    def words(self) -> list[list[str]]:
        return [t.words for t in self.trees] if self.trees is not None else [s.split() for s in self.lines]


def read_splits(cfg: PrepareConfig) -> dict[str, dict[str, Side]]:
    """Every split of the configured input, ``{split: {"src": Side, "tgt": Side}}`` (no ``tgt`` when
    monolingual); warns about a held-out split that repeats the training examples.

    Raises:
        DataError: a bad line or file (naming it), or a split without sentences.
        UsageError: nothing to prepare, or no training split.
    """
    data = _load_text(cfg)
    for split, by_side in data.items():
        if not by_side["src"].lines:
            raise DataError(f"split {split} has no sentences", by_side["src"].path)
    _warn_overlap(data)
    return data


def _load_text(cfg: PrepareConfig) -> dict[str, dict[str, Side]]:
    """Every split of the configured input: ``{split: {"src": Side, "tgt": Side}}``."""
    out: dict[str, dict[str, Side]] = {}
    if cfg.corpus == "bible":
        from synattn.data.corpora import load_bible_pairs

        for split in SPLITS:
            pairs = load_bible_pairs(cfg.bible_source, cfg.bible_target, split,
                                     limit=cfg.limit if split == "train" else None)
            numbers = list(range(1, len(pairs) + 1))
            out[split] = {"src": Side([p.source for p in pairs], numbers, f"bible:{cfg.bible_source}:{split}"),
                          "tgt": Side([p.target for p in pairs], numbers, f"bible:{cfg.bible_target}:{split}")}
    elif cfg.corpus == "ptb":
        from synattn.data.corpora import load_ptb_lm

        for split, name in zip(SPLITS, ("train", "valid", "test")):
            lines = load_ptb_lm(name)[: cfg.limit if split == "train" else None]
            out[split] = {"src": Side(lines, list(range(1, len(lines) + 1)), f"ptb:{name}")}
    elif cfg.prefixes:
        for split, prefix in cfg.prefixes.items():
            out[split] = _read_parallel(cfg, prefix)
            if split in cfg.src_trees:
                _attach_given_trees(out[split]["src"], cfg.src_trees[split])
    elif cfg.src_trees:
        for split, path in cfg.src_trees.items():
            on_error = cast(Literal["raise", "skip"], cfg.on_error)  # (checked by PrepareConfig)
            trees = _within_max_words(read_conllu(path, on_error=on_error), cfg, path)
            out[split] = {"src": Side([" ".join(t.words) for t in trees], list(range(1, len(trees) + 1)),
                                      path, trees)}
    else:
        raise UsageError("nothing to prepare: give a corpus, file prefixes or source treebanks")
    if "train" not in out:
        raise UsageError(f"a training split is required (got {', '.join(out) or 'none'})")
    if cfg.limit is not None:  # whatever the input: at most `limit` training sentences, as the manifest says
        for side in out["train"].values():
            side.lines, side.line_numbers = side.lines[:cfg.limit], side.line_numbers[:cfg.limit]
            side.trees = None if side.trees is None else side.trees[:cfg.limit]
    return out


def _within_max_words(trees: list[DependencyTree], cfg: PrepareConfig, path: str) -> list[DependencyTree]:
    """The trees of at most ``cfg.max_words`` words, as lines of text are; a longer one stops the
    run (naming the sentence) or, with ``on_error="skip"``, is left out with a warning."""
    keep = []
    for number, tree in enumerate(trees, start=1):
        if len(tree.words) <= cfg.max_words:
            keep.append(tree)
            continue
        error = DataError(f"sentence has {len(tree.words)} words, more than --max-words {cfg.max_words}", path,
                          sent_id=tree.sent_id or str(number))
        if cfg.on_error != "skip":
            raise error
        logger.warning("left out: %s", error)
    return keep


def _attach_given_trees(side: Side, conllu: str) -> None:
    """Use the trees of ``conllu`` (one per line of the source file) for ``side``.

    Raises:
        DataError: the treebank has another number of sentences than the source file has lines, or
            a sentence's words differ from the tokens of its line (e.g. a parser that split or
            re-tokenised it): the message names the line and both versions.
    """
    trees = read_conllu(conllu)
    last_line = max(side.line_numbers, default=0)
    if len(trees) < last_line:
        raise DataError(f"{conllu} has {len(trees)} sentences, but the source has at least {last_line} lines",
                        side.path, len(trees) + 1)
    side.trees = []
    for number, text in zip(side.line_numbers, side.lines):
        tree = trees[number - 1]
        if tree.words != text.split():
            raise DataError(f"the tokens of this line differ from sentence {number} of {conllu} "
                            f"({' '.join(tree.words)[:60]!r} there); give pre-tokenised text matching the "
                            f"treebank", side.path, number)
        side.trees.append(tree)


def _read_parallel(cfg: PrepareConfig, prefix: str) -> dict[str, Side]:
    """Read ``PREFIX.SRC``/``PREFIX.TGT`` (or a TSV) keeping only lines good on both sides."""
    reports = SkipReport(), SkipReport()
    if prefix.endswith(".tsv"):
        rows = read_lines(prefix, on_error=cfg.on_error, report=reports[0], keep_tabs=True)
        src, tgt, bad = [], [], []
        for number, text in rows:
            parts = text.split("\t") if "\t" in text else None
            if parts is None or len(parts) != 2 or not all(p.strip() for p in parts):
                if cfg.on_error == "raise":
                    raise DataError("expected 'source<TAB>target' with two non-empty columns", prefix, number)
                bad.append((number, "not two tab-separated columns"))
                continue
            longest = max(len(p.split()) for p in parts)
            if longest > cfg.max_words:
                cause = f"a column has {longest:,} words, more than --max-words {cfg.max_words}"
                if cfg.on_error == "raise":
                    raise DataError(cause + " (use --on-error skip to leave such lines out)", prefix, number)
                bad.append((number, cause))
                continue
            src.append((number, " ".join(parts[0].split())))
            tgt.append((number, " ".join(parts[1].split())))
        reports[0].skipped.extend(bad)
        paths = (prefix, prefix)
    else:
        paths = (f"{prefix}.{cfg.src_lang}", f"{prefix}.{cfg.tgt_lang}")
        if cfg.monolingual:
            rows = read_lines(paths[0], on_error=cfg.on_error, max_words=cfg.max_words, report=reports[0],
                              words_option="--max-words")
            return {"src": Side([t for _, t in rows], [n for n, _ in rows], paths[0])}
        for path in paths:
            check_text_file(path)  # before counting lines: a binary file is no parallel text
        counts = [count_lines(p) for p in paths]
        if counts[0] != counts[1]:
            raise DataError(f"parallel files differ in length: {counts[0]} lines here, {counts[1]} in "
                            f"{paths[1]}", paths[0], min(counts) + 1)
        src, tgt = (read_lines(path, on_error=cfg.on_error, max_words=cfg.max_words, report=report,
                               words_option="--max-words") for path, report in zip(paths, reports))
    for path, report in zip(paths, reports):
        if len(report):
            logger.warning(report.summary(path))
    keep = {n for n, _ in src} & {n for n, _ in tgt}  # a pair is dropped when either side is bad
    src, tgt = [(n, t) for n, t in src if n in keep], [(n, t) for n, t in tgt if n in keep]
    return {"src": Side([t for _, t in src], [n for n, _ in src], paths[0]),
            "tgt": Side([t for _, t in tgt], [n for n, _ in tgt], paths[1])}


def _warn_overlap(data: dict[str, dict[str, Side]], share: float = 0.25) -> None:
    """Warn about a dev or test split of which more than ``share`` of the examples are also
    training examples (e.g. the training file given again): its scores would not show overfitting.
    A few repeated sentences are normal (Bible verses: 8 of 784 dev pairs are in train)."""
    if "train" not in data:
        return

    def examples(split: str) -> list[tuple[str, ...]]:
        return list(zip(*(side.lines for side in data[split].values())))

    train = set(examples("train"))
    for split in data:
        if split == "train":
            continue
        held_out = examples(split)
        seen = sum(e in train for e in held_out)
        if seen > share * len(held_out):
            logger.warning("%s: %d of the %d %s examples (%.0f%%) are also training examples: its scores will not "
                           "show how the model does on unseen text", data[split]["src"].path, seen, len(held_out),
                           split, 100 * seen / len(held_out))
