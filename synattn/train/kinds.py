"""The kinds of model synattn trains (the ``task:`` of an experiment), one registered
:class:`TaskKind` each: its name, model config and model classes, its training loss and the hooks
evaluation uses. Code elsewhere asks a kind what it does (``kind.parallel``, ``kind.translates``)
instead of comparing task names.

Example:
    >>> from synattn.train.kinds import task_kind
    >>> kind = task_kind("mt")
    >>> kind.config.__name__, kind.model.__name__, kind.translates
    ('EncoderDecoderConfig', 'EncoderDecoderTransformer', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from torch import nn

from synattn.data.batching import Batch
from synattn.data.subwords import PAD
from synattn.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    LanguageModelConfig,
    MaskedLM,
    MaskedLMConfig,
    PretrainedModel,
    TransformerLM,
)
from synattn.syntax.request import SyntaxRequest
from synattn.train.libraries import library_of_model
from synattn.train.tasks import LanguageModelTask, MaskedLMTask, Task, TranslationTask, syntax_request_for


@dataclass(frozen=True)
class TaskKind:
    """One kind of model and how it is trained and evaluated.

    Attributes:
        name: the ``task:`` of an experiment config (``mt``, ``lm``, ``mlm``).
        config, model: the model config class and the model class.
        training: ``training(model, label_smoothing, request)`` → the :class:`Task` giving its loss.
        parallel: needs a parallel dataset (source and target text).
        translates: decodes translations (BLEU and chrF while training and at evaluation).
        attention_analysis: evaluation reads its supervised heads and attention distributions.
        evaluate: ``evaluate(model, batch)`` → the model output with attentions (evaluation hook).
    """

    name: str
    config: type
    model: type
    training: Callable[[nn.Module, float, SyntaxRequest], Task]
    parallel: bool = False
    translates: bool = False
    attention_analysis: bool = True
    evaluate: Callable[[nn.Module, Batch], Any] | None = None

    def vocab_sizes(self, sizes: dict[str, int]) -> dict[str, int]:
        """The model's vocabulary-size keys from a dataset manifest's ``vocab_size`` (by side)."""
        if self.parallel:
            return {"src_vocab_size": sizes["src"], "tgt_vocab_size": sizes["tgt"]}
        return {"vocab_size": sizes["src"]}

    def data_sides(self, request: SyntaxRequest) -> tuple[tuple[str, frozenset[str]], ...]:
        """The syntax the model needs from each side's trees: a monolingual model reads the source
        trees for both of its request's sides (a language model's hints come from them)."""
        if self.parallel:
            return (("src", request.src), ("tgt", request.tgt))
        return (("src", request.src | request.tgt),)


TASK_KINDS: dict[str, TaskKind] = {}
"""The registered kinds by name."""


def register_task(kind: TaskKind) -> TaskKind:
    """Registers ``kind`` under its name (a name is registered once)."""
    if kind.name in TASK_KINDS:
        raise ValueError(f"task {kind.name!r} is registered twice")
    TASK_KINDS[kind.name] = kind
    return kind


def task_kind(name: str) -> TaskKind:
    """The kind called ``name`` (``KeyError`` listing the known ones)."""
    if name not in TASK_KINDS:
        raise KeyError(f"task {name!r}: expected one of {', '.join(TASK_KINDS)}")
    return TASK_KINDS[name]


def kind_of(model_or_config: Any) -> TaskKind:
    """The kind of a model or model config (by class; a wrapped DDP model is unwrapped)."""
    obj = getattr(model_or_config, "module", model_or_config)
    config = getattr(obj, "config", obj)
    for kind in TASK_KINDS.values():
        if isinstance(config, kind.config):
            return kind
    raise TypeError(f"no task for {type(obj).__name__}; build one by hand (see synattn.train.tasks)")


def task_for(model: nn.Module, label_smoothing: float = 0.1) -> Task:
    """The task that trains a ``synattn.models`` model, with the syntax its config needs (or another
    library's model, with that library's task: :mod:`synattn.train.libraries`).

    ``label_smoothing`` applies to translation; the language-model tasks train on plain
    cross-entropy (their perplexity is the usual measure) unless a task is built by hand.
    """
    if (library := library_of_model(model)) is not None:  # another library's model
        return library.task(model)
    kind = kind_of(model)  # TypeError for a model of no registered kind
    config = cast(PretrainedModel, model).config  # (a registered kind's model)
    if config.pad_id != PAD:
        raise ValueError(f"model pad_id={config.pad_id}, but prepared data pads with {PAD}")
    return kind.training(model, label_smoothing, syntax_request_for(config))


register_task(TaskKind(
    "mt", EncoderDecoderConfig, EncoderDecoderTransformer,
    lambda model, smoothing, request: TranslationTask(smoothing, request),
    parallel=True, translates=True,
    evaluate=lambda model, batch: model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax,
                                        tgt_syntax=batch.tgt_syntax, need_weights=True)))
register_task(TaskKind(
    "lm", LanguageModelConfig, TransformerLM,
    lambda model, smoothing, request: LanguageModelTask(request=request),
    attention_analysis=False))
def _masked_lm_task(model: nn.Module, smoothing: float, request: SyntaxRequest) -> Task:
    config = cast(MaskedLMConfig, model.config)  # (a MaskedLM's)
    return MaskedLMTask(config.mask_id, config.vocab_size, request=request)


register_task(TaskKind(
    "mlm", MaskedLMConfig, MaskedLM, _masked_lm_task,
    evaluate=lambda model, batch: model(batch.src, syntax=batch.src_syntax, need_weights=True)))
