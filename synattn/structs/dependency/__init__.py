"""Dependency trees over arc scores ``[B, n+1, n+1]`` (ROOT at index 0; labelled ``[..., R]``).

- :mod:`~synattn.structs.dependency.arc_scores`: the layout, its checks and :class:`ArcCRF`, the
  base of the tree CRFs; :mod:`~synattn.structs.dependency.labelled_arcs`: labelled arcs for all;
- projective trees: :mod:`~synattn.structs.dependency.eisner` (``DependencyCRF``, Eisner's
  algorithm with an explicit outside pass; compiled ``_eisner_kernels.py``);
- second order (adjacent siblings): :mod:`~synattn.structs.dependency.eisner2o`
  (``Dependency2oCRF``; ``_eisner2o_kernels.py``) and its approximations
  :mod:`~synattn.structs.dependency.second_order_vi` (``DependencyMFVI``, ``DependencyLBP``);
- semantic dependency graphs (any set of arcs) with sibling, co-parent and grandparent factors:
  :mod:`~synattn.structs.dependency.semantic_vi` (``SemanticDependencyMFVI``, ``SemanticDependencyLBP``);
- non-projective trees: :mod:`~synattn.structs.dependency.matrix_tree`
  (``NonProjectiveDependencyCRF``, the Matrix-Tree theorem) with its eliminations
  ``matrix_tree_gth.py`` and ``matrix_tree_log.py``, compiled ``_matrix_tree_kernels.py`` (forward) and
  ``_matrix_tree_tangent_kernels.py`` (backward), the
  GPU path ``matrix_tree_device.py`` (batched LU on the device, closed-form backward, the
  sentences LU cannot certify by the Triton kernel ``triton_kernels/matrix_tree.py``),
  exact samples ``matrix_tree_sample.py`` and the best tree ``chu_liu_edmonds.py``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (loaded on first use: see __getattr__)
    from .arc_scores import ArcCRF
    from .eisner import DependencyCRF
    from .eisner2o import Dependency2oCRF
    from .matrix_tree import NonProjectiveDependencyCRF
    from .second_order_vi import DependencyLBP, DependencyMFVI
    from .semantic_vi import SemanticDependencyLBP, SemanticDependencyMFVI

_HOMES = {"ArcCRF": "arc_scores", "DependencyCRF": "eisner", "Dependency2oCRF": "eisner2o",
          "NonProjectiveDependencyCRF": "matrix_tree", "DependencyLBP": "second_order_vi",
          "DependencyMFVI": "second_order_vi", "SemanticDependencyLBP": "semantic_vi",
          "SemanticDependencyMFVI": "semantic_vi"}
"""Where each class lives: importing one loads its own modules only (PEP 562)."""

__all__ = ["ArcCRF", "Dependency2oCRF", "DependencyCRF", "DependencyLBP", "DependencyMFVI",
           "NonProjectiveDependencyCRF", "SemanticDependencyLBP", "SemanticDependencyMFVI"]


def __getattr__(name: str):
    """A class of the package, loaded on first use (:data:`_HOMES`)."""
    if name in _HOMES:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
