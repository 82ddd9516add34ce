"""Semirings a user runs synattn's dynamic programs under (Goodman 1999), torch-struct 0.5's set.

A semiring value is a tensor with a leading *semiring dimension* of :meth:`Semiring.size`
entries: ``[S, B, ...]``. The programs (:mod:`synattn.structs.reference`: linear chain,
semi-Markov, Eisner, second-order Eisner, CKY) touch values only through four operations of
the interface :class:`~synattn.structs.semirings.log_max.Semiring` (defined with the log and
max semirings in :mod:`~synattn.structs.semirings.log_max`, and given here too):

- ``convert(potentials)``: log-potentials ``[B, ...]`` → semiring values ``[S, B, ...]``
  (a pair ``(p, q)`` of potentials for :class:`CrossEntropySemiring` and :class:`KLSemiring`);
- ``sum_product(a, b)``: ``⊕_k a_k ⊗ b_k`` over the last dimension (what a dynamic program does
  at each cell: combine the splits);
- ``mul(a, b)``: ``a ⊗ b`` elementwise; ``one(like)`` and ``zero(like)``: the identities;
- ``unconvert(value)``: the final ``[S, B]`` → what the user gets.

``sum_product`` is ``sum(mul(a, b), -1)`` unless a semiring overrides it
(:func:`CheckpointSemiring` recomputes it in the backward pass instead of storing the
products). A new semiring subclasses :class:`Semiring` (or :class:`LogSemiring`, to reuse the
log-space conventions) and defines ``sum`` and ``mul``; docs/structs.md has a counting semiring.

Log-space semirings use synattn's mask constant :data:`~synattn.structs.constants.NEG` as their
zero (torch-struct uses ``-1e5``), so that a masked part (``-inf`` in the scores, ``NEG`` after
the classes' checks) stays impossible; values ``<= IMPOSSIBLE`` come back as ``-inf``.

The sampling semirings (``Sampled``, ``MultiSampled``, ``GumbelCRF``) are in
:mod:`synattn.structs.semirings.sampling`.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from ..constants import NEG
from .log_max import LogSemiring, MaxSemiring, Semiring

__all__ = ["CheckpointSemiring", "CrossEntropySemiring", "EntropySemiring", "KLSemiring",
           "KMaxSemiring", "LogSemiring", "MaxSemiring", "Semiring", "SparseMaxSemiring"]


class SparseMaxSemiring(LogSemiring):
    """The smoothed max of Mensch and Blondel (2018) with the squared 2-norm regulariser:
    ``⊕_k x_k = max_{w ∈ Δ} <w, x> - ½‖w‖²``, whose gradient is the sparsemax ``w*`` (Martins and
    Astudillo 2016), the Euclidean projection of ``x`` onto the simplex. Its "marginals" are
    sparse. torch-struct 0.5's forward subtracts ``‖w*‖`` instead of ``½‖w*‖²`` while its
    backward returns ``w*``, so its values (and, through them, the projections of the outer
    cells) differ from these; every single ``⊕`` has the same projection ``w*``."""

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
        w = sparsemax(x.detach(), dim)
        # Danskin: the value's gradient is w*, which this expression has (w held fixed)
        return (w * x).sum(dim) - 0.5 * (w * w).sum(dim)


def sparsemax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The Euclidean projection of ``x`` onto the probability simplex along ``dim`` (Martins and
    Astudillo 2016; Held et al. 1974's sort-based threshold)."""
    x = x.movedim(dim, -1)
    z, _ = torch.sort(x, -1, descending=True)
    cumulative = z.cumsum(-1) - 1
    ranks = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
    support = (z - cumulative / ranks > 0).sum(-1, keepdim=True)  # >= 1
    tau = cumulative.gather(-1, support - 1) / support.to(x.dtype)
    return (x - tau).clamp_min(0).movedim(-1, dim)


def KMaxSemiring(k: int) -> type[LogSemiring]:
    """The ``k``-best semiring: a value is the ``k`` largest scores, best first (``[k, B, ...]``,
    :data:`NEG` where fewer exist); ``⊕`` keeps the ``k`` best of the union, ``⊗`` the ``k``
    best pairwise sums. ``unconvert`` gives ``[k, B]``; the gradient of entry ``j`` is the
    ``j``-th best structure (ties in the order ``torch.topk`` picks)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"KMaxSemiring: k must be a whole number >= 1, got {k!r}")

    class _KMax(LogSemiring):
        zero, one = NEG, [0.0] + [NEG] * (k - 1)

        @classmethod
        def size(cls) -> int:
            return k

        @classmethod
        def convert(cls, potentials: torch.Tensor) -> torch.Tensor:
            rest = potentials.new_full((k - 1, *potentials.shape), NEG)
            return torch.cat((potentials.unsqueeze(0), rest))

        @classmethod
        def unconvert(cls, value: torch.Tensor) -> torch.Tensor:
            return value

        @classmethod
        def sum(cls, x: torch.Tensor, dim: int = -1, overwrite: bool = False) -> torch.Tensor:
            x = x.movedim(dim, 1).flatten(0, 1)  # [k * K, ...]
            top = torch.topk(x, min(k, x.shape[0]), 0).values
            return cls._pad(top)

        @classmethod
        def mul(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            pairs = a.unsqueeze(1) + b.unsqueeze(0)  # [k, k, ...]
            return torch.topk(pairs.flatten(0, 1), k, 0).values

        @classmethod
        def _pad(cls, top: torch.Tensor) -> torch.Tensor:
            if top.shape[0] == k:
                return top
            return torch.cat((top, top.new_full((k - top.shape[0], *top.shape[1:]), NEG)))

    _KMax.__name__ = _KMax.__qualname__ = f"KMaxSemiring({k})"
    return _KMax


class EntropySemiring(Semiring):
    """The expectation semiring for the entropy (Eisner 2002; Li and Eisner 2009): a value is
    ``(log Z, H)``, ``⊕`` mixes the entropies of its terms by their posterior weights and adds
    the entropy of the mixture, ``⊗`` adds both. ``unconvert`` gives ``H(p)`` ``[B]``."""

    zero, one = [NEG, 0.0], [0.0, 0.0]
    expectation = True

    @classmethod
    def size(cls) -> int:
        return 2

    @classmethod
    def convert(cls, potentials: torch.Tensor) -> torch.Tensor:
        return torch.stack((potentials, torch.zeros_like(potentials)))

    @classmethod
    def unconvert(cls, value: torch.Tensor) -> torch.Tensor:
        return value[-1]

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        d = dim - 1 if dim > 0 else dim  # (the dimension of x[0])
        log_z = torch.logsumexp(x[0], d)
        log_w = x[0] - log_z.unsqueeze(d)
        w = log_w.exp()
        return torch.stack((log_z, (w * (x[1] - log_w)).sum(d)))

    @classmethod
    def mul(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class CrossEntropySemiring(Semiring):
    """The expectation semiring for ``H(p, q) = -E_p[log q]``: a value is ``(log Z_p, log Z_q,
    H)``; ``convert`` takes the pair ``(p, q)`` of potentials (``run(crf, CrossEntropySemiring,
    other=q)``); ``unconvert`` gives ``H(p, q)`` ``[B]``."""

    zero, one = [NEG, NEG, 0.0], [0.0, 0.0, 0.0]
    expectation = True
    kl = False

    @classmethod
    def size(cls) -> int:
        return 3

    @classmethod
    def convert(cls, potentials: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        # (a semiring over two distributions converts the pair (p, q))
        p, q = potentials
        return torch.stack((p, q, torch.zeros_like(p)))

    @classmethod
    def unconvert(cls, value: torch.Tensor) -> torch.Tensor:
        return value[-1]

    @classmethod
    def sum(cls, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        d = dim - 1 if dim > 0 else dim
        log_zp, log_zq = torch.logsumexp(x[0], d), torch.logsumexp(x[1], d)
        log_wp = x[0] - log_zp.unsqueeze(d)
        log_wq = x[1] - log_zq.unsqueeze(d)
        wp = log_wp.exp()
        inner = x[2] - log_wq + (log_wp if cls.kl else 0.0)
        return torch.stack((log_zp, log_zq, (wp * inner).sum(d)))

    @classmethod
    def mul(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class KLSemiring(CrossEntropySemiring):
    """The expectation semiring for ``KL(p ‖ q)`` (torch-struct's ``KLDivergenceSemiring``):
    as :class:`CrossEntropySemiring` with ``log p`` added; ``unconvert`` gives ``KL(p ‖ q)``."""

    kl = True


def CheckpointSemiring(semiring: type[Semiring], min_size: int = 0) -> type[Semiring]:
    """``semiring`` with each ``sum_product`` recomputed in the backward pass instead of keeping
    its ``[S, ..., K]`` products (``torch.utils.checkpoint``): the same values and gradients,
    the memory of the chart alone. Products of at most ``min_size`` elements are kept as
    usual (torch-struct's ``CheckpointSemiring(cls, min_size)``)."""

    class _Checkpoint(semiring):  # type: ignore[valid-type, misc]  # (a class given at run time)
        @classmethod
        def sum_product(cls, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            size = torch.broadcast_shapes(a.shape, b.shape).numel()
            if size <= min_size or not torch.is_grad_enabled():
                return semiring.sum_product(a, b)
            return checkpoint(semiring.sum_product, a, b, use_reentrant=False)

    _Checkpoint.__name__ = _Checkpoint.__qualname__ = f"CheckpointSemiring({semiring.__name__})"
    return _Checkpoint
