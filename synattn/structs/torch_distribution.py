"""A ``torch.distributions.Distribution`` view of any CRF of :mod:`synattn.structs`.

torch-struct's classes are ``Distribution`` subclasses; synattn's keep their own interface
(``log_partition``, ``marginals``, ``sample(count, generator)``, ``kbest``) and this adapter gives
them PyTorch's conventions on top, for code written against ``torch.distributions``::

    from synattn.structs import DependencyCRF
    from synattn.structs.torch_distribution import StructuredDistribution

    dist = StructuredDistribution(DependencyCRF(scores, lengths))
    dist.batch_shape, dist.event_shape        # (B,), (n,): one head per word
    y = dist.sample((4,))                     # [4, B, n]
    dist.log_prob(y)                          # [4, B]
    torch.distributions.kl_divergence(dist, other)   # other: another StructuredDistribution

- ``batch_shape`` is ``(B,)`` and ``event_shape`` the shape of one structure in synattn's layout:
  ``(n,)`` heads or labels (chain, dependency CRFs, semi-Markov compact labels), ``(n, 2)``
  heads and labels (labelled dependency CRFs), ``(N, N)`` a 0/1 span chart (:class:`~synattn.structs.TreeCRF`);
- ``log_prob(value)`` takes ``sample_shape + batch_shape + event_shape`` and returns
  ``sample_shape + batch_shape``; ``sample(sample_shape)`` returns exact samples in that layout;
- ``entropy()``, ``mode`` (the argmax), ``kl_divergence`` (registered) come from the CRF;
- ``enumerate_support()`` lists every structure of a tiny CRF, ``[S, B, *event_shape]``, through
  exact k-best (at most :data:`MAX_SUPPORT`; every batch element must have the same number of
  structures, as PyTorch's convention requires; ``expand=False`` is not supported);
- no ``rsample``: samples of discrete structures are not reparameterisable (torch-struct has none
  either); ``mean`` and ``variance`` are not defined (use ``crf.marginals``, the mean of the parts'
  indicators). ``arg_constraints`` is empty and arguments are not validated again (the CRF
  checked them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.distributions import Distribution, kl

__all__ = ["MAX_SUPPORT", "StructuredDistribution"]

MAX_SUPPORT = 4096
"""``enumerate_support`` refuses CRFs with more structures than this per batch element."""


class StructuredDistribution(Distribution):
    """``crf`` (any CRF of :mod:`synattn.structs`) as a ``torch.distributions.Distribution``."""

    arg_constraints: dict = {}
    has_enumerate_support = True
    has_rsample = False

    def __init__(self, crf):
        self.crf = crf
        batch = crf.lengths.shape
        if hasattr(crf, "_event_shape"):  # labelled trees: (n, 2)
            event = torch.Size(crf._event_shape())
        elif hasattr(crf, "_num_positions"):
            event = torch.Size((crf._num_positions(),))
        else:  # TreeCRF: a span chart
            event = crf.scores.shape[1:]
        super().__init__(batch_shape=batch, event_shape=event, validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``sample_shape + batch_shape`` ``log p(value)`` of structures ``value``
        (``sample_shape + batch_shape + event_shape``)."""
        value = torch.as_tensor(value)
        lead = value.shape[:value.dim() - len(self.batch_shape) - len(self.event_shape)]
        if value.shape[len(lead):] != self.batch_shape + self.event_shape:
            raise ValueError(f"log_prob: value must be sample_shape + {tuple(self.batch_shape)} + "
                             f"{tuple(self.event_shape)}, got {tuple(value.shape)}")
        flat = value.reshape(-1, *self.batch_shape, *self.event_shape)
        return torch.stack([self.crf.log_prob(v) for v in flat]).reshape(*lead, *self.batch_shape)

    def sample(self, sample_shape: Sequence[int] = torch.Size(),
               generator: torch.Generator | None = None) -> torch.Tensor:
        """``sample_shape + batch_shape + event_shape`` exact samples (not differentiable)."""
        sample_shape = torch.Size(sample_shape)
        count = max(1, math.prod(sample_shape))
        out = self.crf.sample(count, generator=generator)
        return out.reshape(*sample_shape, *self.batch_shape, *self.event_shape)

    def entropy(self) -> torch.Tensor:
        """``batch_shape`` entropy in nats (differentiable)."""
        return self.crf.entropy

    @property
    def mode(self) -> torch.Tensor:
        """``batch_shape + event_shape``: the best structure."""
        return self.crf.argmax

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        """``[S, *batch_shape, *event_shape]``: every structure with non-zero probability, best
        first, by exact k-best. For tiny CRFs only (ValueError above :data:`MAX_SUPPORT`, or
        when batch elements have different numbers of structures)."""
        if not expand:
            raise ValueError("enumerate_support(expand=False) is not supported: structures "
                             "depend on each batch element's length and masks")
        k = 16
        while True:
            scores, structures = self.crf.kbest(k)
            counts = (scores > -float("inf")).sum(1)
            if bool((counts < k).all()):
                break
            if k >= MAX_SUPPORT:
                raise ValueError(f"enumerate_support: more than {MAX_SUPPORT} structures per "
                                 f"batch element; it is meant for tiny inputs")
            k = min(2 * k, MAX_SUPPORT + 1)
        if bool((counts != counts[0]).any()):
            raise ValueError(f"enumerate_support: the batch elements have different numbers of "
                             f"structures ({counts.tolist()}); enumerate them one at a time")
        return structures[:, :int(counts[0])].transpose(0, 1)


@kl.register_kl(StructuredDistribution, StructuredDistribution)
def _kl(p: StructuredDistribution, q: StructuredDistribution) -> torch.Tensor:
    return p.crf.kl(q.crf)
