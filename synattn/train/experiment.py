"""One experiment = a task, a prepared dataset, a model config, training and evaluation settings.

This is the YAML that ``synattn train --config`` reads (``configs/*.yaml``)::

    task: mt                    # mt | lm | mlm
    data: data/bible-en-fr      # a folder made by ``synattn prepare``
    model:                      # EncoderDecoderConfig / LanguageModelConfig / MaskedLMConfig;
      d_model: 256              # vocabulary and label sizes are filled in from the dataset
      encoder: {layers: 3, relations: [tree_distance]}
    train: {max_tokens: 4096, lr: 5e-4}      # TrainConfig
    eval: {beam: 4, bleu_sentences: 200}     # EvalConfig

Every section is checked where it enters, before any data is read: unknown and missing keys, wrong
types, values out of range and conflicting features are :class:`synattn.errors.ConfigError` naming
the key (the model section is checked with placeholder vocabulary sizes). :meth:`ExperimentConfig.check_data`
then checks the dataset against the config (folder, task, trees, tokenizers) before training.
:meth:`ExperimentConfig.from_yaml` names the file, or the ``key=value`` override, that made the
mistake.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from synattn.config_io import ConfigFileError, StrictConfig, config_error, from_dict, parse_yaml, read_yaml
from synattn.data.prepared import MANIFEST, PreparedData
from synattn.errors import ConfigError, brief
from synattn.train.config import TrainConfig
from synattn.train.kinds import TASK_KINDS, TaskKind
from synattn.train.libraries import library_of_section

TASKS = {name: (kind.config, kind.model) for name, kind in TASK_KINDS.items()}
"""``(model config class, model class)`` by task name (the registered kinds, ``synattn.train.kinds``)."""

SIZE_KEYS = ("src_vocab_size", "tgt_vocab_size", "vocab_size", "num_pos_tags", "num_deprels")
"""Model keys filled in from the dataset."""

_PLACEHOLDER = ({"vocab_size": {"src": 1000, "tgt": 1000}},
                {"src_upos": [""] * 20, "src_deprels": [""] * 40})
"""Sizes that let the model section be checked before the dataset is read."""


@dataclass
class EvalConfig(StrictConfig):
    """Evaluation during and after training.

    Attributes:
        beam: beam size of translation (1: greedy search).
        length_penalty: beam scores are divided by ``length ** length_penalty``.
        max_len_a, max_len_b: at most ``a × source length + b`` target pieces.
        bleu_sentences: dev sentences translated for BLEU at each validation (0: no BLEU while
            training; ``synattn evaluate`` translates the whole split).
        batch_size: sentences per translation batch.
    """

    beam: int = 4
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    bleu_sentences: int = 200
    batch_size: int = 32

    def check(self) -> None:
        """Checks ranges; raises :class:`ConfigError` naming the key."""
        for key in ("beam", "batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}={getattr(self, key)} must be at least 1")
        for key in ("length_penalty", "max_len_a", "max_len_b", "bleu_sentences"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} must not be negative")
        if self.max_len_a == 0 and self.max_len_b < 1:
            raise ConfigError(f"max_len_a={self.max_len_a} and max_len_b={self.max_len_b} allow no "
                              "target piece")


@dataclass
class ExperimentConfig(StrictConfig):
    """See the module docstring."""

    task: str
    data: str
    model: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def check(self) -> None:
        if self.task not in TASK_KINDS:
            raise ConfigError(f"task={self.task!r}: expected one of {', '.join(TASK_KINDS)}")
        if not self.data.strip():
            raise ConfigError("data: expected the folder of a prepared dataset, got an empty string")
        self.model_without_data()
        metrics = {"loss", "task_loss", "nll_loss", "ppl"}
        if self.kind.translates and self.eval.bleu_sentences > 0:
            metrics |= {"bleu", "chrf"}
        name = self.train.best_metric
        if name not in metrics and not name.startswith("aux/"):
            raise ConfigError(f"train.best_metric={name!r} is not a validation metric of this experiment "
                              f"(it has {', '.join(sorted(metrics))} and aux/<loss>; bleu and chrf need task mt "
                              "and eval.bleu_sentences > 0)")

    @property
    def kind(self) -> TaskKind:
        """The registered kind of ``task`` (its model classes, loss and evaluation hooks)."""
        return TASK_KINDS[self.task]

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Sequence[str] = (), data: str | None = None) -> ExperimentConfig:
        """Read ``path`` and apply ``key.sub=value`` overrides (values parsed as YAML), then ``data``
        (``--data``). Errors name the file, or the override when the file alone is fine."""
        raw = read_yaml(path)
        return cls.from_sections(raw, str(path), overrides, data)

    @classmethod
    def from_sections(cls, raw: Any, where: str, overrides: Sequence[str] = (), data: str | None = None,
                      ) -> ExperimentConfig:
        """Builds the config from YAML data read from ``where``, applying ``overrides`` and ``data``."""
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise ConfigFileError(f"expected a mapping of sections (task, data, model, train, eval), got "
                                  f"{type(raw).__name__}", where)
        merged = copy.deepcopy(raw)
        for item in overrides:
            apply_override(merged, item)
        if data is not None:
            merged["data"] = data
        try:
            exp = cls.from_dict(merged)
        except ConfigError as err:
            raise config_error(err, _culprit(cls, raw, where, overrides, data, err)) from None
        # (where the config was read from: an attribute, not a config key)
        exp.sources = {"file": where, "overrides": list(overrides), "data": data,  # type: ignore[attr-defined]
                       "raw": raw}
        return exp

    def blame(self, err: Exception) -> ConfigFileError:
        """``err`` (found after loading, e.g. by :meth:`check_data`) naming the file, the override
        or ``--data`` it comes from (when the config was read by :meth:`from_yaml`)."""
        sources = getattr(self, "sources", None)
        if sources is None:
            return config_error(err, "config")
        message, overrides = str(err), sources["overrides"]
        named = [item for item in overrides if item.split("=", 1)[0].strip() in message]
        if named:
            return config_error(err, "override " + ", ".join(named))
        if message.startswith("data") and sources["data"] is not None:
            return config_error(err, "--data")
        if overrides and self._passes(()):  # the file alone (with --data) passes: the overrides made the mistake
            # blame those without which the rest passes (model.decoder.bird_eye=sg, not d_model=32 with it)
            alone = [item for item in overrides if self._passes([o for o in overrides if o is not item])]
            return config_error(err, "override " + ", ".join(alone or overrides))
        return config_error(err, sources["file"])

    def _passes(self, overrides) -> bool:
        """Whether this config's file with ``overrides`` (and its ``--data``) passes ``check_data``."""
        sources = self.sources  # type: ignore[attr-defined]  # (set by from_sections)
        try:
            type(self).from_sections(sources["raw"], sources["file"], overrides, sources["data"]).check_data()
        except ConfigError:
            return False
        return True

    def model_without_data(self):
        """The model config as :meth:`model_config` reads the ``model`` section (defaults filled in),
        with stand-in vocabulary and label sizes: what the section asks for, before any dataset
        is read (two spellings of one model give equal configs)."""
        return self.model_config(*_PLACEHOLDER)

    def model_config(self, manifest: dict, labels: dict[str, list[str]]):
        """The model config with vocabulary and label sizes filled in from the dataset's
        ``manifest`` and ``labels``; errors name the ``model.`` key."""
        if (library := library_of_section(self.model)) is not None:  # another library's model
            return library.model_config(self, manifest, labels, manifest is _PLACEHOLDER[0])
        config_cls = self.kind.config
        data = copy.deepcopy(self.model)
        sizes = manifest["vocab_size"]
        if self.kind.parallel and "tgt" not in sizes:
            monolingual = ", ".join(k.name for k in TASK_KINDS.values() if not k.parallel)
            raise ConfigError(f"task {self.task} needs a parallel dataset, but data {self.data} is monolingual "
                              f"(use task {monolingual.replace(', ', ' or ')}, or prepare source and target text)")
        filled = self.kind.vocab_sizes(sizes)
        filled["num_pos_tags"] = len(labels.get("src_upos", []))
        filled["num_deprels"] = len(labels.get("src_deprels", []))
        for key in SIZE_KEYS:
            if key in data and manifest is not _PLACEHOLDER[0] and data[key] != filled.get(key):
                raise ConfigError(f"model.{key}={brief(data[key])} differs from the dataset's "
                                  f"{filled.get(key, 'none')} (leave it out: it is read from the data)")
        data.update({k: data.get(k, v) for k, v in filled.items()})
        try:
            config: Any = from_dict(config_cls, data, "model.")
            from synattn.train.tasks import syntax_request_for

            syntax_request_for(config)
        except ConfigError as err:
            if str(err).startswith("unknown key"):
                made = ConfigError(f"{err} (task {self.task} builds a {config_cls.__name__})")
                made.known_keys = getattr(err, "known_keys", None)  # type: ignore[attr-defined]
                raise made from None
            raise
        except ValueError as err:
            raise ConfigError(f"model: {err}") from None
        return config

    def check_data(self) -> tuple[dict, dict]:
        """Checks the dataset against the config; returns its manifest and labels.

        Raises:
            ConfigError: the folder does not exist or is not prepared, the task needs a parallel
                dataset, the model needs trees the dataset lacks, or shared embeddings meet two
                tokenizers.
        """
        from synattn.data.validate import check_labels, check_manifest
        from synattn.train.tasks import syntax_request_for

        folder = Path(self.data)
        if not folder.is_dir():
            raise ConfigError(f"data: {folder} does not exist or is not a folder (a relative path is read "
                              f"from the current directory, {Path.cwd()})")
        prepared = PreparedData(folder)
        if not prepared.is_prepared(folder):
            raise ConfigError(f"data: {folder} is not a prepared dataset (no {MANIFEST}); run "
                              "'synattn prepare' first")
        manifest, labels = check_manifest(folder), check_labels(folder)  # a damaged file: InputError naming it
        spm = manifest.get("spm", {})
        if self.model.get("share_embeddings") and spm.get("src") != spm.get("tgt"):
            raise ConfigError(f"model.share_embeddings=true needs one vocabulary for both sides, but data "
                              f"{folder} has separate tokenizers ({spm.get('src')}, {spm.get('tgt')}); "
                              "prepare it with --joint-vocab")
        config = self.model_config(manifest, labels)
        trees = manifest.get("trees", {})
        library = library_of_section(self.model)
        request = syntax_request_for(config) if library is None else library.syntax_request(config)
        for side, wanted in self.kind.data_sides(request):
            if wanted and not trees.get(side):
                how = "--parse-target" if side == "tgt" else "the source parsed (without --no-parse-source)"
                raise ConfigError(f"the model needs {', '.join(sorted(wanted))} from {side} trees, but data "
                                  f"{folder} has no {side} trees (prepare it with {how})")
        return manifest, labels


def _culprit(cls, raw: Any, where: str, overrides: Sequence[str], data: str | None, err: Exception) -> str:
    """What to blame for ``err``: the file when it fails alone with the same error, else the
    override (or ``--data``) whose key the message names, else every override."""
    if not overrides and data is None:
        return where
    try:
        cls.from_dict(raw)
    except ConfigError as alone:
        if str(alone) == str(err):
            return where
    message = str(err)
    if data is not None and message.startswith("data"):
        return "--data"
    named = [item for item in overrides if item.split("=", 1)[0].strip() in message]
    if not named:
        named = [item for item in overrides if item.split("=", 1)[0].strip().split(".")[-1] in message]
    return "override " + ", ".join(named or overrides)


def apply_override(data: dict, item: str) -> None:
    """Set ``a.b.c=value`` in nested ``data`` (the value is parsed as YAML: ``3``, ``[a, b]``, ``1e-3``)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key.sub=value")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(part.strip() for part in parts):
        raise ConfigError(f"override {item!r}: the key {key.strip()!r} has an empty part")
    *parents, last = parts
    node = data
    for depth, part in enumerate(parents):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: {'.'.join(parts[:depth + 1])} is not a section")
    try:
        node[last] = parse_yaml(value)
    except yaml.YAMLError as err:
        raise ConfigError(f"override {item!r}: the value is not valid YAML "
                          f"({getattr(err, 'problem', None) or err})") from None
    except ConfigError as err:  # (nested too deeply)
        raise ConfigError(f"override {brief(item, 60)}: {err}") from None


def model_config(exp: ExperimentConfig, manifest: dict, labels: dict[str, list[str]]):
    """The model config of ``exp`` with vocabulary and label sizes filled in from the dataset."""
    return exp.model_config(manifest, labels)


def build_model(exp: ExperimentConfig):
    """A new model for ``exp`` (sizes from the dataset's manifest and labels, checked first)."""
    if (library := library_of_section(exp.model)) is not None:
        return library.build_model(exp)
    manifest, labels = exp.check_data()
    return exp.kind.model(exp.model_config(manifest, labels))
