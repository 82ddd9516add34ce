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
written so that a registry of methods can later supply these entries instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synattn.attention import (BirdEyeReweighting, ConstituentAttention, ConstituentState,
                               RelativePositions, SegmentationAttention, SpecializedHeads,
                               SupervisedHead, SyntacticAttention, SyntaxGuidedPointer,
                               TreeRelations)
from synattn.attention.feature import AttentionFeature
from synattn.trees.relations import distance_vocab, traversal_vocab

SIDES = ("encoder", "decoder", "cross")


@dataclass(frozen=True)
class Site:
    """One attention module of a model, as the builders see it.

    Attributes:
        side: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer: the layer index within its side.
        heads: number of query heads H.
        head_dim: d_k.
        d_model: width of the hidden states the attention reads.
    """

    side: str
    layer: int
    heads: int
    head_dim: int
    d_model: int

    @property
    def key(self) -> str:
        """Name of the site's submodule under ``model.synattn`` (``"encoder_3"``)."""
        return f"{self.side}_{self.layer}"


@dataclass(frozen=True)
class FeatureKind:
    """How one feature is built: defaults of its options, allowed sides and a builder.

    ``build(site, options, shared)`` returns the :class:`AttentionFeature`; ``shared`` is a dict
    kept for one model and side (the constituent layers share their :class:`ConstituentState`).
    ``reads_hidden``: the feature reads the attention's input hidden states (``ctx.x``).
    """

    defaults: dict[str, Any]
    sides: tuple[str, ...]
    build: Callable[[Site, dict[str, Any], dict[str, Any]], AttentionFeature]
    reads_hidden: bool = False


def relation_labels(field: str, max_distance: int, max_traversal: int) -> int:
    """Number of tree-relation labels: the vocabulary of ``field`` plus one ``outside`` label
    (special tokens and padding, :mod:`synattn.hf.align`)."""
    vocab = distance_vocab(max_distance) if field == "tree_dist" else traversal_vocab(max_traversal)
    return len(vocab) + 1


def _tree_relations(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    labels = relation_labels(o["field"], o["max_distance"], o["max_traversal"])
    return TreeRelations(o["field"], labels, site.head_dim, values=o["values"])


def _relative_positions(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    return RelativePositions(o["max_relative"], site.head_dim, values=o["values"])


def _specialized(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    if o["num_labels"] is None:
        raise ValueError("specialized_heads needs 'num_labels' (the size of the POS or deprel "
                         "vocabulary of synattn.hf.SyntaxEncoder)")
    return SpecializedHeads(o["num_labels"], site.head_dim, o["heads"], o["source"], o["label_dim"])


def _supervised(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    return SupervisedHead(site.head_dim, o["head"], o["weight"], o["name"])


def _constituent(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    state = shared.setdefault("constituent_state", ConstituentState())
    index = shared["constituent_layers"] = shared.get("constituent_layers", -1) + 1
    return ConstituentAttention(site.d_model, index, state)


def _pointer(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    return SyntaxGuidedPointer(o["weight"], o["head"], o["name"])


def _reweighting(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    return BirdEyeReweighting(site.d_model, site.heads, o["hidden"])


def _segmentation(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    return SegmentationAttention(site.heads, o["mode"], o["normalize"])


def _syntactic(site: Site, o: dict[str, Any], shared: dict[str, Any]) -> AttentionFeature:
    return SyntacticAttention(site.d_model, o["head"], o["children_head"], o["tree"],
                              o["multiroot"], o["arc_dim"])


FEATURES: dict[str, FeatureKind] = {
    # Shaw, Uszkoreit, Vaswani 2018 eq. 3-4 on tree labels (docs/methods.md, tree relations)
    "tree_relations": FeatureKind(
        {"field": "tree_dist", "max_distance": 8, "max_traversal": 4, "values": True},
        ("encoder", "decoder"), _tree_relations),
    # Shaw et al. 2018 sequential relative positions
    "relative_positions": FeatureKind({"max_relative": 16, "values": True},
                                      ("encoder", "decoder"), _relative_positions),
    # POS / deprel query-key heads (docs/methods.md, specialized heads)
    "specialized_heads": FeatureKind(
        {"num_labels": None, "heads": [0], "source": "pos", "label_dim": None},
        ("encoder", "decoder"), _specialized),
    # biaffine dependency-supervised head (Strubell et al. 2018; docs/methods.md, supervised head)
    "supervised_head": FeatureKind({"head": 0, "weight": 1.0, "name": "parse"},
                                   ("encoder", "decoder"), _supervised),
    # Tree Transformer constituent prior (Wang, Lee, Chen 2019, eq. 4-7)
    "constituent": FeatureKind({}, ("encoder",), _constituent, reads_hidden=True),
    # BET(SG) pointer loss (Sha et al. 2022, eq. 5)
    "pointer": FeatureKind({"weight": 1.0, "head": None, "name": "pointer"}, ("decoder",), _pointer),
    # BET(SF) reweighting (our reconstruction, docs/methods.md)
    "bird_eye_reweighting": FeatureKind({"hidden": None}, ("decoder",), _reweighting,
                                        reads_hidden=True),
    # segmentation attention (Kim et al. 2017, sec. 3.1) on the decoder's cross-attention
    "segmentation": FeatureKind({"mode": "structured", "normalize": False}, ("cross",),
                                _segmentation),
    # syntactic attention (Kim et al. 2017, sec. 3.2): soft parents from a dependency CRF
    "syntactic": FeatureKind(
        {"head": 0, "children_head": None, "tree": "projective", "multiroot": False, "arc_dim": 64},
        ("encoder",), _syntactic, reads_hidden=True),
}


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
