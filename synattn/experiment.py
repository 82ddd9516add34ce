"""One experiment = a task, a prepared dataset, a model config, training and evaluation settings.

This is the YAML that ``synattn train --config`` reads (``configs/*.yaml``)::

    task: mt                    # mt | lm | mlm
    data: data/bible-en-fr      # a folder made by ``synattn prepare``
    model:                      # EncoderDecoderConfig / LanguageModelConfig / MaskedLMConfig;
      d_model: 256              # vocabulary and label sizes are filled in from the dataset
      encoder: {layers: 3, relations: [tree_distance]}
    train: {max_tokens: 4096, lr: 5e-4}      # TrainConfig
    eval: {beam: 4, bleu_sentences: 200}     # EvalConfig

Every key is checked: unknown keys and wrong types are errors that name the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synattn.errors import InputError
from synattn.models import (EncoderDecoderConfig, EncoderDecoderTransformer, LanguageModelConfig,
                            MaskedLM, MaskedLMConfig, TransformerLM)
from synattn.models.config_io import from_dict, parse_yaml, to_dict
from synattn.train import TrainConfig

TASKS = {"mt": (EncoderDecoderConfig, EncoderDecoderTransformer),
         "lm": (LanguageModelConfig, TransformerLM),
         "mlm": (MaskedLMConfig, MaskedLM)}


@dataclass
class EvalConfig:
    """Evaluation during and after training.

    Attributes:
        beam: beam size of translation.
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


@dataclass
class ExperimentConfig:
    """See the module docstring."""

    task: str
    data: str
    model: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}: expected one of {', '.join(TASKS)}")

    @classmethod
    def from_dict(cls, data: dict) -> ExperimentConfig:
        return from_dict(cls, data)

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
        """Read ``path`` and apply ``key.sub=value`` overrides (values parsed as YAML)."""
        try:
            data = parse_yaml(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as err:
            raise InputError(f"cannot read the config: {err.strerror}", str(path)) from None
        except Exception as err:  # yaml.YAMLError
            raise InputError(f"invalid YAML: {err}", str(path)) from None
        for item in overrides:
            apply_override(data, item)
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as err:
            raise InputError(str(err), str(path)) from None


def apply_override(data: dict, item: str) -> None:
    """Set ``a.b.c=value`` in nested ``data`` (the value is parsed as YAML: ``3``, ``[a, b]``, ``1e-3``)."""
    if "=" not in item:
        raise InputError(f"override {item!r} is not of the form key.sub=value")
    key, value = item.split("=", 1)
    *parents, last = key.strip().split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise InputError(f"override {item!r}: {part} is not a section")
    node[last] = parse_yaml(value)


def model_config(exp: ExperimentConfig, manifest: dict, labels: dict[str, list[str]]):
    """The model config of ``exp`` with vocabulary and label sizes filled in from the dataset."""
    config_cls, _ = TASKS[exp.task]
    data = dict(exp.model)
    sizes = manifest["vocab_size"]
    if exp.task == "mt":
        if "tgt" not in sizes:
            raise ValueError(f"task mt needs a parallel dataset, but {exp.data} is monolingual")
        data.setdefault("src_vocab_size", sizes["src"])
        data.setdefault("tgt_vocab_size", sizes["tgt"])
    else:
        data.setdefault("vocab_size", sizes["src"])
    data.setdefault("num_pos_tags", len(labels.get("src_upos", [])))
    data.setdefault("num_deprels", len(labels.get("src_deprels", [])))
    return config_cls.from_dict(data)


def build_model(exp: ExperimentConfig):
    """A new model for ``exp`` (sizes from the dataset's manifest and labels)."""
    folder = Path(exp.data)
    manifest = json.loads((folder / "manifest.json").read_text())
    labels_path = folder / "labels.json"
    labels = json.loads(labels_path.read_text()) if labels_path.exists() else {}
    _, model_cls = TASKS[exp.task]
    return model_cls(model_config(exp, manifest, labels))
