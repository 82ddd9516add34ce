"""One reference per structure, and the accelerations registered for it.

Every structure has a plain *reference* implementation of ``log_partition`` in
:mod:`synattn.structs.reference` (marginals by autograd) and a list of *accelerations*:
implementations of the same two functions with the same signature that are faster or more
robust (explicit outside passes, compiled numba kernels, a stable elimination). The public
classes ask :func:`choose` which one runs; it returns the first acceleration whose predicate
holds for the arguments, in the order they were registered, and the reference when none does
or when ``use_backend("reference")`` (:mod:`synattn.structs.backend`) is in force.

=================  =====================================================  ==============================
structure          signature of ``log_partition`` / ``marginals``        accelerations, in order
=================  =====================================================  ==============================
``linear_chain``   ``(unary [B,n,C], edge [B,n-1,C,C], lengths, scan)``   ``numba`` (CPU), ``triton``, ``torch``
``projective``     ``(scores [B,N+1,N+1], lengths, multiroot)``           ``numba`` (CPU), ``triton``, ``torch``
``nonprojective``  ``(scores [B,N+1,N+1], lengths, multiroot)``           ``device`` (CUDA), ``numba`` (CPU), ``torch``
``cky``            ``(scores [B,N,N], lengths)``                          ``numba`` (CPU), ``triton``, ``torch``
``semi_markov``    ``(edge [B,n-1,K,C,C], lengths)``                      ``numba`` (CPU), ``triton``, ``torch``
=================  =====================================================  ==============================

(``scan``, default None, picks the schedule of the chain's PyTorch code; the others ignore it.)

``numba`` applies where :func:`~synattn.structs.backend.use_numba` says so (CPU tensors, numba
installed, backend ``auto`` or ``numba``); ``triton`` where :func:`~synattn.structs.backend.use_triton`
does (CUDA tensors with triton installed, or backend ``triton``); ``device`` (Matrix-Tree's GPU
path) for CUDA tensors; ``torch`` always applies. A new acceleration is one
:func:`register` call next to its code; ``tests/structs/test_registry.py`` then checks it
against the reference (values and gradients) with no further change.

Marginals are ``∂ log Z / ∂ scores`` (for the chain, ``∂ log Z / ∂ unary``: node marginals),
differentiable in every implementation. Inputs are those the public classes pass after their
checks: masked parts hold :data:`~synattn.structs.constants.NEG`, never ``-inf`` or NaN.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from . import reference
from .backend import requested_backend, use_numba, use_triton

__all__ = ["Implementation", "choose", "implementations", "log_partition", "marginals",
           "numba_applies", "register", "set_reference", "triton_applies"]


def always(*args) -> bool:
    """The predicate of an acceleration that applies to every input (the PyTorch code)."""
    return True


def numba_applies(*args) -> bool:
    """The predicate of the compiled kernels: :func:`~synattn.structs.backend.use_numba` of the
    tensors among ``args`` (raises if ``numba`` is asked for where it cannot run)."""
    return use_numba(*(a for a in args if isinstance(a, torch.Tensor)))


def triton_applies(*args) -> bool:
    """The predicate of the Triton kernels: :func:`~synattn.structs.backend.use_triton` of the
    tensors among ``args`` (raises if ``triton`` is asked for where it cannot run)."""
    return use_triton(*(a for a in args if isinstance(a, torch.Tensor)))


@dataclass(frozen=True)
class Implementation:
    """``log_partition(*args) -> [B]`` and ``marginals(*args) -> μ`` of one structure.

    ``applies(*args)`` says whether this implementation may run on these arguments.
    """

    name: str
    log_partition: Callable[..., torch.Tensor]
    marginals: Callable[..., torch.Tensor]
    applies: Callable[..., bool] = always


@dataclass
class _Structure:
    reference: Implementation
    accelerations: list[Implementation] = field(default_factory=list)


def _from_reference(log_z: Callable[..., torch.Tensor]) -> Implementation:
    return Implementation("reference", log_z, functools.partial(reference.marginals_by_autograd, log_z))


_STRUCTURES: dict[str, _Structure] = {
    "linear_chain": _Structure(_from_reference(reference.linear_chain_log_partition)),
    "projective": _Structure(_from_reference(reference.eisner_log_partition)),
    "nonprojective": _Structure(_from_reference(reference.matrix_tree_log_partition)),
    "cky": _Structure(_from_reference(reference.cky_log_partition)),
    "semi_markov": _Structure(_from_reference(reference.semi_markov_log_partition)),
}


def _structure(name: str) -> _Structure:
    if name not in _STRUCTURES:
        raise KeyError(f"unknown structure {name!r}; registered: {sorted(_STRUCTURES)}")
    return _STRUCTURES[name]


def register(structure: str, implementation: Implementation, before: str | None = None) -> Implementation:
    """Add ``implementation`` as the last acceleration of ``structure``, or just before the one
    named ``before`` (replacing one of the same name in place); returns it."""
    accelerations = _structure(structure).accelerations
    names = [a.name for a in accelerations]
    if implementation.name in names:
        accelerations[names.index(implementation.name)] = implementation
    elif before in names:
        accelerations.insert(names.index(before), implementation)
    else:
        accelerations.append(implementation)
    return implementation


def set_reference(structure: str, log_partition: Callable[..., torch.Tensor],
                  marginals: Callable[..., torch.Tensor]) -> None:
    """Replace the reference of ``structure`` by a wrapper of it with the public class's
    conventions at the edges (e.g. ``-inf`` where no structure exists), for :func:`choose`."""
    _structure(structure).reference = Implementation("reference", log_partition, marginals)


def implementations(structure: str) -> list[Implementation]:
    """The reference of ``structure`` followed by its accelerations, in order."""
    entry = _structure(structure)
    return [entry.reference, *entry.accelerations]


def choose(structure: str, *args) -> Implementation:
    """The implementation that runs ``structure`` on ``args``: the reference under
    ``use_backend("reference")``, else the first acceleration that applies, else the reference."""
    entry = _structure(structure)
    if requested_backend() == "reference":
        return entry.reference
    for acceleration in entry.accelerations:
        if acceleration.applies(*args):
            return acceleration
    return entry.reference


def log_partition(structure: str, *args) -> torch.Tensor:
    """``[B]`` ``log Z`` of ``structure`` by :func:`choose`'s implementation."""
    return choose(structure, *args).log_partition(*args)


def marginals(structure: str, *args) -> torch.Tensor:
    """The marginals of ``structure`` by :func:`choose`'s implementation."""
    return choose(structure, *args).marginals(*args)
