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

docs/methods.md §2: one head of one layer scores every query/key pair biaffinely from that head's own
query and key,

    s_tj = (q_t / sqrt(d_k)) U k_jᵀ + u · k_j         (U: d_k × d_k, u ∈ R^{d_k})

applies the masks (padding; causal in the decoder), and takes the softmax over j. That
distribution is the head's attention (it mixes the head's values) and is trained toward the gold
head with a cross-entropy loss weighted by λ::

    loss = λ · mean_{t with a target} −log p(t → head(t))

Choices we made: U starts as the identity and u at zero, so the head starts as a plain
dot-product head; the head's distribution is its own (other features' biases of the layer, like
relative positions, do not enter it); the loss is the mean over the positions with a target in
the batch (0 when there is none). With a causal mask, targets to the right of their position
are left out of the loss (docs/methods.md §2: such arcs cannot be attended). The targets are
``SyntaxInputs.head_targets`` (the subword tree's ``head_targets(project_to_subwords(...))``, so
the root word's final piece points to itself); without them the head still attends, with no loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import fill_masked, upcast
from synattn.errors import ConfigError, brief
from synattn.methods.base import Method, Site, check_head, check_layer, check_layers, register
from synattn.syntax.inputs import IGNORE_INDEX


class SupervisedHead(AttentionFeature):
    """A head whose distribution is a biaffine arc score, trained toward gold heads.

    Args:
        head_dim: d_k.
        head: index of the supervised head (default 0).
        weight: λ, the weight of its loss in the total loss (default 1.0, Deguchi et al. 2019).
        name: key of its loss in ``AttentionExtras.losses`` and of its log-distribution in
            ``AttentionExtras.head_log_probs``.

    Example:
        >>> head = SupervisedHead(head_dim=8, head=0, weight=1.0)
    """

    def __init__(self, head_dim: int, head: int = 0, weight: float = 1.0, name: str = "parse"):
        super().__init__()
        self.head = head
        self.weight = weight
        self.name = name
        self.bilinear = nn.Parameter(torch.eye(head_dim))  # U
        self.key_bias = nn.Parameter(torch.zeros(head_dim))  # u

    def scores(self, ctx: AttentionContext) -> Tensor:
        """Returns the masked arc scores ``s [batch_size, n, m]`` of the supervised head."""
        q = ctx.q[:, self.head] * ctx.scale  # [B, n, d_k]
        k = ctx.k[:, self.head]  # [B, m, d_k]
        s = torch.matmul(torch.matmul(q, self.bilinear.to(q.dtype)), k.transpose(-1, -2))  # [B, n, m]
        s = s + torch.matmul(k, self.key_bias.to(k.dtype))[:, None, :]  # [B, n, m]
        allowed = None if ctx.allowed is None else ctx.allowed[:, 0]  # [B | 1, n, m]
        return fill_masked(upcast(s), allowed)

    def claims(self) -> list[Claim]:
        return [self.claim((self.head,))]

    def head_distribution(self, ctx: AttentionContext) -> tuple[int, Tensor]:
        log_probs = torch.log_softmax(self.scores(ctx), dim=-1)  # [B, n, m]
        ctx.extras.head_log_probs[self.name] = log_probs
        targets = None if ctx.syntax is None else ctx.syntax.head_targets
        if targets is not None:
            ctx.extras.losses[self.name] = self.weight * self.loss(log_probs, targets, ctx)
        return self.head, log_probs.exp()

    def loss(self, log_probs: Tensor, targets: Tensor, ctx: AttentionContext) -> Tensor:
        """Cross-entropy of the head's distribution against ``targets`` ``[batch_size, M]``.

        Uses the targets of the call's queries (rows ``query_start ..``); targets outside the
        allowed keys (right of the position under a causal mask, padding) are left out.
        """
        start, n, m = ctx.query_start, ctx.query_length, ctx.key_length
        targets = targets[:, start:start + n].long()  # [B, n]
        valid = (targets >= 0) & (targets < m)
        if ctx.allowed is not None:
            allowed = ctx.allowed[:, 0].expand(targets.shape[0], n, m)  # [B, n, m]
            hit = allowed.gather(-1, targets.clamp(0, m - 1)[..., None])[..., 0]  # [B, n]
            valid &= hit
        targets = targets.masked_fill(~valid, IGNORE_INDEX)
        total = F.nll_loss(log_probs.transpose(1, 2), targets, ignore_index=IGNORE_INDEX,
                           reduction="sum")
        return total / valid.sum().clamp(min=1)


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
