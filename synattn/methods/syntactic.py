"""Structured syntactic attention in one encoder layer (Kim, Denton, Hoang, Rush 2017, sec. 3.2;
docs/methods.md §5): soft parents (and children) from a dependency CRF.

Settings::

    syntactic_attention: {layer: 1, head: 0, children_head: null, tree: projective,
                          multiroot: false, arc_dim: 64}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from synattn.attention import SyntacticAttention
from synattn.attention.feature import AttentionFeature
from synattn.attention.structured import TREE_KINDS
from synattn.errors import ConfigError
from synattn.methods.base import Claim, HFAlias, Method, Site, check_head, check_layer, register


@dataclass
class SyntacticAttentionConfig:
    """Structured syntactic attention in one encoder layer (Kim et al. 2017; docs/methods.md §5).

    Attributes:
        layer: 0-based layer index.
        head: the head that attends to each position's soft parent.
        children_head: a head that attends to the soft children (None: none).
        tree: ``projective`` (Eisner inside-outside), ``nonprojective`` (Matrix-Tree) or
            ``projective2o`` (second-order Eisner: arcs and adjacent siblings; McDonald and
            Pereira 2006).
        multiroot: allow several words under ROOT.
        arc_dim: width of the arc scorer's head/dependent projections.
    """

    layer: int = 0
    head: int = 0
    children_head: int | None = None
    tree: str = "projective"
    multiroot: bool = False
    arc_dim: int = 64


@register
class SyntacticAttentionMethod(Method):
    """One encoder layer's soft-parent (and soft-children) heads."""

    name = "syntactic_attention"
    config = SyntacticAttentionConfig
    sides = ("encoder",)
    order = 50  # replaces its heads after the constituent prior: they stay the soft parent/children
    reads_hidden = True
    hf_aliases: ClassVar[dict[str, HFAlias]] = {"syntactic": HFAlias()}

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return (f"{side}.syntactic_attention is set, but syntactic attention needs bidirectional "
                f"self-attention and the {side} is causal; use it in an encoder")

    @staticmethod
    def _claimed(syn: SyntacticAttentionConfig) -> list[int]:
        return [syn.head] + ([] if syn.children_head is None else [syn.children_head])

    def validate(self, model: Any, side: str, stack: Any) -> None:
        syn = stack.syntactic_attention
        if syn is None:
            return
        where = f"{side}.syntactic_attention"
        check_layer(syn.layer, f"{where}.layer", side, stack.layers)
        if syn.tree not in TREE_KINDS:
            raise ConfigError(f"{where}.tree={syn.tree!r}: use one of {', '.join(TREE_KINDS)}")
        if syn.arc_dim < 1:
            raise ConfigError(f"{where}.arc_dim={syn.arc_dim} must be at least 1")
        for name, head in zip(("head", "children_head"), self._claimed(syn)):
            check_head(head, f"{where}.{name}", model.heads)
        if syn.children_head == syn.head:
            raise ConfigError(f"{where}.head={syn.head} and {where}.children_head={syn.children_head} "
                              "are the same head")

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        syn = stack.syntactic_attention
        claimed = self._claimed(syn)
        return [Claim(f"{side}.syntactic_attention (layer {syn.layer}, heads {claimed})", tuple(claimed),
                      frozenset({syn.layer}))]

    def applies(self, stack: Any, layer: int) -> bool:
        return layer == stack.syntactic_attention.layer

    def feature(self, site: Site, settings: SyntacticAttentionConfig) -> AttentionFeature:
        return SyntacticAttention(site.d_model, settings.head, settings.children_head, settings.tree,
                                  settings.multiroot, settings.arc_dim)
