"""Relative attention over sequential, tree-distance and tree-traversal relations (Shaw,
Uszkoreit, Vaswani 2018, eq. 3–4; docs/methods.md §1).

Settings (flat keys of a stack config)::

    relations: [tree_distance, sequential]   # any of sequential, tree_distance, traversal; summed
    relation_layers: null                     # the layers that get them (null: every layer)
    max_relative_position: 16                 # Shaw's clipping distance k
    max_distance: 8                           # largest tree distance with its own label
    max_traversal: 4                          # longest traversal path with its own label
    relative_values: true                     # also learn value embeddings a^V
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from synattn.attention import RelativePositions, TreeRelations
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import HFAlias, Method, Site, check_layer, register
from synattn.trees.relations import MAX_DISTANCE, MAX_TRAVERSAL, check_label_clips, distance_vocab, traversal_vocab

RELATIONS = ("sequential", "tree_distance", "traversal")
"""Relation kinds of relative attention: Shaw positions, tree distance, tree traversal."""

FIELDS = {"tree_distance": "tree_dist", "traversal": "traversal"}
"""The syntax field each tree relation reads."""

MAX_RELATIVE_POSITION = 16
"""The default of ``max_relative_position`` (Shaw's clipping distance k), defined once."""


def relation_labels(field: str, max_distance: int, max_traversal: int) -> int:
    """Number of tree-relation labels: the vocabulary of ``field`` plus one ``outside`` label
    (special tokens and padding, :mod:`synattn.hf.align`)."""
    vocab = distance_vocab(max_distance) if field == "tree_dist" else traversal_vocab(max_traversal)
    return len(vocab) + 1


@dataclass
class RelationsConfig:
    """Relative attention of the self-attention (Shaw et al. 2018; docs/methods.md §1): flat keys
    of a stack config.

    Attributes:
        relations: any of ``sequential`` (Shaw), ``tree_distance``, ``traversal``; several are summed.
        relation_layers: the layers that get them (None: every layer).
        max_relative_position: Shaw's clipping distance k.
        max_distance: largest tree distance with its own label.
        max_traversal: longest traversal path with its own label.
        relative_values: also learn value embeddings a^V.
    """

    relations: list[str] = field(default_factory=list)
    relation_layers: list[int] | None = None
    max_relative_position: int = MAX_RELATIVE_POSITION
    max_distance: int = MAX_DISTANCE
    max_traversal: int = MAX_TRAVERSAL
    relative_values: bool = True


@register
class Relations(Method):
    """Shaw relative positions and tree-label relations on the self-attention."""

    name = "relations"
    config = RelationsConfig
    flat = True
    sides = ("encoder", "decoder")
    order = 10
    hf_layer_keys = ("relation_layers",)
    hf_aliases: ClassVar[dict[str, HFAlias]] = {
        "tree_relations": HFAlias({"relations": ["tree_distance"]}, {
            "field": ("relations", lambda field: [{"tree_dist": "tree_distance"}.get(field, field)]),
            "values": "relative_values"}),
        "relative_positions": HFAlias({"relations": ["sequential"]}, {"max_relative": "max_relative_position",
                                                                      "values": "relative_values"})}

    def active(self, stack: Any) -> bool:
        return bool(stack.relations)

    def reads(self, stack: Any) -> set[str]:
        return {FIELDS[r] for r in stack.relations if r in FIELDS}

    def validate(self, model: Any, side: str, stack: Any) -> None:
        for relation in stack.relations:
            if relation not in RELATIONS:
                raise ConfigError(f"{side}.relations: unknown relation {relation!r}; known: {', '.join(RELATIONS)}")
        if len(set(stack.relations)) != len(stack.relations):
            raise ConfigError(f"{side}.relations={stack.relations} lists a relation twice")
        if stack.relation_layers is not None:
            if not stack.relations:
                raise ConfigError(f"{side}.relation_layers is set but {side}.relations is empty")
            check_layer(stack.relation_layers, f"{side}.relation_layers", side, stack.layers)
        for name in ("max_relative_position", "max_distance", "max_traversal"):
            if getattr(stack, name) < 1:
                raise ConfigError(f"{side}.{name}={getattr(stack, name)} must be at least 1")
        check_label_clips(stack.max_distance, stack.max_traversal,
                          (f"{side}.max_distance", f"{side}.max_traversal"))

    def layer_features(self, model: Any, stack: Any, site: Site, shared: dict[str, Any]
                       ) -> list[AttentionFeature]:
        if stack.relation_layers is not None and site.layer not in stack.relation_layers:
            return []
        values = stack.relative_values
        features: list[AttentionFeature] = []
        for relation in stack.relations:
            if relation == "sequential":
                features.append(RelativePositions(stack.max_relative_position, site.head_dim, values))
            elif relation == "tree_distance":
                features.append(TreeRelations("tree_dist", len(distance_vocab(stack.max_distance)),
                                              site.head_dim, values))
            else:
                features.append(TreeRelations("traversal", len(traversal_vocab(stack.max_traversal)),
                                              site.head_dim, values))
        return features

    def hf_build(self, site: Site, settings: RelationsConfig, extras: dict[str, Any],
                 shared: dict[str, Any]) -> list[AttentionFeature]:
        # the tree labels get one more, "outside" label: special tokens (synattn.hf.align)
        features: list[AttentionFeature] = []
        for relation in settings.relations:
            if relation == "sequential":
                features.append(RelativePositions(settings.max_relative_position, site.head_dim,
                                                  values=settings.relative_values))
            else:
                labels = relation_labels(FIELDS[relation], settings.max_distance, settings.max_traversal)
                features.append(TreeRelations(FIELDS[relation], labels, site.head_dim,
                                              values=settings.relative_values))
        return features
