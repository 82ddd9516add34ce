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

from typing import Any

from synattn.methods import SIDES, HFFeature, Site, methods
from synattn.methods.relations import relation_labels

__all__ = ["FEATURES", "SIDES", "FeatureKind", "HFFeature", "Site", "normalize_specs", "relation_labels", "spec_options"]


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
            raise ValueError(f"{where}: expected a dict with a 'feature' key, got {spec!r}")
        name = spec["feature"]
        if name not in FEATURES:
            raise ValueError(f"{where}: unknown feature {name!r}; use one of {sorted(FEATURES)}")
        kind = FEATURES[name]
        side = spec.get("side", kind.sides[0])
        if side not in kind.sides:
            raise ValueError(f"{where}: {name} cannot go into side {side!r}; it goes into {list(kind.sides)}")
        layers = spec.get("layers")
        if layers is not None and (not isinstance(layers, (list, tuple))
                                   or not all(isinstance(x, int) and x >= 0 for x in layers)):
            raise ValueError(f"{where}: 'layers' must be a list of layer indices >= 0, got {layers!r}")
        unknown = set(spec) - {"feature", "side", "layers"} - set(kind.defaults)
        if unknown:
            raise ValueError(f"{where}: unknown option(s) {sorted(unknown)} for {name}; "
                             f"options are {sorted(kind.defaults)}")
        options = {**kind.defaults, **{k: v for k, v in spec.items() if k in kind.defaults}}
        out.append({"feature": name, "side": side,
                    "layers": None if layers is None else sorted(set(layers)), **options})
    return out


def spec_options(spec: dict[str, Any]) -> dict[str, Any]:
    """The builder options of a normalized spec (without ``feature``, ``side``, ``layers``)."""
    return {k: v for k, v in spec.items() if k not in ("feature", "side", "layers")}
