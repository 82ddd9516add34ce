"""The dependency-supervised head (Deguchi et al. 2019; Strubell et al. 2018; docs/methods.md §2).

Settings::

    supervised_head: {layer: 3, head: 0, weight: 1.0}          # its parse loss is named ``parse``
    supervised_head: {layers: [0, 1, 2], head: 0, weight: 1.0} # head 0 of each listed layer

With several layers, each layer's head gets λ / |layers|: the parse loss is the **average** over
the layers, weighted λ. Strubell et al. (2018) and Deguchi et al. (2019) supervise one head of one
layer and weight that one parse loss by λ (Deguchi et al.: one λ per side); averaging keeps λ the
weight of a side's parse loss wherever its heads are, so that moving the supervision to every layer
does not also multiply its weight (the BET(SG) pointer loss, by contrast, is summed over blocks as
Sha et al. 2022 write it: synattn/methods/bird_eye.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synattn.attention import SupervisedHead
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError, brief
from synattn.methods.base import Claim, Method, Option, Site, check_head, check_layer, check_layers, register


@dataclass
class SupervisedHeadConfig:
    """The dependency-supervised head of one layer (Deguchi et al. 2019; docs/methods.md §2).

    Attributes:
        layer: 0-based layer index (default: the 4th layer); with ``layers``, one of them (the
            first when not given).
        head: head index (the same head in each layer).
        weight: λ, weight of its parse loss (averaged over the layers when there are several).
        layers: several layers, each with head ``head`` (None: the one ``layer``).
    """

    layer: int = 3
    head: int = 0
    weight: float = 1.0
    layers: list[int] | None = None

    @property
    def placed(self) -> list[int]:
        """The layers that have the head: ``layers``, or ``[layer]``."""
        return [self.layer] if self.layers is None else list(self.layers)


@register
class SupervisedHeadMethod(Method):
    """A biaffine head trained toward the dependency heads (its loss: ``<side>.<layer>.parse``)."""

    name = "supervised_head"
    config = SupervisedHeadConfig
    sides = ("encoder", "decoder")
    order = 30
    fields_read = frozenset({"head_targets"})
    hf_extras = (Option("name", str, "parse"),)  # the name of its loss in a Hugging Face model

    def upgrade(self, data: dict[str, Any], where: str) -> dict[str, Any]:
        section = data.get("supervised_head")
        if not isinstance(section, dict) or not isinstance(section.get("layers"), list):
            return data
        layers, layer = section["layers"], section.get("layer")
        if isinstance(layer, int) and layers and layer not in layers:
            raise ConfigError(f"{where}supervised_head.layer={brief(layer)} is not among "
                              f"{where}supervised_head.layers={brief(layers)}: give one of them "
                              "(layer: one layer; layers: several)")
        return data

    def coerce(self, stack: Any) -> None:
        sup = stack.supervised_head
        if not isinstance(sup, SupervisedHeadConfig):  # None, or a wrong type that the section check names
            return
        if isinstance(sup.layers, list) and sup.layers and sup.layer not in sup.layers:
            sup.layer = sup.layers[0]  # `layer` names the first of `layers` (and round-trips)

    def validate(self, model: Any, side: str, stack: Any) -> None:
        sup = stack.supervised_head
        if sup is None:
            return
        if sup.weight < 0:
            raise ConfigError(f"{side}.supervised_head.weight={sup.weight} must be >= 0")
        if sup.layers is None:
            check_layer(sup.layer, f"{side}.supervised_head.layer", side, stack.layers)
        check_layers(sup.layers, f"{side}.supervised_head.layers", side, stack.layers)
        check_head(sup.head, f"{side}.supervised_head.head", model.heads)

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        sup = stack.supervised_head
        where = f"layer {sup.layer}" if sup.layers is None else f"layers {sup.layers}"
        return [Claim(f"{side}.supervised_head ({where}, head {sup.head})", (sup.head,), frozenset(sup.placed))]

    def applies(self, stack: Any, layer: int) -> bool:
        return layer in stack.supervised_head.placed

    def feature(self, site: Site, settings: SupervisedHeadConfig) -> AttentionFeature:
        # λ / |layers| each: the parse loss is the average over the layers (module docstring)
        return SupervisedHead(site.head_dim, settings.head, settings.weight / len(settings.placed), name="parse")

    def hf_build(self, site: Site, settings: SupervisedHeadConfig, extras: dict[str, Any],
                 shared: dict[str, Any]) -> list[AttentionFeature]:
        return [SupervisedHead(site.head_dim, settings.head, settings.weight, extras["name"])]
