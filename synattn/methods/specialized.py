"""Specialized heads: POS / dependency-label query-key heads in encoder layer 0 (docs/methods.md §1).

Settings::

    specialized_heads: {source: pos, heads: [0], label_dim: null}

docs/methods.md §1 (chap. 3, "Specialized Attention Heads"): in encoder layer 0, the chosen
heads take their query and key from bias-free linear maps of a linguistic label embedding
``l_i`` (POS tag or dependency label) instead of the token representation; their values come from
the token representation as usual, and the other heads are unchanged::

    q_i^h = l_i W^{Q,h}      k_i^h = l_i W^{K,h}      v_i^h = x_i W^{V,h}

Only queries and keys change, so the fused attention kernel still serves the layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, check_head, register
from synattn.syntax.inputs import require_syntax

LABEL_SOURCES = ("pos", "deprel")


class SpecializedHeads(AttentionFeature):
    """Heads whose query/key are projections of a label embedding (self-attention, no cache).

    Args:
        num_labels: size of the label vocabulary (POS tags or dependency labels).
        head_dim: d_k.
        heads: indices of the specialized heads (default: head 0).
        source: ``"pos"`` or ``"deprel"``: which ``SyntaxInputs`` field gives the labels.
        label_dim: width of the label embedding (default: ``head_dim``).

    Example:
        >>> feature = SpecializedHeads(num_labels=17, head_dim=8, heads=[0], source="pos")
    """

    cacheable = False
    heads: Tensor  # a buffer: the indices of the heads

    def __init__(self, num_labels: int, head_dim: int, heads: Sequence[int] = (0,),
                 source: str = "pos", label_dim: int | None = None):
        super().__init__()
        if source not in LABEL_SOURCES:
            raise ValueError(f"unknown specialized-head source {source!r}; use one of {LABEL_SOURCES}")
        if not heads or len(set(heads)) != len(heads):
            raise ValueError(f"specialized heads must be distinct and non-empty, got {list(heads)}")
        label_dim = label_dim or head_dim
        self.source = source
        self.head_dim = head_dim
        self.register_buffer("heads", torch.tensor(list(heads), dtype=torch.long), persistent=False)
        self.embedding = nn.Embedding(num_labels, label_dim)
        self.query = nn.Linear(label_dim, len(heads) * head_dim, bias=False)
        self.key = nn.Linear(label_dim, len(heads) * head_dim, bias=False)

    def claims(self) -> list[Claim]:
        return [self.claim(self.heads.tolist())]

    def queries_keys(self, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        if not ctx.is_self or ctx.query_start != 0 or ctx.query_length != ctx.key_length:
            raise ValueError("specialized heads work in plain self-attention only (no cache)")
        labels = require_syntax(ctx.syntax, self.source, "specialized heads")
        b, n = labels.shape
        e = self.embedding(labels.long())  # [B, n, label_dim]
        q = self.query(e).view(b, n, -1, self.head_dim).transpose(1, 2)  # [B, h_s, n, d_k]
        k = self.key(e).view(b, n, -1, self.head_dim).transpose(1, 2)  # [B, h_s, n, d_k]
        return (ctx.q.index_copy(1, self.heads, q.to(ctx.q.dtype)),
                ctx.k.index_copy(1, self.heads, k.to(ctx.k.dtype)))


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
