"""Attaching synattn features to a ``transformers`` model, and loading a model that has them.

:func:`attach` adds one submodule, ``model.synattn`` (:class:`SynattnModule`), holding the added
parameters under their own names (``synattn.encoder_2.features.0.key_table``): the model's own
weights keep theirs. It writes the features into ``model.config.synattn`` (so that
``save_pretrained`` saves them in ``config.json`` and the added weights in the same safetensors
file as the model's) and switches the model to the ``"synattn"`` attention implementation.

Two forward hooks of the model (PyTorch's own extension points) carry one forward's state:

- before: the ``syntax_*`` (and ``decoder_syntax_*``) inputs of the batch become one
  :class:`~synattn.hf.attention.SynattnCall`, passed as keyword ``synattn_call``; the model's
  forward hands it down to the attention function;
- after: the auxiliary losses are added to ``outputs.loss`` (or become it when the model computed
  no loss) and exposed as ``outputs.synattn_losses``; the supervised heads' log-distributions as
  ``outputs.synattn_head_log_probs``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from transformers.utils import ModelOutput

from synattn.hf.attention import IMPLEMENTATION, SITE_ATTRIBUTE, SiteAttention, SynattnCall
from synattn.hf.features import FEATURES, SIDES, check_spec, normalize_specs, spec_options
from synattn.hf.sites import find_sites
from synattn.methods.constituent import ConstituentAttention, recorded_links
from synattn.syntax.fields import is_field, syntax_fields
from synattn.syntax.inputs import SyntaxInputs

HFModel = Any
"""A ``transformers`` model: its config, its methods (``generate``, ``get_encoder``, ...) and the
submodule ``synattn`` that :func:`attach` adds are read by name, which ``nn.Module``'s types do not
declare."""

logger = logging.getLogger(__name__)

SYNTAX_FIELDS = tuple(f.name for f in syntax_fields())
"""Names of the built-in syntax inputs: ``syntax_<field>`` (the syntax of ``input_ids``) and
``decoder_syntax_<field>`` (of ``decoder_input_ids``); any field registered later
(:mod:`synattn.syntax.fields`) is accepted too."""


class SynattnModule(nn.Module):
    """The added parameters of a model, one :class:`SiteAttention` per attention with features.

    Attributes:
        input_side: the side of ``input_ids``: ``"encoder"``, or ``"decoder"`` for a
            decoder-only model.
        last_call: the :class:`SynattnCall` of the latest forward (its losses and head
            distributions), also for models called with ``return_dict=False``; it keeps them
            (and, until the next forward, the autograd graph behind the losses) alive.
        standing_syntax: syntax by side used by every forward that is given none, set for the
            duration of ``generate`` by :func:`synattn.hf.use_syntax` (None: none).
        last_links: the Tree Transformer link probabilities of the latest forward that ran the
            constituent layers (the model's or, in ``generate``, its encoder's alone), read by
            :meth:`constituent_links`; the layers themselves read theirs from the forward's
            ``SynattnCall.carry``.
    """

    def __init__(self, input_side: str):
        super().__init__()
        self.input_side = input_side
        self.last_call: SynattnCall | None = None
        self.standing_syntax: dict[str, SyntaxInputs] | None = None
        self.last_links: Tensor | None = None

    def sites(self) -> dict[str, SiteAttention]:
        """The attention sites with features, by key (``"encoder_0"``)."""
        return {name: child for name, child in self.named_children()
                if isinstance(child, SiteAttention)}

    def constituent_links(self) -> Tensor:
        """The Tree Transformer link probabilities ``[batch_size, layers, n − 1]`` of the latest
        forward (for :func:`synattn.trees.induce.induce_trees`)."""
        if not any(isinstance(f, ConstituentAttention) for site in self.sites().values()
                   for f in site.features):
            raise ValueError("this model has no constituent feature")
        if self.last_links is None:
            raise ValueError("no constituent layer has run yet")
        return self.last_links

    def record(self, call: SynattnCall) -> None:
        """Keeps the link probabilities of a finished forward's ``call`` (when it has some)."""
        for side in SIDES:
            links = recorded_links(call.carry.get(side))
            if links is not None:
                self.last_links = links


def attach(model: HFModel, features: list[dict[str, Any]]) -> SynattnModule:
    """Adds synattn features to a loaded ``transformers`` model, in place.

    Args:
        model: a BERT/RoBERTa, GPT-2, BART or T5 model (any task head).
        features: feature specs (see :mod:`synattn.hf.features`), e.g.
            ``[{"feature": "supervised_head", "layers": [1], "head": 0}]``; an empty list
            attaches nothing (the model computes exactly what it computed before).

    Returns:
        ``model.synattn``.

    Example:
        >>> from transformers import BertConfig, BertModel
        >>> model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2,
        ...                              num_attention_heads=4, intermediate_size=64))
        >>> _ = attach(model, [{"feature": "supervised_head", "layers": [1]}])
        >>> [name for name, _ in model.synattn.named_parameters()]
        ['encoder_1.features.0.bilinear', 'encoder_1.features.0.key_bias']
    """
    if "synattn" in getattr(model, "_modules", ()):
        raise ValueError(f"{type(model).__name__} already has synattn features")
    specs = normalize_specs(features)
    sites = find_sites(model)
    by_side: dict[str, dict[int, Any]] = {side: {} for side in SIDES}
    for name, module, site in sites:
        by_side[site.side][site.layer] = (name, module, site)
    input_side = "encoder" if by_side["encoder"] else "decoder"
    holder = SynattnModule(input_side)
    shared: dict[str, dict[str, Any]] = {side: {} for side in SIDES}
    chosen: dict[tuple[str, int], list[tuple[int, dict[str, Any]]]] = {}
    for i, spec in enumerate(specs):
        side, available = spec["side"], by_side[spec["side"]]
        if not available:
            raise ValueError(f"synattn feature #{i} ({spec['feature']}): {type(model).__name__} "
                             f"has no {side} attention")
        layers = sorted(available) if spec["layers"] is None else spec["layers"]
        missing = [x for x in layers if x not in available]
        if missing:
            raise ValueError(f"synattn feature #{i} ({spec['feature']}): {side} layer(s) {missing} "
                             f"do not exist; the model has {side} layers 0..{max(available)}")
        for layer in layers:
            check_spec(spec, by_side[side][layer][2].heads, max(available) + 1, layer, f"synattn feature #{i}")
            chosen.setdefault((side, layer), []).append((i, spec))
    parameter = next(model.parameters(), None)
    for (side, layer) in sorted(chosen, key=lambda k: (SIDES.index(k[0]), k[1])):
        name, module, site = by_side[side][layer]
        kinds = [FEATURES[spec["feature"]] for _, spec in chosen[(side, layer)]]
        built = [feature for kind, (_, spec) in zip(kinds, chosen[(side, layer)])
                 for feature in kind.build(site, spec_options(spec), shared[side])]
        runner = SiteAttention(site, built, any(feature.reads_hidden for feature in built))
        if parameter is not None and parameter.device.type != "meta":
            runner.to(device=parameter.device, dtype=parameter.dtype)
        holder.add_module(site.key, runner)
        module.__dict__[SITE_ATTRIBUTE] = runner  # a plain attribute: not a child module
        if runner.reads_hidden:
            module.register_forward_pre_hook(_capture_hidden(site.key), with_kwargs=True)
    holder.train(model.training)  # new modules follow the model's train/eval mode
    model.add_module("synattn", holder)
    model.config.synattn = specs
    model.register_forward_pre_hook(_start_call, with_kwargs=True)
    model.register_forward_hook(_finish_call, with_kwargs=True)
    encoder = _separate_encoder(model)
    if encoder is not None:  # generate() runs the encoder on its own, without the model's hooks
        encoder.register_forward_pre_hook(_start_encoder_call(holder), with_kwargs=True)
        encoder.register_forward_hook(_finish_encoder_call(holder), with_kwargs=True)
    if model.config._attn_implementation != IMPLEMENTATION:
        model.set_attn_implementation(IMPLEMENTATION)
    return holder


def _capture_hidden(key: str):
    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        call = kwargs.get("synattn_call")
        if call is not None:
            call.hidden[key] = args[0] if args else kwargs["hidden_states"]
    return hook


def syntax_from_inputs(inputs: dict[str, Any], input_side: str) -> dict[str, SyntaxInputs]:
    """Pops the ``syntax_*`` / ``decoder_syntax_*`` entries of ``inputs``; returns them by side.

    Raises:
        ValueError: an entry starts with ``syntax_`` or ``decoder_syntax_`` but names no field.
    """
    syntax = {}
    for prefix, side in (("syntax_", input_side), ("decoder_syntax_", "decoder")):
        keys = [k for k in inputs if k.startswith(prefix)]
        unknown = [k for k in keys if not is_field(k[len(prefix):])]
        if unknown:
            raise ValueError(f"unknown syntax input(s) {unknown}; use {prefix}<field> with field "
                             f"one of {[f.name for f in syntax_fields()]}")
        if keys:
            values = {k[len(prefix):]: inputs.pop(k) for k in keys}
            syntax[side] = SyntaxInputs(**{k: v for k, v in values.items() if v is not None})
    return syntax


def _separate_encoder(model: HFModel) -> nn.Module | None:
    """The encoder submodule of an encoder-decoder model (None for other models)."""
    if not getattr(model.config, "is_encoder_decoder", False) or not hasattr(model, "get_encoder"):
        return None
    encoder = model.get_encoder()
    return None if encoder is model else encoder


def _need_weights(model: HFModel, kwargs: dict) -> bool:
    need = kwargs.get("output_attentions")
    return bool(getattr(model.config, "output_attentions", False) if need is None else need)


def _start_call(model: HFModel, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if kwargs.get("synattn_call") is None:
        syntax = syntax_from_inputs(kwargs, model.synattn.input_side)
        if not syntax and model.synattn.standing_syntax is not None:
            syntax = dict(model.synattn.standing_syntax)
        kwargs["synattn_call"] = SynattnCall(syntax, need_weights=_need_weights(model, kwargs))
    return args, kwargs


def _start_encoder_call(holder: SynattnModule):
    """Pre-hook of the encoder of an encoder-decoder model: a call of its own when the encoder
    runs alone (``generate`` encodes the source once), with the standing syntax."""
    def hook(encoder: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if kwargs.get("synattn_call") is None:
            standing = holder.standing_syntax or {}
            syntax = {"encoder": standing["encoder"]} if "encoder" in standing else {}
            kwargs["synattn_call"] = SynattnCall(syntax, need_weights=_need_weights(encoder, kwargs))
        return args, kwargs
    return hook


def _finish_encoder_call(holder: SynattnModule):
    """Forward hook of the encoder of an encoder-decoder model: keeps its links."""
    def hook(encoder: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        call = kwargs.get("synattn_call")
        if call is not None:
            holder.record(call)
    return hook


def _finish_call(model: HFModel, args: tuple, kwargs: dict, output: Any) -> Any:
    call: SynattnCall = kwargs["synattn_call"]
    call.hidden.clear()  # not kept beyond the forward (a checkpointed layer captures it again)
    model.synattn.last_call = call  # call.carry stays: a checkpointed layer's recomputation reads it
    model.synattn.record(call)
    _check_gradients(model, call)
    if not isinstance(output, ModelOutput):
        return output
    if call.losses:
        total = torch.stack([loss.float() for loss in call.losses.values()]).sum()
        if output.get("loss") is not None:
            output["loss"] = output["loss"] + total.to(output["loss"].dtype)
        elif "loss" in output.__dataclass_fields__:  # type: ignore[attr-defined]  # (its subclasses are dataclasses)
            output = type(output)(**{**dict(output), "loss": total})  # loss stays the first field
    output.synattn_losses = call.losses
    output.synattn_head_log_probs = call.head_log_probs
    return output


def _check_gradients(model: nn.Module, call: SynattnCall) -> None:
    """Refuses auxiliary losses cut off from autograd while the model trains: reentrant
    activation checkpointing (``use_reentrant=True``) runs each layer under ``no_grad``, so a loss
    computed inside a layer would silently train nothing."""
    if not (model.training and torch.is_grad_enabled() and call.losses):
        return
    dead = [key for key, loss in call.losses.items() if not loss.requires_grad]
    if dead and any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"the auxiliary loss(es) {dead} have no gradient: with gradient "
                         "checkpointing, synattn features need use_reentrant=False (the default; "
                         "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs="
                         "{'use_reentrant': False}))")


_WITH_FEATURES: dict[type, type] = {}


def with_features(cls: type[Any]) -> type[Any]:
    """A subclass of the ``transformers`` model class ``cls`` whose ``__init__`` attaches the
    features named in ``config.synattn``, so that ``from_pretrained`` finds every saved weight a
    home (same class name and module, so saved configs name ``cls``)."""
    if cls not in _WITH_FEATURES:
        def __init__(self: HFModel, config: Any, *args: Any, **kwargs: Any) -> None:
            cls.__init__(self, config, *args, **kwargs)
            specs = getattr(config, "synattn", None)
            if specs is not None:
                # from_pretrained builds the model on the meta device and materialises only the
                # weights it loads or initialises itself: the features' own parameters (a
                # supervised head's U, a relation table) are made here, on the CPU, with their own
                # initialisation, so a checkpoint without them (a pretrained model given new
                # features) does not leave them uninitialised
                on_meta = next(self.parameters(), torch.empty(0)).is_meta
                with torch.device("cpu") if on_meta else contextlib.nullcontext():
                    attach(self, specs)
                for module in self.synattn.modules():
                    own = {name: p.detach().clone() for name, p in module.named_parameters(recurse=False)}
                    if own:
                        module._synattn_initial = own  # what _init_weights restores

        def _init_weights(self: nn.Module, module: nn.Module) -> None:
            # transformers replaces the weights a checkpoint lacks with empty tensors, then calls
            # _init_weights on their modules: the features' parameters get their own initial values
            initial = getattr(module, "_synattn_initial", None)
            if initial is None:
                cls._init_weights(self, module)
                return
            with torch.no_grad():
                for name, value in initial.items():
                    parameter = getattr(module, name)
                    if not getattr(parameter, "_is_hf_initialized", False):  # not loaded from the checkpoint
                        parameter.copy_(value)

        def _adjust_missing_and_unexpected_keys(self: HFModel, loading_info: Any) -> None:
            # a pretrained checkpoint given new features lacks their weights: expected, so they
            # leave transformers' load report (which would call them an error to train away) for
            # one line of ours; anything else missing or unexpected is still reported
            cls._adjust_missing_and_unexpected_keys(self, loading_info)
            added = sorted(k for k in loading_info.missing_keys if k.startswith("synattn."))
            self._synattn_added = added
            if added:
                loading_info.missing_keys = set(loading_info.missing_keys) - set(added)
                logger.info("%s", added_line(self, added))

        members: dict[str, Any] = {"__init__": __init__, "_init_weights": _init_weights,
                                   "__module__": cls.__module__, "__qualname__": cls.__qualname__}
        if hasattr(cls, "_adjust_missing_and_unexpected_keys"):  # (transformers 5's step before the report)
            members["_adjust_missing_and_unexpected_keys"] = _adjust_missing_and_unexpected_keys
        _WITH_FEATURES[cls] = type(cls.__name__, (cls,), members)
    return _WITH_FEATURES[cls]


def added_line(model: HFModel, keys: list[str]) -> str:
    """One line for the synattn weights a checkpoint did not hold (``keys``, under ``synattn.``):
    how many, of which features, at which sites (``added 2 tensors of synattn's features, newly
    initialised: SupervisedHead at encoder_4``)."""
    sites: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for key in keys:
        owner = key.rsplit(".", 1)[0]  # synattn.encoder_4.features.0
        try:
            what = type(model.get_submodule(owner)).__name__
        except AttributeError:
            what = "a feature"
        site = owner.split(".")[1] if "." in owner else owner
        if site not in sites.setdefault(what, []):
            sites[what].append(site)
        counts[what] = counts.get(what, 0) + 1
    described = "; ".join(f"{what} at {', '.join(where)}" + (f" ({counts[what]})" if len(sites) > 1 else "")
                          for what, where in sites.items())
    return (f"added {len(keys)} tensor{'s' if len(keys) != 1 else ''} of synattn's features, not in the "
            f"checkpoint, newly initialised: {described}")


@contextlib.contextmanager
def transformers_bars_off() -> Iterator[None]:
    """Within the block, ``transformers`` draws no progress bars ("Loading weights", "Writing
    model shards"): synattn's own output says what it loads and saves. The setting is restored
    after."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def from_pretrained(cls: type[Any], path: str, **kwargs: Any) -> Any:
    """Loads a model saved with synattn features (``model.save_pretrained(path)``).

    Args:
        cls: the model class (``BertForTokenClassification``) or an auto class
            (``AutoModelForTokenClassification``).
        path: a local directory or hub name (any argument ``cls.from_pretrained`` accepts).
        **kwargs: passed to ``from_pretrained`` (``output_loading_info=True`` reports missing and
            unexpected keys, the synattn weights included).

    ``transformers``' load report leaves out the synattn weights the checkpoint lacks (a pretrained
    model given features): those are one ``INFO`` line of the logger ``synattn.hf.model``
    (:func:`added_line`); the report still shows anything else missing or unexpected. No progress
    bar is drawn.

    A checkpoint without ``synattn`` in its config loads as the plain model. A local folder's
    safetensors files are checked first: one that is not safetensors (a pickle under the name) or
    is damaged is an ``InputError`` naming the file.
    """
    from transformers import AutoConfig

    check_weight_files(path)
    config = kwargs.pop("config", None) or AutoConfig.from_pretrained(path)
    if hasattr(cls, "_model_mapping"):  # an auto class: the concrete class of this config
        cls = cls._model_mapping[type(config)]
    with transformers_bars_off():
        if getattr(config, "synattn", None) is None:
            return cls.from_pretrained(path, config=config, **kwargs)
        kwargs.setdefault("attn_implementation", IMPLEMENTATION)
        loaded = with_features(cls).from_pretrained(path, config=config, **kwargs)
    if kwargs.get("output_loading_info"):  # the keys left out of the report are still reported here
        model, info = loaded
        info["missing_keys"] = set(info["missing_keys"]) | set(getattr(model, "_synattn_added", ()))
    return loaded


def check_weight_files(path: object) -> None:
    """Every ``*.safetensors`` file of a local folder ``path`` opens as safetensors (its header is
    read, not its tensors), else ``InputError`` naming the file; hub names and other paths pass."""
    from pathlib import Path

    from safetensors import SafetensorError, safe_open

    from synattn.errors import InputError

    folder = Path(str(path))
    if not folder.is_dir():
        return
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as error:  # a pickle under the name, or a damaged file
            raise InputError(f"not a safetensors file ({' '.join(str(error).split())[:200]})",
                             str(file)) from None
