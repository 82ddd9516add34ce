"""Specialized attention heads: query and key from POS or dependency-label embeddings.

docs/methods.md §1 (chap. 3, "Specialized Attention Heads"): in encoder layer 0, the chosen
heads take their query and key from bias-free linear maps of a linguistic label embedding
``l_i`` (POS tag or dependency label) instead of the token representation; their values come from
the token representation as usual, and the other heads are unchanged::

    q_i^h = l_i W^{Q,h}      k_i^h = l_i W^{K,h}      v_i^h = x_i W^{V,h}

Only queries and keys change, so the fused attention kernel still serves the layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
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
