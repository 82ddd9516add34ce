"""The module paths of :mod:`synattn.structs` from before its files were grouped by structure,
kept for code written against them.

``import synattn.structs.eisner`` (or ``from synattn.structs.eisner import eisner_inside``) gives
:mod:`synattn.structs.dependency.eisner` itself, the same module object, imported on first use:
the old paths cost nothing until asked for, and the compiled kernels' modules are still loaded
only on the compiled path. An old module whose contents went to several modules (``semiring``)
is a small module that looks each name up in those, in order. docs/structs.md lists where each
file went.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

PACKAGE = __name__.rpartition(".")[0]

MOVED: dict[str, tuple[str, ...]] = {
    # the semirings: one package; semiring.py's contents by idea
    "semiring": ("semirings.log_max", "semirings.signed", "scores", "constants", "backend", "forward_mode"),
    "semiring_programs": ("semirings.programs",),
    "semiring_sampling": ("semirings.sampling",),
    # chains: the linear chain and the semi-Markov CRF
    "chain_dp": ("chain.dp",),
    "chain_decoding": ("chain.decoding",),
    "semimarkov": ("chain.semimarkov",),
    # dependency trees: projective, second-order, non-projective, labelled
    "arc_scores": ("dependency.arc_scores",),
    "labelled_arcs": ("dependency.labelled_arcs",),
    "eisner": ("dependency.eisner",),
    "eisner2o": ("dependency.eisner2o",),
    "second_order_vi": ("dependency.second_order_vi",),
    "matrix_tree": ("dependency.matrix_tree",),
    "matrix_tree_gth": ("dependency.matrix_tree_gth",),
    "matrix_tree_log": ("dependency.matrix_tree_log",),
    "matrix_tree_sample": ("dependency.matrix_tree_sample",),
    "chu_liu_edmonds": ("dependency.chu_liu_edmonds",),
    # constituency trees: the tree CRF (cky itself is the package) and the PCFG
    "cky_dp": ("cky.dp",),
    "cfg": ("cky.cfg",),
    # sequences given by a model (alignment is its own package, under its old name)
    "autoregressive": ("sequence.autoregressive",),
}
"""Old module (relative to the package) → the module(s) its contents are in now."""


class _Merged(types.ModuleType):
    """An old module split into several: each name from the first new module that has it."""

    def __init__(self, name: str, sources: tuple[str, ...]):
        super().__init__(name, f"Moved: {', '.join(sources)}.")
        self._sources = sources

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for source in self._sources:
            # lazy: the new modules are named in MOVED and loaded only when an old name is used
            module = importlib.import_module(source)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (it moved to "
                             f"{', '.join(self._sources)})")

    def __dir__(self):
        # by name: the new modules of an old one are read from MOVED (loaded on first use)
        return sorted({n for s in self._sources for n in dir(importlib.import_module(s))
                       if not n.startswith("_")})


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``synattn.structs.<old name>`` and loads it as its new module."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # (a plain module; exec_module puts the new one in its place)

    def exec_module(self, module):
        sources = tuple(f"{PACKAGE}.{m}" for m in MOVED[module.__name__.rpartition(".")[2]])
        # the import system returns whatever sys.modules holds under the old name afterwards; the new
        # module is known only by its name in MOVED, so it is imported by name here
        sys.modules[module.__name__] = (importlib.import_module(sources[0]) if len(sources) == 1
                                        else _Merged(module.__name__, sources))


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())
