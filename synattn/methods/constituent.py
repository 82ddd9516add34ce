"""Tree Transformer constituent attention (Wang, Lee, Chen 2019, eq. 4–7; docs/methods.md §3).

Settings (flat keys of a stack config)::

    constituent: true            # in every layer of an encoder; one a-value record per forward
    constituent_diagonal: 1.0    # C_ii: 1 (the paper's empty product) or 1e-9 (the public code)

Every layer l estimates, for each pair of adjacent words, the probability a^l_i that words i and
i + 1 lie in one constituent, and multiplies every head's attention by the constituent prior C::

    s_{i,i±1} = q_i · k_{i±1} / (d / 2)               one head of width d
    p_{i,i+1}, p_{i,i−1} = softmax(s_{i,i+1}, s_{i,i−1})   over the neighbours i has
    â_i   = sqrt(p_{i,i+1} · p_{i+1,i} + ε)
    a^l_i = a^{l−1}_i + (1 − a^{l−1}_i) â^l_i               a^{−1} = 0 (hierarchical constraint)
    C_ij  = Π_{k=min(i,j)}^{max(i,j)−1} a_k                 C_ii = 1, symmetric
    E     = C ⊙ softmax(Q Kᵀ / sqrt(d_k))                   not renormalised, C shared by heads

C is computed in log space from one cumulative sum of log a (``[B, n, n]``, no product loop).

Choices we made: q_i · k_j is parametrised directly as the bilinear form x_i M x_jᵀ + w · x_j
(M: d × d, w ∈ R^d). This is the same family of functions as the product of two d × d
projections with biases (the terms that depend on i alone cancel in the softmax over i's
neighbours) at half the cost: one d × d matmul per token instead of two. The neighbour scores
read the attention's query input ``x`` (the output of the block's LayerNorm in a pre-LN block,
the previous block's normalised output in a post-LN one), with no LayerNorm of their own; C_ii = 1,
the empty product (the public code's C has 1e-9 on its diagonal, so a word hardly attends to
itself there; ``diagonal=1e-9`` reproduces it, an option for faithful reproductions only); â is
clipped to at most 1 so that C ∈ [0, 1] also in float64; edges touching
padding are not constituent links (their a is 0 in the record and they never enter C, whose
rows and columns at padding are 0). Gradients flow into a^{l−1} from the layers above, as in
the public code.

Threading the a-values through an encoder stack: every layer's feature gets its layer index; the
a-values of one forward pass travel in that forward's ``carry`` (a dict the caller creates for
each forward and passes to every layer, :class:`~synattn.attention.feature.AttentionContext`),
never on the modules. Layer 0 starts the forward's :class:`ConstituentState` in the carry; layer l
reads a^{l−1} from it and writes its own a^l, so the layers must run in the order of their
indices. After the forward, :func:`recorded_links` gives the ``[batch_size, layers, n − 1]``
a-values that :func:`synattn.trees.induce.induce_trees` decodes into constituency trees::

    layers = [MultiheadAttention(d, h, features=[ConstituentAttention(d, layer=l)])
              for l in range(10)]
    carry = {}                             # one per forward
    for attn in layers:                    # run the encoder: layer 0, 1, ..., 9
        x = x + attn(x, carry=carry)[0]
    a = recorded_links(carry)              # [B, 10, n − 1]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import bidirectional_keys, upcast
from synattn.errors import ConfigError
from synattn.methods.base import Method, Site, register


def neighbour_links(right: Tensor, left: Tensor, valid: Tensor, eps: float = 1e-9) -> Tensor:
    """Link probabilities â_i between adjacent positions i and i + 1 (docs/methods.md §3).

    Args:
        right: ``[batch_size, n − 1]`` scores s_{i,i+1} (position i toward its right neighbour).
        left: ``[batch_size, n − 1]`` scores s_{i+1,i} (position i + 1 toward its left neighbour).
        valid: ``[batch_size, n]`` bool, False at padding (padding is a suffix).
        eps: ε inside the square root.

    Returns:
        ``[batch_size, n − 1]`` â in [sqrt(ε), 1]; entries whose edge touches padding are
        meaningless (mask them with ``valid[:, 1:]``).
    """
    if right.shape[1] == 0:
        return right
    edge = valid[:, 1:]  # [B, n−1] both ends valid (padding is a suffix)
    # p_{i,i+1}: i has a left neighbour unless i = 0
    has_left = torch.ones_like(edge)
    has_left[:, 0] = False
    left_prev = torch.cat([left[:, :1], left[:, :-1]], dim=1)  # [B, n−1] s_{i,i−1}
    p_right = torch.where(has_left, torch.sigmoid(right - left_prev), torch.ones_like(right))
    # p_{i+1,i}: i + 1 has a right neighbour unless edge i + 1 is missing or padding
    has_right = torch.cat([edge[:, 1:], torch.zeros_like(edge[:, :1])], dim=1)  # [B, n−1]
    right_next = torch.cat([right[:, 1:], right[:, -1:]], dim=1)  # [B, n−1] s_{i+1,i+2}
    p_left = torch.where(has_right, torch.sigmoid(left - right_next), torch.ones_like(left))
    return torch.sqrt(p_right * p_left + eps).clamp(max=1.0)


def hierarchical_links(a_hat: Tensor, prior: Tensor | None) -> Tensor:
    """a^l = a^{l−1} + (1 − a^{l−1}) â^l, with a^{−1} = 0 (``prior`` None); shapes ``[B, n − 1]``."""
    return a_hat if prior is None else prior + (1.0 - prior) * a_hat


def constituent_prior(a: Tensor, valid: Tensor, diagonal: float = 1.0) -> Tensor:
    """The constituent prior C_ij = Π_{k=min(i,j)}^{max(i,j)−1} a_k, from cumulative log sums.

    Args:
        a: ``[batch_size, n − 1]`` link probabilities in (0, 1].
        valid: ``[batch_size, n]`` bool, False at padding.
        diagonal: C_ii (1, the empty product; the public code has 1e-9).

    Returns:
        ``[batch_size, n, n]`` C: symmetric, C_ii = ``diagonal`` at valid positions, 0 in the
        rows and columns of padding.

    Example:
        >>> c = constituent_prior(torch.tensor([[0.5, 0.2]], dtype=torch.float64),
        ...                       torch.ones(1, 3, dtype=torch.bool))
        >>> c[0].round(decimals=3).tolist()
        [[1.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 1.0]]
    """
    edge = valid[:, 1:]  # [B, n−1]
    log_a = torch.log(a.masked_fill(~edge, 1.0))  # [B, n−1]
    cum = torch.cat([log_a.new_zeros(a.shape[0], 1), log_a.cumsum(dim=1)], dim=1)  # [B, n]
    diff = cum[:, None, :] - cum[:, :, None]  # [B, n, n] (i, j) -> Σ_{k=i}^{j−1} log a_k for j ≥ i
    n = valid.shape[1]
    upper = torch.ones(n, n, dtype=torch.bool, device=a.device).triu()  # j ≥ i
    log_c = torch.where(upper, diff, -diff)  # [B, n, n] symmetric
    pairs = valid[:, :, None] & valid[:, None, :]  # [B, n, n]
    c = log_c.exp() * pairs
    if diagonal != 1.0:
        eye = torch.eye(n, dtype=torch.bool, device=a.device)
        c = torch.where(eye & pairs, torch.full_like(c, diagonal), c)
    return c


CARRY_KEY = "constituent"
"""Key of the forward's :class:`ConstituentState` in its carry."""


class ConstituentState:
    """The a-values of the constituent layers of one forward pass, threaded from layer to layer.

    Made by layer 0 in the forward's carry; layer l > 0 reads the a^{l−1} written by layer
    l − 1 of the same forward. Not a module: it lives as long as the forward's carry.

    Example:
        >>> state = ConstituentState()
        >>> state.prior(0) is None
        True
    """

    def __init__(self) -> None:
        self._a: dict[int, Tensor] = {}

    def prior(self, layer: int) -> Tensor | None:
        """Returns a^{layer−1} ``[batch_size, n − 1]`` (None for layer 0)."""
        if layer == 0:
            return None
        if layer - 1 not in self._a:
            raise ValueError(f"constituent layer {layer} runs before layer {layer - 1} recorded its "
                             "a-values in this forward's carry; number the layers 0, 1, ... in the "
                             "order they run and pass them one carry")
        return self._a[layer - 1]

    def record(self, layer: int, a: Tensor) -> None:
        """Stores a^layer ``[batch_size, n − 1]`` (a recomputation, e.g. by activation
        checkpointing, stores it again)."""
        self._a[layer] = a

    def stack(self) -> Tensor:
        """Returns the recorded a-values ``[batch_size, layers, n − 1]``, bottom layer first."""
        if not self._a:
            raise ValueError("no constituent layer has run yet")
        layers = sorted(self._a)
        if layers != list(range(len(layers))):
            raise ValueError(f"constituent layers {layers} are not 0, 1, ...")
        return torch.stack([self._a[layer] for layer in layers], dim=1)


def recorded_links(carry: dict | None) -> Tensor | None:
    """The a-values ``[batch_size, layers, n − 1]`` that the constituent layers of one forward
    recorded in its ``carry`` (None when no constituent layer ran in it)."""
    state = None if carry is None else carry.get(CARRY_KEY)
    return None if state is None else state.stack()


class ConstituentAttention(AttentionFeature):
    """Tree Transformer constituent prior C on every head (bidirectional self-attention only).

    Args:
        d_model: model width d (the neighbour scores are a ``d × d`` bilinear form).
        layer: index of this layer among the constituent layers of the stack (0 = bottom:
            a^{−1} = 0; layer l reads a^{l−1} from the carry of the forward).
        eps: ε in â = sqrt(p p + ε).
        diagonal: C_ii: 1 (the paper's empty product, default) or the public code's 1e-9.

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> attn = MultiheadAttention(16, 4, features=[ConstituentAttention(16, 0)])
        >>> carry = {}
        >>> out, _ = attn(torch.randn(2, 5, 16), carry=carry)
        >>> recorded_links(carry).shape
        torch.Size([2, 1, 4])
    """

    needs_probs = True
    cacheable = False
    bidirectional_only = True
    reads_hidden = True

    def __init__(self, d_model: int, layer: int = 0, eps: float = 1e-9, diagonal: float = 1.0):
        super().__init__()
        if layer < 0:
            raise ValueError(f"constituent layer index must be >= 0, got {layer}")
        if not 0.0 <= diagonal <= 1.0:
            raise ValueError(f"the diagonal of C must lie in [0, 1], got {diagonal}")
        self.layer, self.eps, self.diagonal = layer, eps, diagonal
        # q_i · k_j = x_i M x_jᵀ + w · x_j (+ terms of i alone, which the softmax over i's
        # neighbours cancels); M starts with the variance of a product of two default projections
        self.bilinear = nn.Parameter(torch.randn(d_model, d_model) / (3 * d_model ** 0.5))  # M
        self.key_bias = nn.Parameter(torch.zeros(d_model))  # w

    def claims(self) -> list[Claim]:
        return [self.claim(slot="constituent prior")]

    def neighbour_scores(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Returns s_{i,i+1} and s_{i+1,i}, each ``[batch_size, n − 1]``, of ``x [batch_size, n, d]``."""
        x = upcast(x)
        y = torch.matmul(x, self.bilinear.to(x.dtype))  # [B, n, d] x_i M
        pair = torch.matmul(y, x.transpose(1, 2))  # [B, n, n] x_i M x_j (a bmm beats slicing)
        key = torch.matmul(x, self.key_bias.to(x.dtype))  # [B, n] w · x_j
        scale = 2.0 / x.shape[-1]  # divide by d / 2
        right = (pair.diagonal(1, 1, 2) + key[:, 1:]) * scale  # [B, n−1] s_{i,i+1}
        left = (pair.diagonal(-1, 1, 2) + key[:, :-1]) * scale  # [B, n−1] s_{i+1,i}
        return right, left

    def links(self, x: Tensor, valid: Tensor, prior: Tensor | None) -> Tensor:
        """Returns this layer's a^l ``[batch_size, n − 1]`` (0 on edges touching padding)."""
        a_hat = neighbour_links(*self.neighbour_scores(x), valid, self.eps)  # [B, n−1]
        return hierarchical_links(a_hat, prior).masked_fill(~valid[:, 1:], 0.0)

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        keys = bidirectional_keys(ctx, "constituent attention")
        assert ctx.x is not None  # (reads_hidden: the attention passes its input)
        b, n = ctx.x.shape[:2]
        valid = (torch.ones(b, n, dtype=torch.bool, device=ctx.x.device) if keys is None
                 else keys.expand(b, n))  # [B, n]
        # layer 0 starts this forward's record; an empty one makes prior() name the missing layer
        state = (ctx.carry.setdefault(CARRY_KEY, ConstituentState()) if self.layer == 0
                 else ctx.carry.get(CARRY_KEY) or ConstituentState())
        prior = state.prior(self.layer)
        if prior is not None and prior.shape != (b, n - 1):
            raise ValueError(f"constituent layer {self.layer} got a^{self.layer - 1} of shape "
                             f"{list(prior.shape)} for a batch of shape [{b}, {n}]")
        a = self.links(ctx.x, valid, prior)  # [B, n−1]
        state.record(self.layer, a)
        prior_c = constituent_prior(a, valid, self.diagonal)  # [B, n, n]
        return probs * prior_c[:, None].to(probs.dtype)  # [B, H, n, n]


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
