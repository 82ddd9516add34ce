"""Linear tree-distance bias: ALiBi's per-head slopes (Press, Smith, Lewis 2022, sec. 3) applied to
the distance between two tokens in the dependency tree instead of their distance in the sequence.

For head h of H, the logit of query i and key j gets ``−m_h · d(i, j)``, where d is the tree-distance
label (``SyntaxInputs.tree_dist``: the number of arcs between the two pieces, clipped at
``max_distance + 1`` for longer paths, extra tokens and padding; docs/methods.md §1) and the slopes
are ALiBi's geometric sequence ``m_h = 2^(−8 (h + 1) / H)`` (for H not a power of two: the slopes of
the power of two below H, then every other slope of twice that power). No parameters; with
``scale: 0`` the layer is plain attention. Choice we made: the slopes are fixed, as in ALiBi.

Settings (the clip ``max_distance`` is the stack's flat key, shared with ``relations``: see
:class:`TreeDistanceBiasConfig`)::

    tree_distance_bias: {layers: null, scale: 1.0}    # layers null: every layer
    max_distance: 8                                   # the stack's tree-distance clip (the default)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, check_layer, register
from synattn.syntax.inputs import require_syntax


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes (Press et al. 2022, sec. 3 and their reference code).

    Example:
        >>> alibi_slopes(4)
        [0.25, 0.0625, 0.015625, 0.00390625]
    """
    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    below = 2 ** int(math.floor(math.log2(heads)))
    if below == heads:
        return power_of_two(heads)
    return power_of_two(below) + power_of_two(2 * below)[0::2][: heads - below]


class TreeDistanceBias(AttentionFeature):
    """Adds ``−scale · m_h · tree_dist[b, i, j]`` to the logits of head h (see the module docstring).

    Reads rows ``query_start .. query_start + n − 1`` and columns ``0 .. m − 1`` of the labels, so
    cached decoding equals full recomputation when the labels are known in advance.

    Args:
        heads: number of heads H.
        scale: multiplies every slope.
    """

    slopes: Tensor  # a buffer: ``[H]`` the heads' slopes times ``scale``

    def __init__(self, heads: int, scale: float = 1.0):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(heads), dtype=torch.float32) * scale,
                             persistent=False)  # [H]

    def logit_bias(self, ctx: AttentionContext) -> Tensor:
        dist = require_syntax(ctx.syntax, "tree_dist", "tree-distance bias")
        start, n, m = ctx.query_start, ctx.query_length, ctx.key_length
        if dist.shape[-1] < m or dist.shape[-2] < start + n:
            raise ValueError(f"syntax field 'tree_dist' is {list(dist.shape)} but the attention covers "
                             f"{start + n} queries and {m} keys")
        dist = dist[:, None, start:start + n, :m].to(ctx.q.dtype)  # [B, 1, n, m]
        return -self.slopes.to(ctx.q.dtype)[None, :, None, None] * dist  # [B, H, n, m]


@dataclass
class TreeDistanceBiasConfig:
    """Settings of :class:`TreeDistanceBias`.

    The clip is not one of these settings: the bias reads the stack's ``tree_dist`` labels, clipped
    at the stack's flat ``max_distance`` (the setting of the ``tree_dist`` syntax field, declared
    with :class:`~synattn.methods.relations.RelationsConfig`; default
    :data:`~synattn.trees.relations.MAX_DISTANCE`, 8). A batch carries one ``tree_dist`` per side,
    so the bias and the ``tree_distance`` relations of a stack share that clip; a clip of its own
    would need a second field. In a Hugging Face model the clip is the ``max_distance`` of a
    ``relations`` entry reading ``tree_dist``, else the default.

    Attributes:
        layers: the layers that get the bias (None: every layer).
        scale: multiplies ALiBi's slopes (0: no bias).
    """

    layers: list[int] | None = None
    scale: float = 1.0


@register
class TreeDistanceBiasMethod(Method):
    """ALiBi-style linear tree-distance bias on the self-attention."""

    name = "tree_distance_bias"
    config = TreeDistanceBiasConfig
    sides = ("encoder", "decoder")
    order = 15  # an additive logit bias, after the relations
    fields_read = frozenset({"tree_dist"})

    def validate(self, model: Any, side: str, stack: Any) -> None:
        settings = stack.tree_distance_bias
        if settings is None:
            return
        if settings.scale < 0:
            raise ConfigError(f"{side}.tree_distance_bias.scale={settings.scale} must be >= 0")
        check_layer(settings.layers or [], f"{side}.tree_distance_bias.layers", side, stack.layers)

    def feature(self, site: Site, settings: TreeDistanceBiasConfig) -> AttentionFeature:
        return TreeDistanceBias(site.heads, settings.scale)
