"""Every dynamic program of ``synattn.structs`` under any semiring: the one user API.

    from synattn.structs.semirings.programs import run, marginals
    run(crf, semiring, other=None)        # the semiring's value of the whole sum (e.g. [B])
    marginals(crf, semiring, other=None)  # its gradient, in the layout of crf.marginals

or the same as methods: ``crf.run(semiring)``, ``crf.semiring_marginals(semiring)``. ``crf`` is a
:class:`~synattn.structs.LinearChainCRF`, :class:`~synattn.structs.SemiMarkovCRF`,
:class:`~synattn.structs.DependencyCRF`, :class:`~synattn.structs.Dependency2oCRF` or
:class:`~synattn.structs.TreeCRF`; the semirings
are those of :mod:`synattn.structs.semirings` and :mod:`synattn.structs.semirings.sampling`, or
a user's (a subclass of :class:`~synattn.structs.semirings.Semiring`). ``other``: the second
distribution (same class and shapes) of :class:`~synattn.structs.semirings.CrossEntropySemiring`
and :class:`~synattn.structs.semirings.KLSemiring`.

:class:`~synattn.structs.semirings.LogSemiring` and
:class:`~synattn.structs.semirings.MaxSemiring` values go to the classes' own ``log_partition``
and ``max`` (compiled kernels on CPU, the explicit-outside PyTorch code elsewhere) and the log
semiring's marginals to ``crf.marginals``; ``compiled=False`` runs the generic program instead.
Everything else runs the structure's one plain recursion, written once for any semiring in
:mod:`synattn.structs.reference` (``chain``, ``semi_markov``, ``eisner``, ``eisner2o``, ``cky``;
the same functions are the reference ``log Z`` under the log semiring), with ``⊕``/``⊗`` taken
from the semiring and the batch vectorised: a Python step per position (chains) or per span
(trees), so it is meant for what the compiled paths do not offer, not for speed. Values are
``[S, B, ...]`` tensors (``S``: the semiring's size); gradients of the value by autograd are the semiring's
"marginals" (argmax for max, samples for the sampled semirings, k-best for k-max).

:class:`~synattn.structs.NonProjectiveDependencyCRF` has no dynamic program (its ``log Z`` is a
determinant): only the log and max semirings apply to it.
"""

from __future__ import annotations

import math

import torch

from ..constants import NEG
from ..reference import chain, cky, eisner, eisner2o, semi_markov
from ..scores import fp32_inside
from .log_max import LogSemiring, MaxSemiring, Semiring

__all__ = ["chain", "cky", "count", "eisner", "eisner2o", "marginals", "run", "semi_markov"]


# ---------------------------------------------------------------------------------------------
# The classes' potentials, and the API.
# ---------------------------------------------------------------------------------------------

def _semi_markov_init(sr: type[Semiring], edge: torch.Tensor, init: torch.Tensor,
                      lengths: torch.Tensor) -> torch.Tensor:
    """:func:`semi_markov` with the initial scores among the potentials a semiring converts."""
    return semi_markov(sr, edge, lengths, init)


PROGRAMS = {"chain": chain, "semi_markov": semi_markov, "semi_markov_init": _semi_markov_init,
            "eisner": eisner, "eisner2o": eisner2o, "cky": cky}
"""The generic programs by the name a class's ``_semiring_program()`` gives."""


def _program(crf):
    """``(program, potentials, extra, to_marginals)`` of a CRF: its generic program, its
    potential tensors ``[B, ...]`` (those ``convert`` maps), the program's other arguments,
    and the map from the gradients of the potentials to the layout of ``crf.marginals``.
    A class names them with ``_semiring_program()`` (LinearChainCRF, SemiMarkovCRF,
    DependencyCRF, Dependency2oCRF, TreeCRF), so this module imports none of them."""
    if not hasattr(crf, "_semiring_program"):
        raise TypeError(f"semiring programs: {type(crf).__name__} has no dynamic program written for "
                        f"any semiring (only LogSemiring and MaxSemiring apply to it: log_partition "
                        f"and max); the programs are LinearChainCRF, SemiMarkovCRF, DependencyCRF, "
                        f"Dependency2oCRF and TreeCRF")
    name, potentials, extra = crf._semiring_program()
    return PROGRAMS[name], potentials, extra, lambda grads: grads[0]


def _check(crf, sr, other) -> type[Semiring]:
    """``sr`` if it is a semiring that fits ``other``, else TypeError/ValueError."""
    if not (isinstance(sr, type) and issubclass(sr, Semiring)):
        raise TypeError(f"{type(crf).__name__}.run: the semiring must be a Semiring class from "
                        f"synattn.structs.semirings (or a subclass), got {sr!r}")
    pair = getattr(sr, "kl", None) is not None
    if pair != (other is not None):
        raise ValueError(f"{type(crf).__name__}.run: {sr.__name__} "
                         + ("needs other= (the distribution q)" if pair else "takes no other="))
    if other is not None:
        mine, theirs = _program(crf)[1], (_program(other)[1] if type(other) is type(crf) else [])
        if (type(other) is not type(crf) or [p.shape for p in mine] != [q.shape for q in theirs]
                or not torch.equal(crf.lengths, other.lengths)
                or getattr(crf, "multiroot", None) != getattr(other, "multiroot", None)):
            raise ValueError(f"{type(crf).__name__}.run: other= must be a {type(crf).__name__} "
                             f"of the same shapes, lengths and multiroot")
    return sr


@fp32_inside
def _value(crf, sr, other, potentials: list[torch.Tensor]) -> torch.Tensor:
    program, _, extra, _ = _program(crf)
    if other is not None:
        values = [sr.convert((p, q)) for p, q in zip(potentials, _program(other)[1])]
    else:
        values = [sr.convert(p) for p in potentials]
    return sr.finalize(program(sr, *values, *extra))


def run(crf, semiring: type[Semiring], other=None, *, compiled: bool = True) -> torch.Tensor:
    """The value of ``semiring``'s sum over all structures of ``crf`` (e.g. ``[B]``; ``[k, B]``
    for ``KMaxSemiring(k)``), differentiable.

    Args:
        crf: a CRF of ``synattn.structs``.
        semiring: a :class:`~synattn.structs.semirings.Semiring` class.
        other: ``q`` of the cross-entropy and KL semirings (same class, shapes and lengths).
        compiled: log and max semirings run the class's own ``log_partition``/``max`` (True)
            or the generic program (False).
    """
    semiring = _check(crf, semiring, other)
    if compiled and semiring is LogSemiring:
        return crf.log_partition
    if compiled and semiring is MaxSemiring:
        return crf.max
    if getattr(crf, "structure", None) == "nonprojective":
        _program(crf)  # (raises)
    value = semiring.unconvert(_value(crf, semiring, other, _program(crf)[1]))
    if semiring.expectation:  # (entropies, divergences: 0 where no structure exists)
        feasible = crf.log_partition.detach() > -float("inf")  # 0 without a structure
        value = torch.where(feasible, value, value.new_zeros(()))
    return value


def marginals(crf, semiring: type[Semiring], other=None, *, compiled: bool = True,
              create_graph: bool | None = None) -> torch.Tensor:
    """The gradient of :func:`run`'s value with respect to ``crf``'s potentials, in the layout of
    ``crf.marginals`` (``[k, B, ...]`` for ``KMaxSemiring(k)``: one gradient per entry).

    Log: the marginals; max: the best structure's 0/1 parts; sampled semirings: a sample's 0/1
    parts; sparse max: sparse marginals. ``create_graph`` (default: when gradients are enabled
    and the potentials require them) keeps the result differentiable, as
    :func:`~synattn.structs.semirings.sampling.GumbelCRFSemiring` needs.
    """
    semiring = _check(crf, semiring, other)
    if compiled and semiring is LogSemiring:
        return crf.marginals
    _, potentials, _, to_marginals = _program(crf)
    if create_graph is None:
        create_graph = torch.is_grad_enabled() and any(p.requires_grad for p in potentials)
    with torch.enable_grad():
        leaves = [p if p.requires_grad and create_graph else p.detach().requires_grad_()
                  for p in potentials]
        value = semiring.unconvert(_value(crf, semiring, other, leaves))
        value = torch.where(torch.isfinite(value), value, value.new_zeros(()))
        rows = value.reshape(math.prod(value.shape[:-1]), value.shape[-1])  # [R, B]
        out = []
        for r in range(rows.shape[0]):
            grads = torch.autograd.grad(rows[r].sum(), leaves, create_graph=create_graph,
                                        retain_graph=True, allow_unused=True)
            out.append(to_marginals([torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves)]))
    return out[0] if value.dim() == 1 else torch.stack(out).view(*value.shape[:-1], *out[0].shape)


def count(crf) -> torch.Tensor:
    """``[B]`` the number of structures that avoid every masked part (float64; ``inf`` beyond
    float64's range): ``log Z`` of the CRF with every unmasked score set to 0, exponentiated and
    rounded (exact below ``2^53``). torch-struct's ``count`` ignores the potentials (the same
    without masks)."""
    def zero(x):
        return torch.where(x > NEG, 0.0, -float("inf")).double().detach()

    if hasattr(crf, "_with_scores"):  # (the trees: the class's own kernels, every potential zeroed)
        potentials = crf._semiring_program()[1] if hasattr(crf, "_semiring_program") else [crf.scores]
        log_n = crf._with_scores(*[zero(p) for p in potentials]).log_partition
    else:
        _, potentials, _, _ = _program(crf)
        zeros = [torch.where(p > NEG, 0.0, NEG).double().detach() for p in potentials]
        log_n = _value(crf, LogSemiring, None, zeros).squeeze(0)
    return log_n.detach().double().exp().round()
