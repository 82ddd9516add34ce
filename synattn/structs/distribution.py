"""What every structured distribution derives from ``log_partition`` and its marginals.

A CRF over structures ``y`` with ``score(y) = <θ, φ(y)>`` (``φ(y)`` the 0/1 indicators of the
parts of ``y``: arcs, labels, label pairs, spans) is an exponential family: ``log Z(θ)`` is its
log-partition and the marginals ``μ = E[φ(y)] = ∇ log Z`` its mean parameters (Wainwright and
Jordan 2008, §3). Hence, with no further dynamic program,

    log p(y)        = score(y) - log Z
    H(p)            = log Z_p - <θ_p, μ_p>
    H(p, q)         = log Z_q - <θ_q, μ_p>        (cross-entropy, for the same structures)
    KL(p || q)      = H(p, q) - H(p)

(the same identities as torch-struct's ``StructDistribution``; Li and Eisner 2009 compute the
entropy with an expectation semiring instead). All are differentiable through the marginals'
backward (the Hessian of ``log Z``), so their derivatives are exact to the order the marginals
support.

A class mixes in :class:`StructDistribution` and provides ``log_partition [B]``,
``score(structure) [B]`` and :meth:`StructDistribution._parts`.

Conventions: masked parts (scores ``<= NEG``, e.g. ``-inf``) have ``θ = NEG`` and marginal 0;
they are left out of the inner products (``NEG · 0`` would still be 0, but their gradient would
not). For a sentence without a valid structure (``log Z = -inf``) ``log_prob`` is ``-inf`` and
``entropy``, ``cross_entropy`` and ``kl`` are 0; ``cross_entropy`` and ``kl`` are ``+inf``
where ``p`` puts mass on a part that ``q`` masks (or ``q`` has no structure at all). Entropies
and divergences are clamped at 0 (they can come out at ``-1e-16``-ish by rounding).
"""

from __future__ import annotations

import torch

from .semiring import NEG


def _inner(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``Σ θ μ`` per batch element over ``(θ [B, ...], μ [B, ...])`` pairs, masked parts left out."""
    total = 0
    for theta, mu in parts:
        theta = torch.where(theta > NEG, theta, theta.new_zeros(()))
        total = total + (theta * mu).flatten(1).sum(1)
    return total


class StructDistribution:
    """Mixin: ``log_prob``, ``entropy``, ``cross_entropy`` and ``kl`` from exponential-family
    identities (see the module docstring)."""

    log_partition: torch.Tensor

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(θ, μ)`` pairs ``[B, ...]``: every part's log-potential (0 where no structure can
        use it, :data:`~synattn.structs.semiring.NEG` where masked) and its marginal, so that
        ``score(y) = Σ θ φ(y)`` and ``μ = E[φ(y)]``."""
        raise NotImplementedError

    def score(self, structure: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, structure: torch.Tensor) -> torch.Tensor:
        """``[B]`` ``log p(structure)``; ``-inf`` for a structure with a masked part, or where
        there is no valid structure. Differentiable (its gradient is ``φ(y) - μ``)."""
        score, log_z = self.score(structure), self.log_partition
        out = score - torch.where(log_z > -float("inf"), log_z, log_z.new_zeros(()))
        return torch.where((score > -float("inf")) & (log_z > -float("inf")), out,
                           torch.full_like(out, -float("inf")))

    @property
    def entropy(self) -> torch.Tensor:
        """``[B]`` entropy ``H(p) = log Z - <θ, μ>`` in nats; 0 without a valid structure."""
        log_z = self.log_partition
        ok = log_z > -float("inf")
        h = torch.where(ok, log_z, log_z.new_zeros(())) - _inner(self._parts())
        return torch.where(ok, h.clamp_min(0.0), h.new_zeros(()))

    def cross_entropy(self, other: "StructDistribution") -> torch.Tensor:
        """``[B]`` cross-entropy ``H(p, q) = -E_p[log q(y)] = log Z_q - <θ_q, μ_p>`` with ``p =
        self``, ``q = other`` (the same class and shapes)."""
        self._check_other(other)
        log_zq = other.log_partition
        mine = self._parts()
        theirs = other._parts()
        inner = _inner([(tq, mp) for (tq, _), (_, mp) in zip(theirs, mine)])
        ce = torch.where(log_zq > -float("inf"), log_zq, log_zq.new_zeros(())) - inner
        # p's mass on parts that q masks (or no structure under q): q(y) = 0 for p-likely y
        lost = sum(((tq <= NEG) & (mp > 0)).flatten(1).any(1).long()
                   for (tq, _), (_, mp) in zip(theirs, mine)).bool()
        lost = lost | (log_zq == -float("inf"))
        ce = torch.where(lost, torch.full_like(ce, float("inf")), ce)
        return torch.where(self.log_partition > -float("inf"), ce, ce.new_zeros(()))

    def kl(self, other: "StructDistribution") -> torch.Tensor:
        """``[B]`` ``KL(p || q) = H(p, q) - H(p)`` with ``p = self``, ``q = other``."""
        d = self.cross_entropy(other) - self.entropy
        return torch.where(torch.isinf(d), d, d.clamp_min(0.0))

    def _check_other(self, other: "StructDistribution") -> None:
        if type(other) is not type(self):
            raise TypeError(f"{type(self).__name__}: cross_entropy/kl need another "
                            f"{type(self).__name__}, got {type(other).__name__}")
        for (a, _), (b, _) in zip(self._parts(), other._parts()):
            if a.shape != b.shape:
                raise ValueError(f"{type(self).__name__}: cross_entropy/kl need the same shapes, "
                                 f"got {tuple(a.shape)} and {tuple(b.shape)}")
        if getattr(self, "multiroot", None) != getattr(other, "multiroot", None):
            raise ValueError(f"{type(self).__name__}: cross_entropy/kl need the same multiroot")
        if not torch.equal(self.lengths, other.lengths):
            raise ValueError(f"{type(self).__name__}: cross_entropy/kl need the same lengths")
