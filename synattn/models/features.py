"""Builds the attention features of one layer from a stack config: each registered method
(``synattn.methods``) adds its own, in the order of its ``position`` (docs/methods.md §1–§5)."""

from __future__ import annotations

from typing import Any

from synattn.attention import AttentionFeature
from synattn.methods import Site, methods
from synattn.models.config import ModelConfig, StackConfig


def _site(config: ModelConfig, side: str, layer: int) -> Site:
    return Site(side, layer, config.heads, config.d_model // config.heads, config.d_model)


def layer_features(config: ModelConfig, stack: StackConfig, side: str, layer: int,
                   shared: dict[str, Any] | None = None) -> list[AttentionFeature]:
    """The self-attention features of layer ``layer`` of stack ``side`` (``encoder``/``decoder``).

    Order (each method's ``position``): specialized heads (they replace queries/keys, so they come
    first), relations and BET(SF) (additive logit biases), the supervised head (its loss is named
    ``parse``), the constituent prior C (scales every head), syntactic attention (replaces its
    heads after C, so they stay the soft parent/children), and last the BET(SG) pointer loss
    (named ``pointer``), which reads the final distribution.

    Args:
        shared: a dict kept while the whole stack is built, for what its layers' construction
            shares; what layers hand each other in a forward pass travels in that forward's
            ``carry`` instead (``synattn.attention.feature.AttentionContext``).
    """
    shared = {} if shared is None else shared
    site = _site(config, side, layer)
    features: list[AttentionFeature] = []
    for method in sorted(methods(), key=lambda m: m.position(stack)):  # stable: ties keep registry order
        if method.active(stack):
            features.extend(method.layer_features(config, stack, site, shared))
    return features


def cross_features(config: ModelConfig, stack: StackConfig, layer: int = 0) -> list[AttentionFeature]:
    """The cross-attention features of a decoder layer: structured segmentation (or sigmoid)
    attention when ``stack.cross_attention`` is set (docs/methods.md §5), else none (softmax)."""
    site = _site(config, "cross", layer)
    return [feature for method in methods() if method.active(stack)
            for feature in method.cross_features(config, stack, site)]
