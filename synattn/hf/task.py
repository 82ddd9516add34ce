"""``synattn train`` / ``synattn evaluate`` with a ``transformers`` model: masked LM on a prepared
dataset, with synattn features attached.

An experiment of task ``mlm`` whose model section has a ``transformers`` key::

    task: mlm
    data: data/ewt                  # synattn prepare with CoNLL-U trees (for a supervised head)
    model:
      transformers:                 # a transformers config (model_type + its keys), or the path
        model_type: bert            # of a local model directory (config.json; its
        hidden_size: 256            # model.safetensors too, when there, is loaded)
        num_hidden_layers: 4
        num_attention_heads: 4
        intermediate_size: 1024
      features:                     # synattn.hf feature specs (encoder side)
        - {feature: supervised_head, layers: [2], head: 0, weight: 1.0}

The model is ``AutoModelForMaskedLM`` of that config with the dataset's vocabulary (its size,
``pad``/``bos``/``eos`` ids; ``<mask>`` is id 4 of every synattn tokenizer), the features attached
by :func:`synattn.hf.attach`. A batch feeds the dataset's pieces as ``input_ids`` and the syntax
fields the features read as ``syntax_*``; the loss is BERT's masked-LM cross-entropy plus the
features' auxiliary losses (:class:`HFMaskedLMTask`). Checkpoints are ``save_pretrained``
directories (``synattn.hf.from_pretrained`` loads one); ``synattn evaluate`` reports the masked
perplexity, each supervised head's word-level UAS against the split's trees and every head's
agreement with the subword tree (:func:`synattn.evaluate.hf_model.evaluate_hf`).

The core calls this module through the hooks it registers (:mod:`synattn.train.libraries`):
``ExperimentConfig`` and ``build_model`` (synattn/train/experiment.py), ``task_for`` (synattn/train/kinds.py),
``load_run`` (synattn/evaluate/runner.py); ``evaluate_run`` evaluates with synattn/evaluate/hf_model.py.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from synattn.data.batching import Batch
from synattn.data.subwords import BOS, EOS, MASK, PAD
from synattn.errors import ConfigError
from synattn.hf.features import FEATURES, normalize_specs
from synattn.hf.model import HFModel, from_pretrained, transformers_bars_off
from synattn.syntax.fields import syntax_field
from synattn.syntax.inputs import IGNORE_INDEX
from synattn.syntax.request import SyntaxRequest
from synattn.train.libraries import ModelLibrary, register_library

KEY = "transformers"
SECTION = ("transformers", "features", "mlm", "freeze")
"""Keys of an experiment's model section for a ``transformers`` model: the model, its synattn
features, whether the masked-LM loss trains (``mlm``, default true; false: only the features'
losses, on unmasked input) and whether the model's own weights are frozen (``freeze``, default
false: only synattn's added weights train)."""
TEXT = "synattn_text"
"""Config attribute of a model that reads its own tokenizer's pieces (a pretrained model):
``{"tokenizer": packaged name or folder, "mlm": bool, "freeze": bool}``."""


def _auto():
    from transformers import AutoConfig, AutoModelForMaskedLM
    return AutoConfig, AutoModelForMaskedLM


def pretrained_source(value: Any) -> Path | None:
    """The folder of ``model.transformers`` when it names a pretrained model that reads its own
    tokenizer's pieces: a model synattn installs offline (``all-MiniLM-L6-v2``,
    :mod:`synattn.hf.pretrained`) or a folder with weights and a fast tokenizer
    (``tokenizer.json``); None otherwise (a config dict, or a folder written by an earlier run on
    the dataset's own vocabulary)."""
    from synattn.errors import MissingDependencyError
    from synattn.hf.pretrained import model_folder, packaged_name

    if not isinstance(value, str):
        return None
    if packaged_name(value) is not None:
        try:
            return model_folder(value)
        except MissingDependencyError as err:
            raise ConfigError(f"model.transformers: {err}") from None
    folder = Path(value)
    return folder if _has_weights(folder) and (folder / "tokenizer.json").is_file() else None


def _base_config(value: Any):
    """The ``transformers`` config of ``model.transformers`` (a dict, a local directory or a model
    synattn installs offline)."""
    auto_config, _ = _auto()
    if isinstance(value, str):
        folder = pretrained_source(value) or Path(value)
        if not (folder / "config.json").is_file():
            raise ConfigError(f"model.transformers: {value} is not a model directory (no config.json) nor a "
                              "model synattn installs offline (all-MiniLM-L6-v2); give one of those or a "
                              "config dict (no hub access)")
        try:
            return auto_config.from_pretrained(folder)
        except (ValueError, OSError) as err:
            raise ConfigError(f"model.transformers: cannot read {folder / 'config.json'}: {err}") from None
    if not isinstance(value, dict) or not isinstance(value.get("model_type"), str):
        raise ConfigError("model.transformers: expected a config dict with a model_type "
                          f"(e.g. {{model_type: bert, hidden_size: 256}}) or a directory, got {value!r}")
    options = {k: v for k, v in value.items() if k != "model_type"}
    try:
        default = auto_config.for_model(value["model_type"])
    except ValueError as err:
        raise ConfigError(f"model.transformers: {' '.join(str(err).split())[:300]}") from None
    # transformers configs keep any unknown key as an attribute: a misspelt one would be ignored
    # and the default used, so each key must be one the model type knows
    known = set(default.to_dict())
    unknown = sorted(k for k in options if k not in known and not hasattr(default, k))
    if unknown:
        hints = [f"model.transformers.{k}" + (f" (did you mean {close[0]}?)" if close else "")
                 for k in unknown for close in [difflib.get_close_matches(k, sorted(known), 1)]]
        raise ConfigError(f"unknown key(s) {', '.join(hints)}: not a setting of a {value['model_type']} config")
    try:
        return auto_config.for_model(value["model_type"], **options)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"model.transformers: {' '.join(str(err).split())[:300]}") from None


def model_config(exp, manifest: dict, labels: dict[str, list[str]], placeholder: bool = False):
    """The ``transformers`` config of ``exp`` with the dataset's vocabulary and the synattn features
    (``config.synattn``); every mistake is a :class:`ConfigError` naming the ``model.`` key."""
    section = exp.model
    unknown = sorted(set(section) - set(SECTION))
    if unknown:
        raise ConfigError(f"unknown key(s) model.{', model.'.join(unknown)}: a transformers model "
                          f"section has {', '.join(SECTION)}")
    from synattn.models import MaskedLM

    if not issubclass(exp.kind.model, MaskedLM):
        raise ConfigError(f"model.transformers: task {exp.task} cannot train a transformers model; "
                          "use task mlm")
    config = _base_config(section[KEY])
    _, auto_mlm = _auto()
    if type(config) not in auto_mlm._model_mapping:
        raise ConfigError(f"model.transformers: model_type {config.model_type} has no masked-LM "
                          "model in transformers")
    for key in ("mlm", "freeze"):
        if not isinstance(section.get(key, key == "mlm"), bool):
            raise ConfigError(f"model.{key}: expected true or false, got {section[key]!r:.60}")
    pretrained = pretrained_source(section[KEY])
    if pretrained is not None:  # its own tokenizer: the dataset's words are read in its pieces
        setattr(config, TEXT, {"tokenizer": section[KEY] if _packaged(section[KEY]) else str(pretrained.resolve()),
                               "mlm": section.get("mlm", True), "freeze": section.get("freeze", False)})
        config.synattn = features(section.get("features", []), labels, placeholder)
        if not section.get("mlm", True) and not any(spec["feature"] == "supervised_head" for spec in config.synattn):
            raise ConfigError("model.mlm: false leaves only the features' losses to train, but no feature has one "
                              "(add a supervised_head, or set mlm: true)")
        syntax_request(config)
        _trial_build(config)
        return config
    if "mlm" in section or "freeze" in section:
        raise ConfigError("model.mlm / model.freeze: only for a pretrained model that reads its own tokenizer's "
                          "pieces (all-MiniLM-L6-v2, or a folder with weights and tokenizer.json)")
    vocab = manifest["vocab_size"]["src"]
    if isinstance(section[KEY], str) and not placeholder and _has_weights(section[KEY]) \
            and config.vocab_size != vocab:
        raise ConfigError(f"model.transformers: the model in {section[KEY]} has {config.vocab_size} "
                          f"pieces but data {exp.data} has {vocab} (its weights need its own vocabulary)")
    if isinstance(section[KEY], dict) and "vocab_size" in section[KEY] and not placeholder \
            and section[KEY]["vocab_size"] != vocab:
        raise ConfigError(f"model.transformers.vocab_size={section[KEY]['vocab_size']} differs from the "
                          f"dataset's {vocab} (leave it out: it is read from the data)")
    config.vocab_size = vocab
    config.pad_token_id, config.bos_token_id, config.eos_token_id = PAD, BOS, EOS
    config.synattn = features(section.get("features", []), labels, placeholder)
    syntax_request(config)  # one max_distance / max_traversal
    _trial_build(config)
    return config


def _trial_build(config) -> None:
    """Builds the model of ``config`` on the meta device (no memory, no weights) with its features
    attached, so that a value the model cannot be built with (``hidden_act: nonsense``) or a feature
    that does not fit it (a layer or head it lacks) is a :class:`ConfigError` before any data is
    read or any run folder written."""
    from synattn.hf.model import attach

    _, auto_mlm = _auto()
    trial = copy.deepcopy(config)
    specs = trial.synattn
    del trial.synattn
    trial.__dict__.pop(TEXT, None)
    try:
        with torch.device("meta"):
            model = auto_mlm.from_config(trial)
    except Exception as err:  # noqa: BLE001 - transformers raises KeyError, ValueError, ... for a bad value
        raise ConfigError(f"model.transformers: cannot build a {trial.model_type} model with these settings "
                          f"({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None
    try:
        attach(model, specs)
    except ValueError as err:
        raise ConfigError(f"model.features: {err}") from None


def features(specs: Any, labels: dict[str, list[str]], placeholder: bool) -> list[dict[str, Any]]:
    """Normalized feature specs of ``model.features`` (encoder side; specialized heads get their
    ``num_labels`` from the dataset's label vocabulary when not given)."""
    try:
        specs = normalize_specs(specs)
    except ValueError as err:
        raise ConfigError(f"model.features: {err}") from None
    for i, spec in enumerate(specs):
        if spec["side"] != "encoder":
            raise ConfigError(f"model.features: synattn feature #{i} ({spec['feature']}) goes into the "
                              f"{spec['side']} side; a masked LM has only encoder self-attention")
        if spec["feature"] == "specialized_heads" and spec["num_labels"] is None:
            names = labels.get("src_upos" if spec["source"] == "pos" else "src_deprels", [])
            if not names and not placeholder:
                raise ConfigError(f"model.features: synattn feature #{i} (specialized_heads) reads "
                                  f"{spec['source']} labels, which the dataset has none of")
            spec["num_labels"] = max(len(names), 1)
    return specs


def syntax_request(config) -> SyntaxRequest:
    """The syntax fields the features of ``config.synattn`` read from a batch."""
    fields: set[str] = set()
    clips: dict[str, int] = {}
    for spec in getattr(config, "synattn", None) or []:
        read = FEATURES[spec["feature"]].reads(spec)
        fields |= read
        for field in sorted(read):  # a field's setting (max_distance) has one value per batch
            clip = syntax_field(field).setting
            if clip is not None and clip in spec and clips.setdefault(clip, spec[clip]) != spec[clip]:
                raise ConfigError(f"model.features: two entries reading {field} use {clip} "
                                  f"{clips[clip]} and {spec[clip]}, but a batch has one; use the same value")
    return SyntaxRequest(src=frozenset(fields), settings=clips)


def _packaged(value: str) -> bool:
    from synattn.hf.pretrained import packaged_name

    return packaged_name(value) is not None


def _has_weights(folder: str | Path) -> bool:
    return any((Path(folder) / name).is_file()
               for name in ("model.safetensors", "model.safetensors.index.json"))


def build_model(exp) -> nn.Module:
    """A new masked-LM model of ``exp``: the directory's weights when it has them, else random."""
    manifest, labels = exp.check_data()
    config = exp.model_config(manifest, labels)
    _, auto_mlm = _auto()
    source = exp.model[KEY]
    folder = pretrained_source(source)
    if folder is not None:
        model = from_pretrained(model_class(config), str(folder), config=config)
        freeze_pretrained(model)
        return model
    if isinstance(source, str) and _has_weights(source):
        return from_pretrained(auto_mlm, source, config=config)
    return from_pretrained_config(config)


def freeze_pretrained(model: HFModel) -> None:
    """With ``model.freeze``, only synattn's added weights (``model.synattn``) train."""
    if (getattr(model.config, TEXT, None) or {}).get("freeze"):
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name.startswith("synattn."))


def model_class(config):
    """``AutoModelForMaskedLM``, or ``AutoModel`` for a pretrained model trained without the
    masked-LM loss (``mlm: false``: no vocabulary projection is computed)."""
    from transformers import AutoModel

    text = getattr(config, TEXT, None)
    return AutoModel if text is not None and not text.get("mlm", True) else _auto()[1]


def text_of(model: HFModel) -> dict | None:
    """The ``synattn_text`` settings of a model that reads its own tokenizer's pieces, or None."""
    return getattr(model.config, TEXT, None)


def from_pretrained_config(config) -> nn.Module:
    """A random ``AutoModelForMaskedLM`` of ``config`` with the features of ``config.synattn``."""
    from synattn.hf.model import attach

    _, auto_mlm = _auto()
    specs = config.synattn
    del config.synattn
    model = auto_mlm.from_config(config)
    attach(model, specs)
    return model


def syntax_kwargs(syntax) -> dict[str, Tensor]:
    """``syntax_<field>`` keyword arguments of a batch's :class:`SyntaxInputs` (or None)."""
    return {} if syntax is None else {f"syntax_{k}": v for k, v in syntax.present().items()}


class HFMaskedLMTask:
    """BERT's masked LM (:func:`synattn.train.tasks.mask_tokens`) for a ``transformers`` model,
    plus the auxiliary losses of its synattn features (``outputs.synattn_losses``).

    A pretrained model that reads its own tokenizer's pieces (``config.synattn_text``, see
    :func:`pretrained_source`) gets the dataset through that tokenizer
    (:meth:`wrap_dataset`, :func:`synattn.hf.retokenize.collate_pretrained`: ``[CLS] x [SEP]``)
    and masks with its ``[MASK]``; with ``mlm: false`` its inputs are not masked and only the
    features' losses train (summed over the words that have a head target, so the logged loss is
    their mean per word).

    Args:
        model: the model (its ``config`` gives the vocabulary and the features' syntax).
        prob: share of the pieces chosen (0.15).
    """

    def __init__(self, model: HFModel, prob: float = 0.15):
        self.vocab_size, self.prob = model.config.vocab_size, prob
        self.request = syntax_request(model.config)
        self.text = text_of(model)
        self.ids = None
        self.max_length = getattr(model.config, "max_position_embeddings", 512)
        if self.text is not None:
            from synattn.hf.retokenize import TokenIds

            self.tokenizer = tokenizer_of(self.text["tokenizer"])
            self.ids = TokenIds(self.tokenizer)
            if not self.text.get("mlm", True):  # the loss is summed over the words with a head target
                self.request = replace(self.request, src=self.request.src | {"head_targets"})

    def syntax_request(self) -> SyntaxRequest:
        return self.request

    def wrap_dataset(self, dataset):
        """``dataset`` as this model reads it: through its own tokenizer for a pretrained model
        (:class:`synattn.hf.retokenize.RetokenizedDataset`), else unchanged."""
        if self.ids is None or dataset is None:
            return dataset
        from synattn.hf.retokenize import RetokenizedDataset

        return RetokenizedDataset(dataset, self.tokenizer, self.max_length)

    @property
    def collate(self):
        """The collate function of :meth:`wrap_dataset`'s datasets."""
        from synattn.data.batching import collate
        from synattn.hf.retokenize import collate_pretrained

        return collate if self.ids is None else collate_pretrained

    def forward(self, model: HFModel, inputs: Tensor, batch: Batch, **kwargs: Any):
        return model(input_ids=inputs, attention_mask=(~batch.src_padding).long(),
                     **syntax_kwargs(batch.src_syntax), **kwargs)

    def loss(self, model: HFModel, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        from types import SimpleNamespace

        from synattn.train.tasks import label_smoothed_nll, loss_and_logs, mask_tokens

        tokens = batch.src  # [B, n]
        if self.text is not None and not self.text.get("mlm", True):
            out = self.forward(model, tokens, batch)
            syntax = batch.src_syntax
            assert syntax is not None and syntax.head_targets is not None  # (requested: see syntax_request)
            words = (syntax.head_targets >= 0).sum()  # the words that have a head
            losses = getattr(out, "synattn_losses", {})
            if not losses:
                raise ValueError("model.mlm is false but no feature has a loss: nothing would train "
                                 "(add a supervised_head, or set mlm: true)")
            features = words.float() * torch.stack([v.float() for v in losses.values()]).sum()
            loss, logs = loss_and_logs(features, features, words, tokens.shape[0], SimpleNamespace(losses={}))
            logs.update({f"aux/{name}": words.float() * v.detach().float() for name, v in losses.items()})
            return loss, logs
        if self.ids is None:
            mask_id, maskable = MASK, ~batch.src_padding & (tokens != EOS) & (tokens != BOS)
        else:
            special = torch.as_tensor(self.ids.special, device=tokens.device)
            mask_id, maskable = self.ids.mask, ~batch.src_padding & ~torch.isin(tokens, special)
        inputs, target = mask_tokens(tokens, maskable, mask_id, self.vocab_size, self.prob)
        out = self.forward(model, inputs, batch)
        chosen = target != IGNORE_INDEX  # [B, n]
        loss, nll = label_smoothed_nll(out.logits[chosen], target[chosen], 0.0)
        losses = getattr(out, "synattn_losses", {})
        return loss_and_logs(loss, nll, chosen.sum(), tokens.shape[0], SimpleNamespace(losses=losses))


def tokenizer_of(source: str):
    """The fast tokenizer of a packaged model's name or a model folder."""
    from transformers import AutoTokenizer

    from synattn.hf.pretrained import model_folder

    return AutoTokenizer.from_pretrained(model_folder(source))


def load_checkpoint(folder: str | Path) -> nn.Module:
    """The model of a checkpoint written by ``synattn train`` (features included): a masked LM, or
    the encoder alone for a pretrained model trained with ``mlm: false``."""
    auto_config, _ = _auto()
    config = auto_config.from_pretrained(str(folder))
    model = from_pretrained(model_class(config), str(folder), config=config)
    freeze_pretrained(model)
    return model


def save_checkpoint_weights(model: HFModel, folder: Path) -> None:
    """``save_pretrained`` into a checkpoint folder, without ``transformers``' "Writing model
    shards" bar (a run writes a checkpoint every few hundred updates; its log says so)."""
    with transformers_bars_off():
        model.save_pretrained(folder)


register_library(ModelLibrary(KEY, model_config, syntax_request, build_model, HFMaskedLMTask, load_checkpoint,
                              save=save_checkpoint_weights))
