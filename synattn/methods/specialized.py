"""Specialized heads: POS / dependency-label query-key heads in encoder layer 0 (docs/methods.md §1).

Settings::

    specialized_heads: {source: pos, heads: [0], label_dim: null}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from synattn.attention import SpecializedHeads
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import Claim, Method, Option, Site, check_head, register


@dataclass
class SpecializedHeadsConfig:
    """Specialized heads of encoder layer 0 (docs/methods.md §1): query/key from label embeddings.

    Attributes:
        source: ``"pos"`` (POS tags) or ``"deprel"`` (dependency labels).
        heads: indices of the specialized heads.
        label_dim: width of the label embedding (None: d_k).
    """

    source: str = "pos"
    heads: list[int] = field(default_factory=lambda: [0])
    label_dim: int | None = None


@register
class SpecializedHeadsMethod(Method):
    """Label-embedding queries and keys for some heads of encoder layer 0."""

    name = "specialized_heads"
    config = SpecializedHeadsConfig
    sides = ("encoder",)
    order = 0  # they replace queries/keys, so they come first
    hf_sides = ("encoder", "decoder")  # any layer of a Hugging Face model
    hf_extras = (Option("num_labels", int | None, None, minimum=1),)  # the label vocabulary's size

    def reads(self, stack: Any) -> set[str]:
        return {stack.specialized_heads.source} if self.active(stack) else set()

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return f"{side}.specialized_heads is set, but specialized heads exist only in encoder layer 0"

    def validate(self, model: Any, side: str, stack: Any) -> None:
        spec = stack.specialized_heads
        if spec is None:
            return
        sizes = {"pos": ("num_pos_tags", model.num_pos_tags), "deprel": ("num_deprels", model.num_deprels)}
        if spec.source not in sizes:
            raise ConfigError(f"{side}.specialized_heads.source={spec.source!r}: use 'pos' or 'deprel'")
        size_name, size = sizes[spec.source]
        if size < 1:
            raise ConfigError(f"{side}.specialized_heads.source={spec.source!r} needs {size_name} > 0, "
                              f"got {size_name}={size}")
        if spec.label_dim is not None and spec.label_dim < 1:
            raise ConfigError(f"{side}.specialized_heads.label_dim={spec.label_dim} must be at least 1 (or null)")
        if not spec.heads or len(set(spec.heads)) != len(spec.heads):
            raise ConfigError(f"{side}.specialized_heads.heads={spec.heads} must be distinct and non-empty")
        check_head(spec.heads, f"{side}.specialized_heads.heads", model.heads)

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        spec = stack.specialized_heads
        return [Claim(f"{side}.specialized_heads (layer 0, heads {spec.heads})", tuple(spec.heads),
                      frozenset({0}))]

    def layer_features(self, model: Any, stack: Any, site: Site, shared: dict[str, Any]
                       ) -> list[AttentionFeature]:
        spec = stack.specialized_heads
        if spec is None or site.layer != 0:
            return []
        num_labels = model.num_pos_tags if spec.source == "pos" else model.num_deprels
        return [SpecializedHeads(num_labels, site.head_dim, spec.heads, spec.source, spec.label_dim)]

    def hf_build(self, site: Site, settings: SpecializedHeadsConfig, extras: dict[str, Any],
                 shared: dict[str, Any]) -> list[AttentionFeature]:
        if extras["num_labels"] is None:
            raise ValueError("specialized_heads needs 'num_labels' (the size of the POS or deprel "
                             "vocabulary of synattn.hf.SyntaxEncoder)")
        return [SpecializedHeads(extras["num_labels"], site.head_dim, settings.heads, settings.source,
                                 settings.label_dim)]
