"""The semiring interface, and the log and max semirings every dynamic program of
``synattn.structs`` runs under.

A dynamic program is written once over a semiring ``(⊕, ⊗)`` (Goodman 1999). :class:`Semiring`
is the interface the generic programs (:mod:`synattn.structs.reference`, run through
:mod:`synattn.structs.semirings.programs`) read values through; :class:`LogSemiring`
(``⊕`` = logsumexp: log-partition functions) and :class:`MaxSemiring` (``⊕`` = max: Viterbi
scores) are the two the classes' own code runs under too, where ``⊗`` is always ``+`` on
log-scores. One class each: ``synattn.structs.LogSemiring``,
``synattn.structs.semirings.LogSemiring`` and the compiled and explicit-outside programs'
semiring are the same object.

For the hand-written outside passes each of the two also knows the *backward* of its ``⊕``
(:meth:`LogSemiring.backward_`): how much of the adjoint of ``⊕_k t_k`` flows back to each term
``t_k``: the posterior weights ``exp(t_k - ⊕ t)`` for the log semiring, all of it to the (first)
best term for the max semiring. An outside pass that uses it computes marginals (log) or the
indicator of the best structure (max) with the same code.

The other semirings a user runs any program under (torch-struct's set) are
:mod:`synattn.structs.semirings.generic` and :mod:`synattn.structs.semirings.sampling`.
"""

from __future__ import annotations

import torch

from ..constants import NEG
from ..scores import impossible_as_inf

__all__ = ["LogSemiring", "MaxSemiring", "Semiring", "logsumexp"]


def logsumexp(x: torch.Tensor, dim: int, overwrite: bool = False) -> torch.Tensor:
    """``log(sum(exp(x), dim))`` for finite ``x``.

    Without autograd, a size-2 dimension uses ``torch.logaddexp`` (one kernel) and the general
    case works in place (on ``x`` itself if ``overwrite``): fewer kernels than
    ``torch.logsumexp``, which also handles ``inf``, which never occurs here. Reductions are
    fastest on CPU when ``dim`` is not the innermost one, so callers keep the batch innermost.
    """
    if torch.is_grad_enabled() and x.requires_grad:
        # (logaddexp's double backward overflows for differences like NEG - x)
        return torch.logsumexp(x, dim)
    if x.shape[dim] == 2:
        a, b = x.unbind(dim)
        return torch.logaddexp(a, b)
    m = x.amax(dim, keepdim=True)
    x = x.sub_(m) if overwrite else x - m
    return x.exp_().sum(dim).log_().add_(m.squeeze(dim))


class Semiring:
    """The interface of a semiring (all classmethods: pass the class itself to ``run``).

    Subclasses define ``sum(x, dim)`` (``⊕`` over ``dim`` of ``[S, ...]`` values, ``dim`` never
    0), ``mul(a, b)`` (``⊗``, broadcasting) and the identities ``zero``/``one`` (the fill values
    of each semiring entry, a number or a list of ``size()`` numbers).
    """

    zero: float | list[float] = 0.0
    one: float | list[float] = 1.0
    expectation = False
    """True for the expectation semirings (entropy, cross-entropy, KL): ``run`` gives 0 where
    masks leave no structure, as the classes' ``entropy`` and ``kl`` do."""

    @classmethod
    def size(cls) -> int:
        """``S``, the entries of the semiring dimension."""
        return 1

    @classmethod
    def convert(cls, potentials: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` log-potentials → ``[S, B, ...]`` values (default: as they are)."""
        return potentials.unsqueeze(0)

    @classmethod
    def unconvert(cls, value: torch.Tensor) -> torch.Tensor:
        """``[S, B]`` → the result (default: ``[B]``)."""
        return value.squeeze(0)

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def mul(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def sum_product(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``⊕_k a[..., k] ⊗ b[..., k]``: ``[S, ..., K]`` (broadcasting) → ``[S, ...]``."""
        return cls.sum(cls.mul(a, b), -1)

    @classmethod
    def _fill(cls, like: torch.Tensor, value) -> torch.Tensor:
        values = value if isinstance(value, (list, tuple)) else [value] * like.shape[0]
        return torch.stack([torch.full_like(like[0], v) for v in values])

    @classmethod
    def zeros(cls, like: torch.Tensor) -> torch.Tensor:
        """The additive identity in the shape of ``like [S, ...]``."""
        return cls._fill(like, cls.zero)

    @classmethod
    def ones(cls, like: torch.Tensor) -> torch.Tensor:
        """The multiplicative identity in the shape of ``like [S, ...]``."""
        return cls._fill(like, cls.one)

    @classmethod
    def mask(cls, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``x`` where ``keep`` (broadcast over the semiring dimension), :attr:`zero` elsewhere."""
        return torch.where(keep, x, cls.zeros(x))

    @classmethod
    def finalize(cls, value: torch.Tensor) -> torch.Tensor:
        """Applied to ``[S, B]`` before :meth:`unconvert` (log semirings: masks to ``-inf``)."""
        return value


class LogSemiring(Semiring):
    """``(logsumexp, +, NEG, 0)``: ``log Z``; its gradient gives the marginals. ``run`` takes the
    compiled kernels (or the registered PyTorch path) for it. Values are finite: masked parts
    hold :data:`NEG`, never ``-inf``."""

    zero: float | list[float] = NEG
    one: float | list[float] = 0.0

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
        return logsumexp(x, dim, overwrite)

    @classmethod
    def mul(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    @classmethod
    def finalize(cls, value: torch.Tensor) -> torch.Tensor:
        return impossible_as_inf(value)

    @staticmethod
    def plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a ⊕ b`` elementwise."""
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            return torch.logsumexp(torch.stack((a, b)), 0)  # (see logsumexp)
        return torch.logaddexp(a, b)

    @staticmethod
    def backward_(terms: torch.Tensor, total: torch.Tensor, grad: torch.Tensor,
                  dim: int) -> torch.Tensor:
        """Overwrite ``terms`` with their adjoints, for ``total = sum(terms, dim)`` and ``grad >= 0``.

        ``grad * exp(terms - total)``, computed as ``exp(terms + log(grad) - total)``; a zero
        ``grad`` gives exactly 0 (no denormal numbers, which are slow on CPUs).
        ``total`` must be the true sum (finite), not a value masked afterwards.
        """
        shift = torch.where(grad > 0, grad.log() - total, 2 * NEG)
        return terms.add_(shift.unsqueeze(dim)).exp_()


class MaxSemiring(LogSemiring):
    """``(max, +, NEG, 0)``: the best score (Viterbi); its gradient is the best structure (a
    subgradient at ties)."""

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
        return x.amax(dim)

    @staticmethod
    def plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.maximum(a, b)

    @staticmethod
    def backward_(terms: torch.Tensor, total: torch.Tensor, grad: torch.Tensor,
                  dim: int) -> torch.Tensor:
        """Overwrite ``terms`` with a subgradient: ``grad`` on the first best term, 0 elsewhere."""
        best = terms.max(dim, keepdim=True).indices  # (argmax's first best, 3-5x faster on the CPU)
        return terms.zero_().scatter_(dim, best, grad.unsqueeze(dim))
