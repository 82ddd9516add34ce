"""Builds the attention features of one layer from a stack config (METHODS §1–§2)."""

from __future__ import annotations

from synattn.attention import (AttentionFeature, RelativePositions, SpecializedHeads,
                               SupervisedHead, TreeRelations)
from synattn.models.config import ModelConfig, StackConfig
from synattn.trees.relations import distance_vocab, traversal_vocab


def layer_features(config: ModelConfig, stack: StackConfig, side: str, layer: int
                   ) -> list[AttentionFeature]:
    """The self-attention features of layer ``layer`` of stack ``side`` (``encoder``/``decoder``).

    Order: specialized heads (they replace queries/keys, so they come first), relations, the
    supervised head (its loss is named ``parse``).
    """
    head_dim = config.d_model // config.heads
    features: list[AttentionFeature] = []
    spec = stack.specialized_heads
    if spec is not None and layer == 0:
        num_labels = config.num_pos_tags if spec.source == "pos" else config.num_deprels
        features.append(SpecializedHeads(num_labels, head_dim, spec.heads, spec.source, spec.label_dim))
    if stack.relation_layers is None or layer in stack.relation_layers:
        values = stack.relative_values
        for relation in stack.relations:
            if relation == "sequential":
                features.append(RelativePositions(stack.max_relative_position, head_dim, values))
            elif relation == "tree_distance":
                features.append(TreeRelations("tree_dist", len(distance_vocab(stack.max_distance)),
                                              head_dim, values))
            else:
                features.append(TreeRelations("traversal", len(traversal_vocab(stack.max_traversal)),
                                              head_dim, values))
    sup = stack.supervised_head
    if sup is not None and layer == sup.layer:
        features.append(SupervisedHead(head_dim, sup.head, sup.weight, name="parse"))
    return features
