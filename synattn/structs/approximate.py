"""What the approximate second-order inferences share (supar 1.1.4's ``structs/vi.py``): the
module with its ``max_iter``, and the update steps of mean-field variational inference (MFVI) and
loopy belief propagation (LBP) over **binary** variables (a span of a tree, an arc of a graph).

A binary variable ``z_b`` is kept as its logit ``λ_b = log q(z_b = 1) - log q(z_b = 0)``, its
marginal ``σ(λ_b)``. It has a unary score ``s_b`` and pairwise factors ``exp(w_ab · z_a · z_b)``
with other variables ``a``; ``w_ab`` is the weight the update of ``b`` reads (supar's tensors say
it from ``b``'s side; a weight tensor describes a pairwise Markov random field when
``w_ab = w_ba``). Starting from ``λ = s``, each of ``max_iter`` rounds updates every variable at
once:

- MFVI (Wang et al. 2019): ``λ_b ← s_b + Σ_a σ(λ_a) · w_ab``;
- LBP (Smith and Eisner 2008), supar's rule in logit form (:func:`binary_message`): the message to
  ``b`` from its factor with ``a`` is ``μ_ab ← softplus(c + w_ab) - softplus(c)`` for the cavity
  ``c = λ_a - μ_ab`` (supar subtracts that message's own previous value; textbook BP subtracts
  the message ``a`` received from ``b``, so the two agree on the first round only), then
  ``λ_b ← s_b + Σ_a μ_ab``. supar keeps two log-states per message, normalised (``log_softmax``);
  their difference is this ``μ``, and a factor with ``w = 0`` sends exactly 0.

Each structure chooses its variables and which pairs share a factor:
:mod:`synattn.structs.cky.second_order_vi` (spans), :mod:`synattn.structs.dependency.semantic_vi`
(arcs of a graph); :mod:`synattn.structs.dependency.second_order_vi` (heads, categorical
variables) shares the module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class IterativeInference(nn.Module):
    """The base of the approximate inference modules: ``max_iter`` rounds (a whole number ``>= 1``;
    default 3, supar's) and supar's ``repr``."""

    def __init__(self, max_iter: int = 3):
        super().__init__()
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"{type(self).__name__}: max_iter must be a whole number >= 1, got {max_iter!r}")
        self.max_iter = max_iter

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_iter={self.max_iter})"

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name not in DISTRIBUTION_MEMBERS:
                raise
        raise NotADistribution(
            f"{type(self).__name__} has no {name}: it is a module that computes approximate "
            f"marginals (call it on its scores, {type(self).__name__}()(scores, lengths)); "
            f"approximate inference gives no exact log_partition, argmax or samples", name=name, obj=self)


class NotADistribution(AttributeError, TypeError):
    """A distribution's member asked of an approximate-inference module (a ``TypeError``, and an
    ``AttributeError`` so that ``hasattr`` stays False)."""


DISTRIBUTION_MEMBERS = frozenset({
    "log_partition", "partition", "marginals", "argmax", "max", "mode", "sample", "kbest", "kmax",
    "topk", "entropy", "perplexity", "log_prob", "score", "cross_entropy", "kl", "count", "run",
    "semiring_marginals", "gumbel_crf", "lengths"})


def binary_message(partner: torch.Tensor, messages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One LBP round of messages between binary variables (supar's rule, as log-odds).

    Args:
        partner: the logits ``λ_a`` of each message's sender, broadcastable to ``messages``.
        messages: ``μ_ab`` of the previous round (0 before the first), indexed by receiver and
            sender as the structure lays them out.
        weights: ``w_ab``, the same shape; 0 where no factor is (the message is then exactly 0).

    Returns:
        The new messages ``softplus(c + w) - softplus(c)``, ``c = λ_a - μ_ab``.
    """
    cavity = partner - messages
    return F.softplus(cavity + weights) - F.softplus(cavity)


def binary_result(who: str, logits: torch.Tensor, usable: torch.Tensor, target: torch.Tensor | None,
                  marginals: torch.Tensor | None = None):
    """The marginals ``σ(λ)`` (0 where ``usable`` is False; given by a kernel that computed them
    with the logits, or computed here) and, given a 0/1 ``target`` of the same shape, preceded by
    supar's loss: the binary cross-entropy of the logits averaged over the usable variables."""
    if marginals is None:
        marginals = torch.where(usable, logits.sigmoid(), logits.new_zeros(()))
    if target is None:
        return marginals
    if not isinstance(target, torch.Tensor) or target.shape != logits.shape:
        shape = tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"{who}: target must be a 0/1 tensor {list(logits.shape)} like the scores, got {shape}")
    gold = target.to(logits.device, logits.dtype)
    if not bool(((gold >= 0) & (gold <= 1)).all()):  # (NaN too)
        raise ValueError(f"{who}: target must hold values in [0, 1] (0/1 gold parts)")
    loss = F.binary_cross_entropy_with_logits(logits[usable], gold[usable])
    return loss, marginals
