"""Builds the attention features of one layer from a stack config (docs/methods.md §1–§5)."""

from __future__ import annotations

from synattn.attention import (AttentionFeature, BirdEyeReweighting, ConstituentAttention,
                               ConstituentState, RelativePositions, SegmentationAttention,
                               SpecializedHeads, SupervisedHead, SyntacticAttention,
                               SyntaxGuidedPointer, TreeRelations)
from synattn.models.config import ModelConfig, StackConfig
from synattn.trees.relations import distance_vocab, traversal_vocab


def layer_features(config: ModelConfig, stack: StackConfig, side: str, layer: int,
                   constituent_state: ConstituentState | None = None) -> list[AttentionFeature]:
    """The self-attention features of layer ``layer`` of stack ``side`` (``encoder``/``decoder``).

    Order: specialized heads (they replace queries/keys, so they come first), relations and
    BET(SF) (additive logit biases), the supervised head (its loss is named ``parse``), the
    constituent prior C (scales every head), syntactic attention (replaces its heads after C, so
    they stay the soft parent/children), and last the BET(SG) pointer loss (named ``pointer``),
    which reads the final distribution.

    Args:
        constituent_state: the record shared by the stack's constituent layers (needed when
            ``stack.constituent``).
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
    if stack.bird_eye == "sf":
        features.append(BirdEyeReweighting(config.d_model, config.heads))
    sup = stack.supervised_head
    if sup is not None and layer == sup.layer:
        features.append(SupervisedHead(head_dim, sup.head, sup.weight, name="parse"))
    if stack.constituent:
        if constituent_state is None:
            raise ValueError(f"{side}.constituent needs the stack's ConstituentState")
        features.append(ConstituentAttention(config.d_model, layer, constituent_state,
                                             diagonal=stack.constituent_diagonal))
    syn = stack.syntactic_attention
    if syn is not None and layer == syn.layer:
        features.append(SyntacticAttention(config.d_model, syn.head, syn.children_head, syn.tree,
                                           syn.multiroot, syn.arc_dim))
    if stack.bird_eye == "sg":
        features.append(SyntaxGuidedPointer(stack.pointer_weight, stack.pointer_head, name="pointer"))
    return features


def cross_features(config: ModelConfig, stack: StackConfig) -> list[AttentionFeature]:
    """The cross-attention features of a decoder layer: structured segmentation (or sigmoid)
    attention when ``stack.cross_attention`` is set (docs/methods.md §5), else none (softmax)."""
    if stack.cross_attention is None:
        return []
    mode = "structured" if stack.cross_attention == "segmentation" else "sigmoid"
    return [SegmentationAttention(config.heads, mode, stack.cross_attention_normalize)]
