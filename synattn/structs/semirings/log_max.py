"""The log and max semirings of the compiled and explicit-outside dynamic programs of
``synattn.structs``.

A dynamic program is written once over a semiring ``(sum, mul)`` where ``mul`` is always ``+`` on
log-scores (Goodman 1999):

- :class:`LogSemiring` (``sum`` = logsumexp) gives log-partition functions;
- :class:`MaxSemiring` (``sum`` = max) gives Viterbi scores.

Each semiring also knows the *backward* of its ``sum``: how much of the adjoint of ``sum_k t_k``
flows back to each term ``t_k``: the posterior weights ``exp(t_k - sum)`` for the log semiring,
all of it to the (first) best term for the max semiring. A hand-written outside pass that uses
it computes marginals (log) or the indicator of the best structure (max) with the same code.

The semirings a user runs any program under (torch-struct's set, values with a leading
semiring dimension) are :mod:`synattn.structs.semirings`; these two are their bases.
"""

from __future__ import annotations

import torch

from ..constants import NEG


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


class LogSemiring:
    """Log-space sum-product: ``sum`` = logsumexp, ``mul`` = ``+``."""

    @staticmethod
    def sum(x: torch.Tensor, dim: int, overwrite: bool = False) -> torch.Tensor:
        return logsumexp(x, dim, overwrite)

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


class MaxSemiring:
    """Max-plus (Viterbi): ``sum`` = max, ``mul`` = ``+``."""

    @staticmethod
    def sum(x: torch.Tensor, dim: int, overwrite: bool = False) -> torch.Tensor:
        return x.amax(dim)

    @staticmethod
    def plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.maximum(a, b)

    @staticmethod
    def backward_(terms: torch.Tensor, total: torch.Tensor, grad: torch.Tensor,
                  dim: int) -> torch.Tensor:
        """Overwrite ``terms`` with a subgradient: ``grad`` on the first best term, 0 elsewhere."""
        best = terms.argmax(dim, keepdim=True)
        return terms.zero_().scatter_(dim, best, grad.unsqueeze(dim))


Semiring = type[LogSemiring] | type[MaxSemiring]
