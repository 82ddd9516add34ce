"""Structured encoder-decoder attention: segmentation attention (Kim, Denton, Hoang, Rush 2017,
sec. 3.1; docs/methods.md §5), its sigmoid baseline, or its semi-Markov version over labelled
segments (docs/methods_structured.md), in every layer of a translation decoder or in the layers
listed.

Settings (flat keys of a stack config)::

    cross_attention: segmentation     # or sigmoid, or segments; null: softmax
    cross_attention_layers: null      # the decoder layers that get it (null: every layer)
    cross_attention_normalize: false  # the public code's 2 p_i / Σ_j p_j (segmentation, sigmoid)
    cross_attention_max_segment: 4    # segments: the longest segment, in source pieces
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from synattn.attention import SegmentationAttention, SpanSegmentationAttention
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import HFAlias, Method, Site, check_layers, register

CROSS_ATTENTION = ("segmentation", "sigmoid", "segments")
"""Structured encoder-decoder attention (docs/methods.md §5): the chain CRF, its sigmoid baseline,
or the semi-Markov CRF over labelled segments."""

MAX_SEGMENT = 4
"""The default of ``cross_attention_max_segment`` (the longest segment, in source pieces), defined once."""


@dataclass
class CrossAttentionConfig:
    """Structured encoder-decoder attention (docs/methods.md §5): flat keys of a stack config.

    Attributes:
        cross_attention: ``segmentation`` (binary chain CRF), ``sigmoid`` or ``segments``
            (semi-Markov CRF over labelled segments); None: softmax.
        cross_attention_layers: the decoder layers whose cross-attention it is (None: every
            layer; the others keep softmax), as ``relation_layers`` chooses the relations' layers.
        cross_attention_normalize: rescale the weights to 2 p_i / Σ_j p_j (the public SAN code;
            segmentation and sigmoid); off by default, as in the paper.
        cross_attention_max_segment: the longest segment, in source pieces (segments).
    """

    cross_attention: str | None = None
    cross_attention_normalize: bool = False
    cross_attention_max_segment: int = MAX_SEGMENT
    cross_attention_layers: list[int] | None = None


@register
class CrossAttention(Method):
    """Segmentation (or sigmoid) attention on a translation decoder's cross-attention."""

    name = "cross_attention"
    config = CrossAttentionConfig
    flat = True
    sides = ("cross",)
    order = 0
    hf_layer_keys = ("cross_attention_layers",)
    hf_aliases: ClassVar[dict[str, HFAlias]] = {
        "segmentation": HFAlias({"cross_attention": "segmentation"}, {
            "mode": ("cross_attention", lambda mode: {"structured": "segmentation"}.get(mode, mode)),
            "normalize": "cross_attention_normalize"}),
        "span_segmentation": HFAlias({"cross_attention": "segments"}, {"max_segment": "cross_attention_max_segment"})}

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return (f"{side}.cross_attention={stack.cross_attention!r}, but the {side} of this {model.model_type} "
                "model has no cross-attention (only a translation decoder attends to the source)")

    def validate(self, model: Any, side: str, stack: Any) -> None:
        kind = stack.cross_attention
        if kind is not None and kind not in CROSS_ATTENTION:
            raise ConfigError(f"{side}.cross_attention={kind!r}: use one of {', '.join(CROSS_ATTENTION)} "
                              "(or null for softmax attention)")
        if stack.cross_attention_normalize and kind not in ("segmentation", "sigmoid"):
            raise ConfigError(f"{side}.cross_attention_normalize=true, but {side}.cross_attention is "
                              + ("not set" if kind is None else f"{kind!r}")
                              + " (normalize applies to segmentation or sigmoid)")
        if stack.cross_attention_layers is not None and kind is None:
            raise ConfigError(f"{side}.cross_attention_layers is set, but {side}.cross_attention is not set")
        check_layers(stack.cross_attention_layers, f"{side}.cross_attention_layers", side, stack.layers)
        if stack.cross_attention_max_segment < 1:
            raise ConfigError(f"{side}.cross_attention_max_segment={stack.cross_attention_max_segment}: "
                              "the longest segment must be >= 1 source piece")

    def cross_features(self, model: Any, stack: Any, site: Site) -> list[AttentionFeature]:
        if stack.cross_attention is None or (stack.cross_attention_layers is not None
                                             and site.layer not in stack.cross_attention_layers):
            return []
        return self.hf_build(site, stack, {}, {})

    def hf_build(self, site: Site, settings: Any, extras: dict[str, Any], shared: dict[str, Any]
                 ) -> list[AttentionFeature]:
        if settings.cross_attention == "segments":
            return [SpanSegmentationAttention(site.heads, settings.cross_attention_max_segment)]
        mode = "structured" if settings.cross_attention == "segmentation" else "sigmoid"
        return [SegmentationAttention(site.heads, mode, settings.cross_attention_normalize)]
