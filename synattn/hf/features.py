"""Which synattn features can be attached to a Hugging Face model, and how each is built.

A model's features are a list of plain dicts (JSON, stored as ``config.synattn`` so that
``save_pretrained`` writes them into ``config.json``)::

    [{"feature": "relations", "side": "encoder", "layers": [0, 1], "relations": ["tree_distance"]},
     {"feature": "supervised_head", "side": "encoder", "layers": [2], "head": 0, "weight": 1.0}]

``feature`` is a method of :mod:`synattn.methods` and the other keys are the options of that
method's settings, named and checked as in a model config (``relations``, ``max_distance``,
``supervised_head: {head, weight}``), less those that choose layers (``layer``,
``relation_layers``), plus a few that only a Hugging Face model needs (``num_labels`` of
specialized heads, the ``name`` of a loss). ``side`` says which attention of the model the feature
goes into (``"encoder"``: the bidirectional self-attention of an encoder or encoder-decoder;
``"decoder"``: the causal self-attention of a decoder-only model or of the decoder of an
encoder-decoder; ``"cross"``: the decoder's attention to the encoder) and ``layers`` which of its
layers (default: all).

:data:`FEATURES` is the one table from a feature name to how it is built (:class:`HFFeature`);
it is generated from the method registry and each method's adapter (:mod:`synattn.hf.methods`),
so a method added there works here without further code. Older feature names
(``tree_relations``, ``pointer``, ...) are read with a ``FutureWarning`` naming the entry as it is
written now (:data:`ALIASES`).
"""

from __future__ import annotations

import typing
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from synattn.attention.feature import AttentionFeature
from synattn.config_io import check_fields, check_type, from_dict
from synattn.errors import ConfigError, UsageError, brief
from synattn.hf.methods import HFAdapter, HFAlias, adapter
from synattn.limits import check_memory
from synattn.methods import SIDES, Site, methods
from synattn.methods.relations import relation_labels

__all__ = ["ALIASES", "FEATURES", "SIDES", "FeatureKind", "HFAlias", "HFFeature", "Site", "check_spec",
           "normalize_specs", "relation_labels", "spec_options"]


@dataclass(frozen=True)
class HFFeature:
    """A method inside Hugging Face models (:data:`FEATURES` holds one per method).

    An entry's options are its adapter's (:meth:`HFAdapter.options`: the fields of the method's
    settings dataclass, with their defaults, and the adapter's extras): :meth:`settings` checks
    them against the dataclass's types, :meth:`check` with the method's own ``validate``, and
    :meth:`build` builds them with :meth:`HFAdapter.build`. Errors are :class:`ConfigError` naming
    the option (``supervised_head.head=7 is out of range for heads=4``).
    """

    adapter: HFAdapter

    @property
    def method(self) -> Any:
        """The method's spec (:class:`synattn.methods.Method`)."""
        return self.adapter.method

    @property
    def sides(self) -> tuple[str, ...]:
        """The sides an entry may go into."""
        return self.adapter.sides or self.method.sides

    @property
    def defaults(self) -> dict[str, Any]:
        """The options of an entry and their defaults."""
        return {o.name: o.default_value() for o in self.adapter.options()}

    def settings(self, options: dict[str, Any], layer: int = 0) -> Any:
        """The method's settings (an instance of its ``config``) from an entry's ``options``, for
        layer ``layer``; checks the types of the settings and the extras."""
        config, adapter = self.method.config, self.adapter
        assert config is not None  # (an HF feature is a method with settings)
        hints = typing.get_type_hints(config)
        data = {k: v for k, v in options.items() if k in hints}
        for key in set(adapter.layer_keys) & set(hints):
            data[key] = layer if hints[key] is int else None
        settings: Any = from_dict(config, {**data, **adapter.fixed})
        check_fields(settings)
        for option in adapter.extras:
            value = options.get(option.name, option.default_value())
            check_type(option.type, value, option.name)
            if option.minimum is not None and value is not None and value < option.minimum:
                raise ConfigError(f"{option.name}={brief(value)} must be >= {option.minimum}")
        return settings

    def check(self, options: dict[str, Any], side: str, heads: int, layers: int, layer: int) -> None:
        """Raises :class:`ConfigError` when the entry's ``options`` are wrong at layer ``layer`` of a
        side with ``layers`` layers of ``heads`` heads: types, then the method's own validate."""
        stack = self.adapter.stack(self.settings(options, layer), layers)
        if not self.method.active(stack):
            first = self.adapter.options()[0].name
            raise ConfigError(f"{first}={brief(options.get(first))} leaves {self.method.name} off; "
                              f"set {first}")
        model = SimpleNamespace(heads=heads, num_pos_tags=1, num_deprels=1, model_type="Hugging Face model",
                                has_cross_attention=lambda s: s == "cross")
        self.method.validate(model, side, stack)

    def build(self, site: Site, options: dict[str, Any], shared: dict[str, Any]) -> list[AttentionFeature]:
        """The features of the entry at ``site`` (``shared``: a dict kept for one model and side)."""
        extras = {o.name: options.get(o.name, o.default_value()) for o in self.adapter.extras}
        return self.adapter.build(site, self.settings(options, site.layer), extras, shared)

    def reads(self, options: dict[str, Any]) -> frozenset[str]:
        """The syntax fields an entry with these options reads from a batch."""
        return frozenset(self.method.reads(self.adapter.stack(self.settings(options), 1)))


FeatureKind = HFFeature
"""How one feature is built (:class:`HFFeature`): its options and their defaults, the sides it may
go into, its checks (the method's own ``validate``), its builder and the syntax fields it reads."""

FEATURES: dict[str, FeatureKind] = {
    method.name: HFFeature(adapter(method)) for method in methods() if method.config is not None}
"""Every registered method with settings, under its name, built through its adapter."""

ALIASES: dict[str, tuple[str, HFAlias]] = {
    old: (method.name, alias) for method in methods() for old, alias in adapter(method).aliases.items()}
"""Older feature names: old name -> (the method's name, how an entry is rewritten)."""


def upgrade_spec(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """An entry written with an older feature name, as it is written now (with a ``FutureWarning``)."""
    name = spec.get("feature")
    if not isinstance(name, str) or name not in ALIASES:
        return spec
    feature, alias = ALIASES[name]
    new = alias.upgrade(spec, feature)
    warnings.warn(f"{where}: feature {name!r} is now written {new}; the old name will be removed",
                  FutureWarning, stacklevel=3)
    return new


def normalize_specs(specs: Any) -> list[dict[str, Any]]:
    """Checks feature specs and fills in defaults; returns JSON-ready dicts.

    Raises:
        ValueError: one line naming the entry and the bad key or value.
    """
    if not isinstance(specs, (list, tuple)):
        raise ValueError(f"synattn features must be a list of dicts, got {type(specs).__name__}")
    out = []
    for i, spec in enumerate(specs):
        where = f"synattn feature #{i}"
        if not isinstance(spec, dict) or "feature" not in spec:
            raise ValueError(f"{where}: expected a dict with a 'feature' key, got {brief(spec)}")
        spec = upgrade_spec(spec, where)
        name = spec["feature"]
        if name not in FEATURES:
            raise ValueError(f"{where}: unknown feature {brief(name)}; use one of {sorted(FEATURES)}")
        kind = FEATURES[name]
        side = spec.get("side", kind.sides[0])
        if side not in kind.sides:
            raise ValueError(f"{where}: {name} cannot go into side {brief(side)}; it goes into {list(kind.sides)}")
        layers = spec.get("layers")
        if layers is not None and (not isinstance(layers, (list, tuple))
                                   or not all(isinstance(x, int) and x >= 0 for x in layers)):
            raise ValueError(f"{where}: 'layers' must be a list of layer indices >= 0, got {brief(layers)}")
        unknown = set(spec) - {"feature", "side", "layers"} - set(kind.defaults)
        if unknown:
            raise ValueError(f"{where}: unknown option(s) {brief(sorted(map(str, unknown)))} for {name}; "
                             f"options are {sorted(kind.defaults)}")
        options = {**kind.defaults, **{k: v for k, v in spec.items() if k in kind.defaults}}
        try:
            kind.settings(options)  # the types of the method's settings
        except ConfigError as err:
            raise ValueError(f"{where} ({name}): {err}") from None
        out.append({"feature": name, "side": side,
                    "layers": None if layers is None else sorted(set(layers)), **options})
    return out


def check_spec(spec: dict[str, Any], heads: int, layers: int, layer: int, where: str) -> None:
    """Raises ValueError when a normalized entry does not fit layer ``layer`` of its side (``layers``
    layers of ``heads`` heads): the method's own ``validate`` (heads, ranges, choices), then the
    memory its sizes would take (every whole number of an entry is at least one float32 weight)."""
    name, options = spec["feature"], spec_options(spec)
    try:
        FEATURES[name].check(options, spec["side"], heads, layers, layer)
    except UsageError as err:  # a ConfigError, or sizes too large for memory
        raise ValueError(f"{where} ({name}): {err}") from None
    for key, value in options.items():
        if isinstance(value, int) and not isinstance(value, bool):
            check_memory(f"{where} ({name}): {key}", value, 4 * value, "its weights")


def spec_options(spec: dict[str, Any]) -> dict[str, Any]:
    """The builder options of a normalized spec (without ``feature``, ``side``, ``layers``)."""
    return {k: v for k, v in spec.items() if k not in ("feature", "side", "layers")}
