"""The dependency-supervised head (Deguchi et al. 2019; Strubell et al. 2018; docs/methods.md §2).

Settings::

    supervised_head: {layer: 3, head: 0, weight: 1.0}   # its parse loss is named ``parse``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synattn.attention import SupervisedHead
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import Claim, Method, Option, Site, check_head, check_layer, register


@dataclass
class SupervisedHeadConfig:
    """The dependency-supervised head of one layer (Deguchi et al. 2019; docs/methods.md §2).

    Attributes:
        layer: 0-based layer index (default: the 4th layer).
        head: head index.
        weight: λ, weight of its parse loss.
    """

    layer: int = 3
    head: int = 0
    weight: float = 1.0


@register
class SupervisedHeadMethod(Method):
    """A biaffine head trained toward the dependency heads (its loss: ``<side>.<layer>.parse``)."""

    name = "supervised_head"
    config = SupervisedHeadConfig
    sides = ("encoder", "decoder")
    order = 30
    fields_read = frozenset({"head_targets"})
    hf_extras = (Option("name", str, "parse"),)  # the name of its loss in a Hugging Face model

    def validate(self, model: Any, side: str, stack: Any) -> None:
        sup = stack.supervised_head
        if sup is None:
            return
        if sup.weight < 0:
            raise ConfigError(f"{side}.supervised_head.weight={sup.weight} must be >= 0")
        check_layer(sup.layer, f"{side}.supervised_head.layer", side, stack.layers)
        check_head(sup.head, f"{side}.supervised_head.head", model.heads)

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        sup = stack.supervised_head
        return [Claim(f"{side}.supervised_head (layer {sup.layer}, head {sup.head})", (sup.head,),
                      frozenset({sup.layer}))]

    def applies(self, stack: Any, layer: int) -> bool:
        return layer == stack.supervised_head.layer

    def feature(self, site: Site, settings: SupervisedHeadConfig) -> AttentionFeature:
        return SupervisedHead(site.head_dim, settings.head, settings.weight, name="parse")

    def hf_build(self, site: Site, settings: SupervisedHeadConfig, extras: dict[str, Any],
                 shared: dict[str, Any]) -> list[AttentionFeature]:
        return [SupervisedHead(site.head_dim, settings.head, settings.weight, extras["name"])]
