"""Differentiable dynamic programs on tensors: chains, dependency trees and constituency trees.

- :class:`LinearChainCRF`: forward-backward and Viterbi; node marginals backpropagate in the
  signed log-space semifield (Kim et al. 2017) on the PyTorch path, as a covariance of
  conditional expectations (the same gradient) in the compiled kernels.
- :class:`DependencyCRF`: projective trees by Eisner's algorithm with an explicit outside pass.
- :class:`Dependency2oCRF`: projective trees with adjacent-sibling scores (second-order Eisner,
  McDonald and Pereira 2006); :class:`DependencyMFVI`, :class:`DependencyLBP`: its approximate
  arc marginals by mean field and loopy belief propagation (supar's modules);
  :class:`SemanticDependencyMFVI`, :class:`SemanticDependencyLBP`: the same for the arcs of
  semantic dependency graphs with sibling, co-parent and grandparent factors.
- :class:`NonProjectiveDependencyCRF`: the Matrix-Tree theorem (Koo et al. 2007) and
  Chu-Liu-Edmonds.
- Both dependency classes take labelled arc scores ``[B, N+1, N+1, R]`` too
  (:mod:`synattn.structs.dependency.labelled_arcs`: labelled marginals, argmax ``[B, N, 2]`` heads and labels).
- :class:`SemiMarkovCRF`: labelled segmentations (segments of ``1..K-1`` positions) by the
  forward recursion over segment ends, torch-struct's ``SemiMarkovCRF`` in synattn's layout.
- :class:`AlignmentCRF`: monotonic alignments of two sequences (torch-struct's; global or local)
  by the forward recursion over anti-diagonals.
- :class:`SentCFG`: parses of a PCFG in Chomsky normal form (torch-struct's terms/rules/roots)
  by the inside recursion.
- :class:`Autoregressive`: a user's autoregressive model as a distribution over sequences
  (torch-struct's): beam search, greedy decoding, ancestral samples, ``log_prob``.
- :class:`TreeCRF`: binary constituency trees with span scores ``[B, N, N]`` by CKY
  inside-outside, or labelled span scores ``[B, N, N, NT]`` (:mod:`synattn.structs.cky.labelled_spans`);
  :class:`ConstituencyMFVI`, :class:`ConstituencyLBP`: approximate span marginals with span-pair
  scores (supar's modules); :mod:`synattn.structs.convert` maps score layouts to and from
  torch-struct and supar.

Each structure has one plain reference implementation of ``log_partition`` that a reader can
follow (:mod:`synattn.structs.reference`; marginals by autograd); the compiled kernels and the
explicit-outside or closed-form PyTorch code are accelerations of it registered with the same
signature in :mod:`synattn.structs.registry`, which the classes ask which one runs.

Arc scores are ``scores[b, h, d]`` for head ``h`` → dependent ``d`` with ROOT at index 0 (see
:mod:`synattn.structs.dependency.arc_scores`). Every class takes per-sentence ``lengths`` and runs its
dynamic program in float32 or float64 (also under autocast): as compiled numba kernels for CPU
tensors, in pure PyTorch otherwise (:mod:`synattn.structs.backend`; same numbers).
"""

from typing import TYPE_CHECKING

from . import _old_paths

if TYPE_CHECKING:  # (loaded on first use: see __getattr__)
    from .alignment.crf import AlignmentCRF
    from .chain.crf import ChainMarginals, LinearChainCRF
    from .chain.semimarkov import SemiMarkovCRF
    from .cky.cfg import SentCFG
    from .cky.crf import CKYMarginals, TreeCRF
    from .cky.second_order_vi import ConstituencyLBP, ConstituencyMFVI
    from .constants import NEG
    from .dependency.eisner import DependencyCRF
    from .dependency.eisner2o import Dependency2oCRF
    from .dependency.matrix_tree import NonProjectiveDependencyCRF
    from .dependency.second_order_vi import DependencyLBP, DependencyMFVI
    from .dependency.semantic_vi import SemanticDependencyLBP, SemanticDependencyMFVI
    from .semirings.log_max import LogSemiring, MaxSemiring
    from .sequence.autoregressive import Autoregressive

_HOMES = {
    "AlignmentCRF": "alignment.crf", "ChainMarginals": "chain.crf", "LinearChainCRF": "chain.crf",
    "SemiMarkovCRF": "chain.semimarkov", "SentCFG": "cky.cfg", "CKYMarginals": "cky.crf", "TreeCRF": "cky.crf",
    "ConstituencyLBP": "cky.second_order_vi", "ConstituencyMFVI": "cky.second_order_vi", "NEG": "constants",
    "DependencyCRF": "dependency.eisner", "Dependency2oCRF": "dependency.eisner2o",
    "NonProjectiveDependencyCRF": "dependency.matrix_tree", "DependencyLBP": "dependency.second_order_vi",
    "DependencyMFVI": "dependency.second_order_vi", "SemanticDependencyLBP": "dependency.semantic_vi",
    "SemanticDependencyMFVI": "dependency.semantic_vi", "LogSemiring": "semirings.log_max",
    "MaxSemiring": "semirings.log_max", "Autoregressive": "sequence.autoregressive",
}
"""Where each public name lives: ``from synattn.structs import DependencyCRF`` loads Eisner's modules
only (PEP 562), not every structure's."""

__all__ = [
    "AlignmentCRF",
    "Autoregressive",
    "CKYMarginals",
    "ChainMarginals",
    "ConstituencyLBP",
    "ConstituencyMFVI",
    "Dependency2oCRF",
    "DependencyCRF",
    "DependencyLBP",
    "DependencyMFVI",
    "LinearChainCRF",
    "LogSemiring",
    "MaxSemiring",
    "NEG",
    "NonProjectiveDependencyCRF",
    "SemanticDependencyLBP",
    "SemanticDependencyMFVI",
    "SemiMarkovCRF",
    "SentCFG",
    "TreeCRF",
]

_old_paths.install()


def __getattr__(name: str):
    """A public class, loaded with its own modules on first use (:data:`_HOMES`), and
    ``synattn.structs.<old module name>`` as an attribute too (see :mod:`._old_paths`)."""
    import importlib

    if name in _HOMES:  # lazy and by name: each class's module is read from _HOMES
        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
        globals()[name] = value
        return value
    if name in _old_paths.MOVED:
        # lazy and by name: an old path is loaded only when used, its new module read from MOVED
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
