"""Decoding state (key/value caches) and the outputs of the models."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from synattn.attention import AttentionExtras, KVCache


@dataclass
class LayerCache:
    """The caches of one decoder layer (features' own state lives in ``KVCache.extra``)."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)

    def reorder(self, index: Tensor) -> None:
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)


@dataclass
class DecoderState:
    """What incremental decoding carries from one step to the next.

    Attributes:
        layers: one cache per decoder layer, or None to recompute the whole prefix every step.
        padding_mask: ``[batch_size, t]`` bool, True at padding among the tokens fed so far.
        memory: ``[batch_size, n, d]`` encoder output (translation), else None.
        memory_padding_mask: ``[batch_size, n]`` bool, True at source padding.
        encoder_extras: the encoder's auxiliary outputs (losses, attentions), when there is one.
    """

    layers: list[LayerCache] | None
    padding_mask: Tensor | None = None
    memory: Tensor | None = None
    memory_padding_mask: Tensor | None = None
    encoder_extras: StackExtras | None = None

    @property
    def length(self) -> int:
        """Number of tokens fed so far (the position of the next one)."""
        return 0 if self.padding_mask is None else self.padding_mask.shape[1]

    def append_padding(self, padding: Tensor) -> Tensor:
        """Appends the padding flags ``[batch_size, t_new]`` of new tokens; returns the history."""
        self.padding_mask = padding if self.padding_mask is None else torch.cat([self.padding_mask, padding], 1)
        return self.padding_mask

    def reorder(self, index: Tensor) -> None:
        """Keeps batch rows ``index`` (``[new_batch]`` long), e.g. surviving beams."""
        for layer in self.layers or []:
            layer.reorder(index)
        for name in ("padding_mask", "memory", "memory_padding_mask"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.index_select(0, index))


@dataclass
class StackExtras:
    """Auxiliary outputs of a stack of layers (or of a whole model).

    Attributes:
        losses: weighted auxiliary losses, by ``"<stack>.<layer>.<name>"`` (e.g. ``encoder.3.parse``).
        head_log_probs: supervised heads' log-distributions ``[batch_size, t, t]``, same keys.
        attentions: ``"<stack>.self"`` / ``"<stack>.cross"`` → per-layer probabilities
            ``[batch_size, heads, t, m]`` (only when asked for).
        constituent_links: ``"<stack>"`` → the Tree Transformer link probabilities a^l of
            every layer, ``[batch_size, layers, t − 1]`` bottom layer first (stacks with
            constituent attention; the input of ``synattn.trees.induce.induce_trees``).
    """

    losses: dict[str, Tensor] = field(default_factory=dict)
    head_log_probs: dict[str, Tensor] = field(default_factory=dict)
    attentions: dict[str, list[Tensor]] = field(default_factory=dict)
    constituent_links: dict[str, Tensor] = field(default_factory=dict)

    def add(self, prefix: str, kind: str, extras: AttentionExtras | None) -> None:
        """Records one attention call's extras under ``prefix`` (``encoder.3``) and ``kind``."""
        if extras is None:
            return
        for name, loss in extras.losses.items():
            self.losses[f"{prefix}.{name}"] = loss
        for name, log_probs in extras.head_log_probs.items():
            self.head_log_probs[f"{prefix}.{name}"] = log_probs
        if extras.probs is not None:
            stack = prefix.split(".")[0]
            self.attentions.setdefault(f"{stack}.{kind}", []).append(extras.probs)

    def update(self, other: StackExtras) -> None:
        self.losses.update(other.losses)
        self.head_log_probs.update(other.head_log_probs)
        self.attentions.update(other.attentions)
        self.constituent_links.update(other.constituent_links)


@dataclass
class ModelOutput(StackExtras):
    """A model's output: ``logits [batch_size, t, vocab]`` plus the extras of its stacks."""

    logits: Tensor | None = None

    @property
    def aux_loss(self) -> Tensor:
        """The sum of the weighted auxiliary losses (0 when there is none)."""
        total = torch.zeros((), device=None if self.logits is None else self.logits.device)
        for loss in self.losses.values():
            total = total + loss
        return total
