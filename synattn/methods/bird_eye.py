"""Bird-Eye attention (Sha et al. 2022; docs/methods.md §4) in every block of a causal stack, or
in the blocks listed.

Settings::

    bird_eye: {variant: sg, pointer_weight: 1.0, pointer_head: null, layers: null}
    bird_eye: sg                   # the same, defaults for the rest
    bird_eye: {variant: sg, layers: [2]}   # the pointer loss on the last of 3 blocks only

``sg`` is BET(SG), a pointer loss toward the syntax hints (named ``pointer``); ``sf`` is BET(SF),
diagonal-free reweighted attention (our reconstruction). Older configs wrote ``pointer_weight``
and ``pointer_head`` next to ``bird_eye``; they are still read, with a ``FutureWarning``.

**BET(SG)**, syntax-guided (:class:`SyntaxGuidedPointer`): the position t, which predicts token
t + 1, is trained to attend to its *syntax hint*: the nearest ancestor of token t + 1 in the
dependency tree that stands at or before t, else t itself
(``synattn.trees.relations.batch_syntax_hints``). Every block adds the pointer loss (Sha et al. 2022,
eq. 5)::

    L_p = − mean_t log A[t, hint(t)]          A: the block's attention, head-averaged (default)
                                                 or one head

and the training loss adds λ_p Σ_blocks L_p. Choices we made: the mean over the batch's
positions with a hint instead of the paper's sum, so that λ_p weighs it like a token-averaged LM
loss; λ_p = 1.0 by default (the paper's value is not recoverable from the sources); hints that
are ``IGNORE_INDEX``, padding, or not attendable under the call's mask are left out. The feature
leaves the attention itself unchanged, so incremental decoding with a key/value cache gives the
same attention as full recomputation; the loss is computed where the probabilities are
materialised: always in training mode, and in eval mode only when ``need_weights=True``.

**BET(SF)**, syntax-guidance-free (:class:`BirdEyeReweighting`). The sources give only a figure,
so the formula is **our reconstruction** (docs/methods.md §4)::

    D    = Q Kᵀ / sqrt(d_k), causal mask and diagonal mask (position 0 keeps its diagonal)
    H    = softmax(D) V                                   per head, concatenated: h_j ∈ R^d
    r_j  = FFN([x_j; h_j]) ∈ R^heads                      "high-levelness" of token j per head
    D'ij = D_ij + γ r_j                                   γ learned, initialised at 0
    out  = softmax(D') V                                  (same masks)

Token j's own information returns through the residual connection. With γ = 0 the layer is plain
diagonal-free causal attention. The FFN is ``Linear(2d, hidden) → ReLU → Linear(hidden, heads)``
with hidden = d / 4 by default (our choice, to keep the layer cheap); the first pass has no
dropout and sees no other feature's biases. In incremental decoding the levels r_j of past
positions are kept in the layer's key/value cache (``KVCache.extra``; h_j depends on positions
≤ j only, so they do not change), which beam search reorders with the keys and values.

The syntax hints travel in ``SyntaxInputs.hints``. BET(SG) and BET(SF) cannot share a layer: a
hint equal to the position itself would be masked by the diagonal-free mask. Both need causal
self-attention.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import fill_masked
from synattn.errors import ConfigError, brief
from synattn.methods.base import Method, Site, check_head, check_layers, register

BIRD_EYE_SLOT = ("Bird-Eye attention (BET(SG) or BET(SF); BET(SF)'s diagonal-free mask would hide a hint "
                 "equal to the position itself)")
"""The slot BET(SG) and BET(SF) claim: a layer has one of them (``synattn.attention.claims``)."""

LEVELS = "bird_eye.levels"
"""Key of BET(SF)'s kept levels ``[batch_size, heads, t]`` in ``KVCache.extra``."""


def pointer_loss(attention: Tensor, hints: Tensor, allowed: Tensor | None,
                 query_start: int = 0) -> Tensor:
    """Mean negative log attention on the hints, over the queries that have an attendable hint.

    Args:
        attention: ``[batch_size, n, m]`` attention distributions of the call's queries.
        hints: ``[batch_size, M]`` hints of the whole sequence (``M >= query_start + n``).
        allowed: ``[batch_size | 1, 1, n, m]`` the call's mask (None: every pair allowed).
        query_start: absolute position of the first query.

    Returns:
        Scalar loss (0 when no query has a hint).
    """
    b, n, m = attention.shape
    targets = hints[:, query_start:query_start + n].long()  # [B, n]
    valid = (targets >= 0) & (targets < m)
    index = targets.clamp(0, m - 1)[..., None]  # [B, n, 1]
    if allowed is not None:
        allowed = allowed[:, 0].expand(b, n, m)  # [B, n, m]
        own = torch.arange(query_start, query_start + n, device=attention.device).clamp(max=m - 1)
        valid &= allowed.gather(-1, own.expand(b, n)[..., None])[..., 0]  # the query is no padding
        valid &= allowed.gather(-1, index)[..., 0]  # the hint can be attended
    picked = attention.gather(-1, index)[..., 0]  # [B, n]
    tiny = torch.finfo(picked.dtype).tiny
    nll = -torch.log(picked.clamp(min=tiny)).masked_fill(~valid, 0.0)
    return nll.sum() / valid.sum().clamp(min=1)


class SyntaxGuidedPointer(AttentionFeature):
    """BET(SG): the pointer loss that drives a block's attention to the syntax hints.

    Args:
        weight: λ_p (default 1.0).
        head: the head whose attention is trained (None: the head-averaged attention).
        name: key of the loss in ``AttentionExtras.losses``.

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> from synattn.syntax.inputs import SyntaxInputs
        >>> attn = MultiheadAttention(16, 4, features=[SyntaxGuidedPointer()])
        >>> syntax = SyntaxInputs(hints=torch.tensor([[0, 0, 1, 3]]))
        >>> out, extras = attn(torch.randn(1, 4, 16), causal=True, syntax=syntax)
        >>> sorted(extras.losses)
        ['pointer']
    """

    causal_only = True

    def __init__(self, weight: float = 1.0, head: int | None = None, name: str = "pointer"):
        super().__init__()
        self.weight, self.head, self.name = weight, head, name

    def claims(self) -> list[Claim]:
        return [self.claim(() if self.head is None else (self.head,), slot=BIRD_EYE_SLOT)]

    @property
    def needs_probs(self) -> bool:  # type: ignore[override]  # the loss is for training
        return self.training

    def adjust_probs(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        hints = None if ctx.syntax is None else ctx.syntax.hints
        if hints is None:
            if self.training:
                raise ValueError("BET(SG) pointer loss needs syntax field 'hints' in training")
            return probs
        attention = probs.mean(dim=1) if self.head is None else probs[:, self.head]  # [B, n, m]
        loss = pointer_loss(attention, hints, ctx.allowed, ctx.query_start)
        ctx.extras.losses[self.name] = self.weight * loss
        return probs


def diagonal_free_bias(query_start: int, query_length: int, key_length: int, dtype: torch.dtype,
                       device: torch.device | None = None) -> Tensor:
    """Additive mask of the diagonal: the dtype's most negative finite value at key = query,
    except for the query at absolute position 0 (it has no other key).

    Returns:
        ``[1, 1, n, m]``.

    Example:
        >>> (diagonal_free_bias(0, 3, 3, torch.float32) < 0).int()[0, 0].tolist()
        [[0, 0, 0], [0, 1, 0], [0, 0, 1]]
    """
    rows = torch.arange(query_start, query_start + query_length, device=device)
    cols = torch.arange(key_length, device=device)
    diagonal = (cols[None, :] == rows[:, None]) & (rows[:, None] > 0)  # [n, m]
    bias = torch.zeros(query_length, key_length, dtype=dtype, device=device)
    return bias.masked_fill(diagonal, torch.finfo(dtype).min)[None, None]  # [1, 1, n, m]


class BirdEyeReweighting(AttentionFeature):
    """BET(SF): diagonal-free attention reweighted toward "high-level" tokens (our reconstruction).

    Args:
        d_model: model width d.
        heads: number of heads H of the attention.
        hidden: hidden width of the level FFN (default d / 4).

    Example:
        >>> from synattn.attention.core import MultiheadAttention
        >>> attn = MultiheadAttention(16, 4, features=[BirdEyeReweighting(16, 4)])
        >>> out, _ = attn(torch.randn(2, 5, 16), causal=True)
        >>> out.shape
        torch.Size([2, 5, 16])
    """

    causal_only = True
    reads_hidden = True

    def __init__(self, d_model: int, heads: int, hidden: int | None = None):
        super().__init__()
        hidden = hidden or max(d_model // 4, 1)
        self.heads = heads
        self.level = nn.Sequential(nn.Linear(2 * d_model, hidden), nn.ReLU(),
                                   nn.Linear(hidden, heads))
        self.gamma = nn.Parameter(torch.zeros(()))  # γ = 0: plain diagonal-free attention

    def claims(self) -> list[Claim]:
        return [self.claim(slot=BIRD_EYE_SLOT)]

    def levels(self, ctx: AttentionContext, diagonal: Tensor) -> Tensor:
        """Returns r ``[batch_size, heads, n]`` of the call's queries (first attention pass)."""
        mask = fill_masked(diagonal.to(ctx.q.dtype), ctx.allowed)  # [B | 1, 1, n, m]
        h = F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask, scale=ctx.scale)
        b, _, n, _ = h.shape
        h = h.transpose(1, 2).reshape(b, n, -1)  # [B, n, d]
        assert ctx.x is not None  # (reads_hidden: the attention passes its input)
        return self.level(torch.cat([ctx.x, h.to(ctx.x.dtype)], dim=-1)).transpose(1, 2)  # [B, H, n]

    def _with_past(self, r: Tensor, ctx: AttentionContext) -> Tensor:
        """Returns r of every key ``[batch_size, heads, m]``: the cached past levels, then ``r``.

        With a cache, the levels of all positions so far are stored in ``ctx.cache.extra``.
        """
        if ctx.query_start > 0:
            past = None if ctx.cache is None else ctx.cache.extra.get(LEVELS)
            if past is None or past.shape[-1] != ctx.query_start or past.shape[0] != r.shape[0]:
                raise ValueError("BET(SF) incremental decoding needs the levels of the previous "
                                 "steps of the same sequences in the cache (decode from position 0)")
            r = torch.cat([past, r], dim=-1)  # [B, H, m]
        if r.shape[-1] != ctx.key_length:
            raise ValueError(f"BET(SF) has levels for {r.shape[-1]} positions but the attention "
                             f"has {ctx.key_length} keys")
        if ctx.cache is not None:
            ctx.cache.extra[LEVELS] = r
        return r

    def logit_bias(self, ctx: AttentionContext) -> Tensor:
        diagonal = diagonal_free_bias(ctx.query_start, ctx.query_length, ctx.key_length,
                                      ctx.q.dtype, ctx.q.device)  # [1, 1, n, m]
        r = self._with_past(self.levels(ctx, diagonal), ctx)  # [B, H, m]
        return diagonal + self.gamma.to(r.dtype) * r[:, :, None, :]  # [B, H, n, m]


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
