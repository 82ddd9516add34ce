"""Relative attention over sequential, tree-distance and tree-traversal relations (Shaw,
Uszkoreit, Vaswani 2018, eq. 3–4; docs/methods.md §1).

Settings (flat keys of a stack config)::

    relations: [tree_distance, sequential]   # any of sequential, tree_distance, traversal; summed
    relation_layers: null                     # the layers that get them (null: every layer)
    max_relative_position: 16                 # Shaw's clipping distance k
    max_distance: 8                           # largest tree distance with its own label
    max_traversal: 4                          # longest traversal path with its own label
    relative_values: true                     # also learn value embeddings a^V

The attention (docs/methods.md §1, chap. 3, eq. 2–3)::

    e_ij = q_i · (k_j + a^K_{r(i,j)}) / sqrt(d_k)        z_i = Σ_j α_ij (v_j + a^V_{r(i,j)})

where r(i, j) is a discrete relation label and a^K, a^V are tables ``[num_labels, d_k]`` (one per
layer and relation, shared by the heads). The relation is either sequential, clip(j − i, −k, k),
or read from the batch's tree labels (``SyntaxInputs.tree_dist`` / ``.traversal``). Several
relation features in one layer add up: tree + Shaw is the sum of both key (and value) embeddings.

Efficiency (docs/methods.md §1): the key term is computed per label, ``q · a^K_L`` → ``[B, H, n, L]``, then
gathered by label into ``[B, H, n, m]``; the value term is ``Σ_L (Σ_{j: r(i,j)=L} α_ij) a^V_L``, a
scatter-add of the probabilities into ``[B, H, n, L]`` followed by one matmul. No
``[B, H, n, m, d_k]`` (nor ``[B, n, m, d_k]``) tensor is ever built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, check_layer, register
from synattn.syntax.inputs import require_syntax
from synattn.trees.relations import MAX_DISTANCE, MAX_TRAVERSAL, check_label_clips, distance_vocab, traversal_vocab


def label_logits(q: Tensor, table: Tensor, labels: Tensor) -> Tensor:
    """Relative key term ``q_i · a_{r(i,j)}`` by label-gather (unscaled).

    Args:
        q: ``[batch_size, heads, n, d_k]`` queries.
        table: ``[num_labels, d_k]`` key embeddings.
        labels: ``[batch_size | 1, n, m]`` int labels in ``[0, num_labels)``.

    Returns:
        ``[batch_size, heads, n, m]``.
    """
    per_label = torch.matmul(q, table.t())  # [B, H, n, L]
    b, h, n, _ = q.shape
    index = labels.long().unsqueeze(1).expand(b, h, n, labels.shape[-1])  # [B, H, n, m]
    return per_label.gather(-1, index)  # [B, H, n, m]


def label_values(probs: Tensor, table: Tensor, labels: Tensor) -> Tensor:
    """Relative value term ``Σ_j α_ij a_{r(i,j)}`` by scatter-add over labels.

    Args:
        probs: ``[batch_size, heads, n, m]`` attention probabilities.
        table: ``[num_labels, d_k]`` value embeddings.
        labels: ``[batch_size | 1, n, m]`` int labels in ``[0, num_labels)``.

    Returns:
        ``[batch_size, heads, n, d_k]``.
    """
    b, h, n, m = probs.shape
    index = labels.long().unsqueeze(1).expand(b, h, n, m)  # [B, H, n, m]
    mass = probs.new_zeros(b, h, n, table.shape[0]).scatter_add(-1, index, probs)  # [B, H, n, L]
    return torch.matmul(mass, table.to(mass.dtype))  # [B, H, n, d_k]


def sequential_labels(query_start: int, query_length: int, key_length: int, max_relative: int,
                      device: torch.device | None = None) -> Tensor:
    """Shaw's sequential labels ``clip(j − i, −k, k) + k`` for queries at absolute positions
    ``query_start .. query_start + n − 1`` and keys at ``0 .. m − 1``.

    Returns:
        ``[1, n, m]`` long, values in ``[0, 2k]``.

    Example:
        >>> sequential_labels(0, 3, 3, 1)[0].tolist()
        [[1, 2, 2], [0, 1, 2], [0, 0, 1]]
    """
    rows = torch.arange(query_start, query_start + query_length, device=device)
    cols = torch.arange(key_length, device=device)
    rel = (cols[None, :] - rows[:, None]).clamp(-max_relative, max_relative)  # [n, m]
    return (rel + max_relative)[None]  # [1, n, m]


class RelativeEmbedding(AttentionFeature):
    """Relative key (and value) embeddings indexed by a relation label (base class).

    Subclasses say where the labels come from (``labels``). Tables start at
    ``N(0, 1/d_k)``-scaled random values like the projections' outputs.

    Args:
        num_labels: size of the label vocabulary L.
        head_dim: d_k.
        values: also learn value embeddings a^V (Shaw; on by default).
    """

    def __init__(self, num_labels: int, head_dim: int, values: bool = True):
        super().__init__()
        self.num_labels, self.head_dim = num_labels, head_dim
        self.key_table = nn.Parameter(torch.randn(num_labels, head_dim) / math.sqrt(head_dim))
        self.value_table = (nn.Parameter(torch.randn(num_labels, head_dim) / math.sqrt(head_dim))
                            if values else None)
        self.needs_probs = values

    def labels(self, ctx: AttentionContext) -> Tensor:
        """Returns ``[batch_size | 1, n, m]`` int labels of the call's query/key pairs."""
        raise NotImplementedError

    def logit_bias(self, ctx: AttentionContext) -> Tensor:
        table = self.key_table.to(ctx.q.dtype) * ctx.scale  # scale L rows, not n × m logits
        return label_logits(ctx.q, table, self.labels(ctx))

    def value_term(self, probs: Tensor, ctx: AttentionContext) -> Tensor | None:
        if self.value_table is None:
            return None
        return label_values(probs, self.value_table, self.labels(ctx))


class RelativePositions(RelativeEmbedding):
    """Shaw et al. 2018 sequential relative positions, labels clip(j − i, −k, k).

    Works in incremental decoding: the labels follow the absolute query positions.

    Args:
        max_relative: the clipping distance k (2k + 1 labels).
        head_dim: d_k.
        values: also learn value embeddings.
    """

    def __init__(self, max_relative: int, head_dim: int, values: bool = True):
        super().__init__(2 * max_relative + 1, head_dim, values)
        self.max_relative = max_relative

    def labels(self, ctx: AttentionContext) -> Tensor:
        return sequential_labels(ctx.query_start, ctx.query_length, ctx.key_length,
                                 self.max_relative, ctx.q.device)


class TreeRelations(RelativeEmbedding):
    """Tree-distance or tree-traversal relative embeddings (docs/methods.md §1).

    Reads ``[batch_size, M, M]`` labels from the batch (``SyntaxInputs.tree_dist`` or
    ``.traversal``) and uses rows ``query_start .. query_start + n − 1`` and columns ``0 .. m − 1``,
    so incremental decoding works when the labels of the whole sequence are known in advance
    (teacher forcing, scoring a given target); for free generation they are not.

    Args:
        field: ``"tree_dist"`` or ``"traversal"``.
        num_labels: vocabulary size (``max_distance + 2``, or ``len(traversal_vocab(...))``).
        head_dim: d_k.
        values: also learn value embeddings.
    """

    def __init__(self, field: str, num_labels: int, head_dim: int, values: bool = True):
        if field not in ("tree_dist", "traversal"):
            raise ValueError(f"unknown tree relation field {field!r}; use 'tree_dist' or 'traversal'")
        super().__init__(num_labels, head_dim, values)
        self.field = field

    def labels(self, ctx: AttentionContext) -> Tensor:
        labels = require_syntax(ctx.syntax, self.field, "tree relative attention")
        start, n, m = ctx.query_start, ctx.query_length, ctx.key_length
        if labels.shape[-1] < m or labels.shape[-2] < start + n:
            raise ValueError(f"syntax field '{self.field}' is {list(labels.shape)} but the "
                             f"attention covers {start + n} queries and {m} keys")
        labels = labels[:, start:start + n, :m]  # [B, n, m]
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"syntax field '{self.field}' holds {labels.dtype} values; labels are integer ids")
        if labels.device.type == "cpu" and labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) \
                < self.num_labels:  # (on an accelerator this check would wait for it: left to the lookup)
            raise ValueError(f"syntax field '{self.field}' has labels {int(labels.min())}..{int(labels.max())}, but "
                             f"this table has {self.num_labels} (0..{self.num_labels - 1}): build it with the "
                             "clip the labels were made with")
        return labels


RELATIONS = ("sequential", "tree_distance", "traversal")
"""Relation kinds of relative attention: Shaw positions, tree distance, tree traversal."""

FIELDS = {"tree_distance": "tree_dist", "traversal": "traversal"}
"""The syntax field each tree relation reads."""

MAX_RELATIVE_POSITION = 16
"""The default of ``max_relative_position`` (Shaw's clipping distance k), defined once."""


def relation_labels(field: str, max_distance: int, max_traversal: int) -> int:
    """Number of tree-relation labels: the vocabulary of ``field`` plus one ``outside`` label
    (special tokens and padding, :mod:`synattn.hf.align`)."""
    vocab = distance_vocab(max_distance) if field == "tree_dist" else traversal_vocab(max_traversal)
    return len(vocab) + 1


@dataclass
class RelationsConfig:
    """Relative attention of the self-attention (Shaw et al. 2018; docs/methods.md §1): flat keys
    of a stack config.

    Attributes:
        relations: any of ``sequential`` (Shaw), ``tree_distance``, ``traversal``; several are summed.
        relation_layers: the layers that get them (None: every layer).
        max_relative_position: Shaw's clipping distance k.
        max_distance: largest tree distance with its own label.
        max_traversal: longest traversal path with its own label.
        relative_values: also learn value embeddings a^V.
    """

    relations: list[str] = field(default_factory=list)
    relation_layers: list[int] | None = None
    max_relative_position: int = MAX_RELATIVE_POSITION
    max_distance: int = MAX_DISTANCE
    max_traversal: int = MAX_TRAVERSAL
    relative_values: bool = True


@register
class Relations(Method):
    """Shaw relative positions and tree-label relations on the self-attention."""

    name = "relations"
    config = RelationsConfig
    flat = True
    sides = ("encoder", "decoder")
    order = 10

    def active(self, stack: Any) -> bool:
        return bool(stack.relations)

    def reads(self, stack: Any) -> set[str]:
        return {FIELDS[r] for r in stack.relations if r in FIELDS}

    def validate(self, model: Any, side: str, stack: Any) -> None:
        for relation in stack.relations:
            if relation not in RELATIONS:
                raise ConfigError(f"{side}.relations: unknown relation {relation!r}; known: {', '.join(RELATIONS)}")
        if len(set(stack.relations)) != len(stack.relations):
            raise ConfigError(f"{side}.relations={stack.relations} lists a relation twice")
        if stack.relation_layers is not None:
            if not stack.relations:
                raise ConfigError(f"{side}.relation_layers is set but {side}.relations is empty")
            check_layer(stack.relation_layers, f"{side}.relation_layers", side, stack.layers)
        for name in ("max_relative_position", "max_distance", "max_traversal"):
            if getattr(stack, name) < 1:
                raise ConfigError(f"{side}.{name}={getattr(stack, name)} must be at least 1")
        check_label_clips(stack.max_distance, stack.max_traversal,
                          (f"{side}.max_distance", f"{side}.max_traversal"))

    def layer_features(self, model: Any, stack: Any, site: Site, shared: dict[str, Any]
                       ) -> list[AttentionFeature]:
        if stack.relation_layers is not None and site.layer not in stack.relation_layers:
            return []
        values = stack.relative_values
        features: list[AttentionFeature] = []
        for relation in stack.relations:
            if relation == "sequential":
                features.append(RelativePositions(stack.max_relative_position, site.head_dim, values))
            elif relation == "tree_distance":
                features.append(TreeRelations("tree_dist", len(distance_vocab(stack.max_distance)),
                                              site.head_dim, values))
            else:
                features.append(TreeRelations("traversal", len(traversal_vocab(stack.max_traversal)),
                                              site.head_dim, values))
        return features
