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

:data:`FEATURES` is the one table from a feature name to how it is built
(:class:`synattn.methods.HFFeature`); it is generated from the method registry, so a method added
there works here without further code. Older feature names (``tree_relations``, ``pointer``, ...)
are read with a ``FutureWarning`` naming the entry as it is written now (:data:`ALIASES`).
"""

from __future__ import annotations

import warnings
from typing import Any

from synattn.errors import ConfigError, UsageError, brief
from synattn.limits import check_memory
from synattn.methods import SIDES, HFAlias, HFFeature, Site, methods
from synattn.methods.relations import relation_labels

__all__ = ["ALIASES", "FEATURES", "SIDES", "FeatureKind", "HFFeature", "Site", "check_spec", "normalize_specs",
           "relation_labels", "spec_options"]


FeatureKind = HFFeature
"""How one feature is built (:class:`synattn.methods.HFFeature`): its options and their defaults,
the sides it may go into, its checks (the method's own ``validate``), its builder and the syntax
fields it reads."""

FEATURES: dict[str, FeatureKind] = {
    name: entry for method in methods() for name, entry in method.hf_features().items()}
"""Every registered method's Hugging Face entry (``synattn.methods.Method.hf_features``)."""

ALIASES: dict[str, tuple[str, HFAlias]] = {
    old: (method.name, alias) for method in methods() for old, alias in method.hf_aliases.items()}
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
