"""Tree Transformer constituent attention (Wang, Lee, Chen 2019, eq. 4–7; docs/methods.md §3).

Settings (flat keys of a stack config)::

    constituent: true            # in every layer of an encoder; one a-value record per forward
    constituent_diagonal: 1.0    # C_ii: 1 (the paper's empty product) or 1e-9 (the public code)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from synattn.attention import ConstituentAttention
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, register

CONSTITUENT_DIAGONAL = 1.0
"""The default of ``constituent_diagonal`` (C_ii: the paper's empty product), defined once."""


@dataclass
class ConstituentConfig:
    """Tree Transformer constituent attention (Wang et al. 2019; docs/methods.md §3): flat keys of a
    stack config.

    Attributes:
        constituent: in every layer of an encoder (one a-value record threaded through the layers).
        constituent_diagonal: C_ii of the prior: 1 (the paper's empty product) or 1e-9 (the public
            Tree Transformer code, for faithful reproductions).
    """

    constituent: bool = False
    constituent_diagonal: float = CONSTITUENT_DIAGONAL


@register
class Constituent(Method):
    """The constituent prior C on every head of every encoder layer."""

    name = "constituent"
    config = ConstituentConfig
    flat = True
    sides = ("encoder",)
    order = 40
    reads_hidden = True
    hf_fixed: ClassVar[dict[str, Any]] = {"constituent": True}  # a Hugging Face entry turns it on

    def active(self, stack: Any) -> bool:
        return stack.constituent

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return (f"{side}.constituent=true, but constituent attention (Tree Transformer) needs "
                f"bidirectional self-attention and the {side} is causal; use it in an encoder")

    def validate(self, model: Any, side: str, stack: Any) -> None:
        if not 0.0 <= stack.constituent_diagonal <= 1.0:
            raise ConfigError(f"{side}.constituent_diagonal={stack.constituent_diagonal} must lie in [0, 1]")
        if stack.constituent_diagonal != CONSTITUENT_DIAGONAL and not stack.constituent:
            raise ConfigError(f"{side}.constituent_diagonal={stack.constituent_diagonal}, but "
                              f"{side}.constituent is off")

    def layer_features(self, model: Any, stack: Any, site: Site, shared: dict[str, Any]
                       ) -> list[AttentionFeature]:
        if not stack.constituent:
            return []
        return [ConstituentAttention(site.d_model, site.layer, diagonal=stack.constituent_diagonal)]

    def hf_build(self, site: Site, settings: ConstituentConfig, extras: dict[str, Any],
                 shared: dict[str, Any]) -> list[AttentionFeature]:
        # the chosen layers are numbered 0, 1, ... in the order they are built (bottom first); their
        # a-values travel in each forward's carry
        index = shared["constituent_layers"] = shared.get("constituent_layers", -1) + 1
        return [ConstituentAttention(site.d_model, index, diagonal=settings.constituent_diagonal)]
