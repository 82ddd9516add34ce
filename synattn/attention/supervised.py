"""Dependency-supervised biaffine attention head (Deguchi et al. 2019, DBSA; LISA, Strubell et al. 2018).

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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn.attention.claims import Claim
from synattn.attention.feature import AttentionContext, AttentionFeature
from synattn.attention.masks import fill_masked, upcast
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
