"""Bird-Eye attention (Sha et al. 2022; docs/methods.md §4) in every block of a causal stack, or
in the blocks listed.

Settings::

    bird_eye: {variant: sg, pointer_weight: 1.0, pointer_head: null, layers: null}
    bird_eye: sg                   # the same, defaults for the rest
    bird_eye: {variant: sg, layers: [2]}   # the pointer loss on the last of 3 blocks only

``sg`` is BET(SG), a pointer loss toward the syntax hints (named ``pointer``); ``sf`` is BET(SF),
diagonal-free reweighted attention (our reconstruction). Older configs wrote ``pointer_weight``
and ``pointer_head`` next to ``bird_eye``; they are still read, with a ``FutureWarning``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from synattn.attention import BirdEyeReweighting, SyntaxGuidedPointer
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError, brief
from synattn.methods.base import Claim, HFAlias, Method, Option, Site, check_head, check_layers, register

BIRD_EYE = ("sg", "sf")
"""Bird-Eye variants (docs/methods.md §4): syntax-guided pointer loss, syntax-free reweighting."""

LEGACY_KEYS = ("pointer_weight", "pointer_head")
"""Keys that older stack configs held next to ``bird_eye`` (now inside its section)."""


@dataclass
class BirdEyeConfig:
    """Bird-Eye attention in the blocks of a causal stack (docs/methods.md §4).

    Attributes:
        variant: ``sg`` (BET(SG): pointer loss toward the syntax hints) or ``sf`` (BET(SF):
            diagonal-free reweighted attention).
        pointer_weight: λ_p, the weight of each block's pointer loss (``sg``; the losses of the
            blocks are summed, as in Sha et al. 2022, eq. 5).
        pointer_head: the head trained by the pointer loss (None: the head average; ``sg``).
        layers: the blocks that get it (None: every block), as ``relation_layers`` and
            ``tree_distance_bias.layers`` choose theirs.
    """

    variant: str = "sg"
    pointer_weight: float = 1.0
    pointer_head: int | None = None
    layers: list[int] | None = None


_DEFAULTS = {"pointer_weight": BirdEyeConfig.pointer_weight, "pointer_head": BirdEyeConfig.pointer_head}


@register
class BirdEye(Method):
    """BET(SG) (a pointer loss) or BET(SF) (a logit bias) in every layer of a causal stack (or in
    those of ``layers``: :meth:`Method.applies`)."""

    name = "bird_eye"
    config = BirdEyeConfig
    sides = ("decoder",)
    # in a Hugging Face model: the name of the BET(SG) loss, the width of BET(SF)'s scorer (None: d_model)
    hf_extras = (Option("name", str, "pointer"), Option("hidden", int | None, None, minimum=1))
    hf_aliases: ClassVar[dict[str, HFAlias]] = {
        "pointer": HFAlias({"variant": "sg"}, {"weight": "pointer_weight", "head": "pointer_head"}),
        "bird_eye_reweighting": HFAlias({"variant": "sf"})}

    def upgrade(self, data: dict[str, Any], where: str) -> dict[str, Any]:
        if isinstance(data.get("bird_eye"), str):
            data["bird_eye"] = {"variant": data["bird_eye"]}
        legacy = [key for key in LEGACY_KEYS if key in data]
        if not legacy:
            return data
        values = {key: data.pop(key) for key in legacy}
        section = data.get("bird_eye")
        if section is None and all(values[key] == _DEFAULTS[key] for key in legacy):
            return data  # the full dump of an older config without Bird-Eye attention
        if not isinstance(section, dict):
            key = next(k for k in legacy if values[k] != _DEFAULTS[k])
            raise ConfigError(f"{where}{key}={brief(values[key])} is set, but {where}bird_eye={brief(section)}: "
                              "the pointer loss exists with bird_eye='sg' only")
        if any(values[key] != _DEFAULTS[key] for key in legacy):
            warnings.warn(f"{where}{', '.join(legacy)}: write them inside {where}bird_eye "
                          f"({where}bird_eye: {{variant: sg, pointer_weight: …, pointer_head: …}}); "
                          "the flat keys will be removed", FutureWarning, stacklevel=2)
        data["bird_eye"] = {**section, **values}
        return data

    def coerce(self, stack: Any) -> None:
        if isinstance(stack.bird_eye, str):
            stack.bird_eye = BirdEyeConfig(stack.bird_eye)

    def reads(self, stack: Any) -> set[str]:
        return {"hints"} if self.active(stack) and stack.bird_eye.variant == "sg" else set()

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        return (f"{side}.bird_eye={stack.bird_eye.variant!r}, but Bird-Eye attention needs causal "
                f"self-attention (a decoder or language model) and the {side} is bidirectional")

    def validate(self, model: Any, side: str, stack: Any) -> None:
        bird = stack.bird_eye
        if bird is None:
            return
        where = f"{side}.bird_eye"
        if bird.variant not in BIRD_EYE:
            raise ConfigError(f"{where}={bird.variant!r}: use one of {', '.join(BIRD_EYE)} (or null)")
        if bird.pointer_weight < 0:
            raise ConfigError(f"{where}.pointer_weight={bird.pointer_weight} must be >= 0")
        check_layers(bird.layers, f"{where}.layers", side, stack.layers)
        head = bird.pointer_head
        if head is None:
            return
        if bird.variant != "sg":
            raise ConfigError(f"{where}.pointer_head={head} is set, but {where}={bird.variant!r}: "
                              "the pointer loss exists with bird_eye='sg' only")
        check_head(head, f"{where}.pointer_head", model.heads)

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        bird = stack.bird_eye
        layers = None if bird.layers is None else frozenset(bird.layers)
        head = bird.pointer_head
        return [] if head is None else [Claim(f"{side}.bird_eye.pointer_head={head}", (head,), layers)]

    def position(self, stack: Any) -> float:
        # BET(SF) is an additive logit bias (after the relations); the BET(SG) pointer loss reads
        # the final distribution, so it comes last
        return 20 if stack.bird_eye is not None and stack.bird_eye.variant == "sf" else 90

    def feature(self, site: Site, settings: BirdEyeConfig) -> AttentionFeature:
        if settings.variant == "sf":
            return BirdEyeReweighting(site.d_model, site.heads)
        return SyntaxGuidedPointer(settings.pointer_weight, settings.pointer_head, name="pointer")

    def hf_reads_hidden(self, settings: BirdEyeConfig) -> bool:
        return settings.variant == "sf"

    def hf_build(self, site: Site, settings: BirdEyeConfig, extras: dict[str, Any],
                 shared: dict[str, Any]) -> list[AttentionFeature]:
        if settings.variant == "sf":
            return [BirdEyeReweighting(site.d_model, site.heads, extras["hidden"])]
        return [SyntaxGuidedPointer(settings.pointer_weight, settings.pointer_head, extras["name"])]
