"""Which synattn features can be attached to a Hugging Face model, and how each is built.

A model's features are a list of plain dicts (JSON, stored as ``config.synattn`` so that
``save_pretrained`` writes them into ``config.json``)::

    [{"feature": "tree_relations", "side": "encoder", "layers": [0, 1], "field": "tree_dist"},
     {"feature": "supervised_head", "side": "encoder", "layers": [2], "head": 0, "weight": 1.0}]

``side`` says which attention of the model the feature goes into (``"encoder"``: the
bidirectional self-attention of an encoder or encoder-decoder; ``"decoder"``: the causal
self-attention of a decoder-only model or of the decoder of an encoder-decoder; ``"cross"``: the
decoder's attention to the encoder) and ``layers`` which of its layers (default: all).

:data:`FEATURES` is the one table from a feature name to how it is built from the parts of
:mod:`synattn.attention`: its options and defaults, the sides it may go into and a builder. It is
generated from the method registry (:mod:`synattn.methods`): a method added there works here
without further code.
"""

from __future__ import annotations

import math
from typing import Any

from synattn.errors import brief
from synattn.limits import check_memory
from synattn.methods import SIDES, HFFeature, Site, methods
from synattn.methods.relations import relation_labels
from synattn.trees.relations import check_label_clips

__all__ = ["FEATURES", "SIDES", "FeatureKind", "HFFeature", "Site", "check_heads", "normalize_specs", "relation_labels",
           "spec_options"]


FeatureKind = HFFeature
"""How one feature is built (:class:`synattn.methods.HFFeature`): defaults of its options, allowed
sides, a builder ``build(site, options, shared)`` (``shared``: a dict kept while one model and side
are built; what the layers hand each other in a forward travels in that forward's
``SynattnCall.carry``), ``reads_hidden`` and ``reads(options)``, the syntax fields it reads."""

FEATURES: dict[str, FeatureKind] = {
    name: entry for method in methods() for name, entry in method.hf_features().items()}
"""Every registered method's Hugging Face entries (``synattn.methods.Method.hf_features``)."""


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
        for key, value in options.items():
            problem = _bad_option(key, value, kind.defaults[key])
            if problem:
                raise ValueError(f"{where} ({name}): {key}={brief(value)} {problem}")
        if "max_distance" in options or "max_traversal" in options:  # their label tables
            check_label_clips(options.get("max_distance") or 0, options.get("max_traversal") or 0,
                              (f"{where} ({name}): max_distance", f"{where} ({name}): max_traversal"))
        for key in SIZE_OPTIONS:  # every unit of a size is at least one float32 weight
            if isinstance(options.get(key), int) and key not in ("max_distance", "max_traversal"):
                check_memory(f"{where} ({name}): {key}", options[key], 4 * options[key], "its weights")
        out.append({"feature": name, "side": side,
                    "layers": None if layers is None else sorted(set(layers)), **options})
    return out


HEAD_OPTIONS = ("head", "children_head")
"""Options that name one head of the attention a feature goes into (None: the feature's default)."""
SIZE_OPTIONS = ("max_distance", "max_traversal", "max_relative", "num_labels", "label_dim", "arc_dim", "hidden")
"""Options that are sizes or clipping distances (None: the feature's default)."""


def _bad_option(key: str, value: Any, default: Any) -> str | None:
    """What is wrong with option ``key=value`` whose default is ``default`` (None when nothing)."""
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if key in HEAD_OPTIONS or key in SIZE_OPTIONS:
        if value is None and default is None:
            return None
        if not is_int(value):
            return "must be a whole number"
        if key in SIZE_OPTIONS and value < 1:
            return "must be >= 1"
        return "must be >= 0" if value < 0 else None
    if key == "heads":
        ok = isinstance(value, (list, tuple)) and value and all(is_int(h) and h >= 0 for h in value)
        return None if ok else "must be a non-empty list of head indices >= 0"
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, float):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return "must be a number"
        if not math.isfinite(value):
            return "must be a finite number"
        return "must be >= 0" if key == "weight" and value < 0 else None
    if isinstance(default, str):
        return None if isinstance(value, str) else "must be a string"
    return None


def check_heads(spec: dict[str, Any], heads: int, where: str) -> None:
    """Raises ValueError when an option of ``spec`` names a head the attention (``heads`` heads)
    does not have."""
    named = [(f"{key}={spec[key]}", spec[key]) for key in HEAD_OPTIONS if spec.get(key) is not None]
    named += [(f"head {h} in heads", h) for h in spec.get("heads") or []]
    for what, head in named:
        if head >= heads:
            raise ValueError(f"{where} ({spec['feature']}): {what} is out of range for an attention "
                             f"with {heads} heads")


def spec_options(spec: dict[str, Any]) -> dict[str, Any]:
    """The builder options of a normalized spec (without ``feature``, ``side``, ``layers``)."""
    return {k: v for k, v in spec.items() if k not in ("feature", "side", "layers")}
