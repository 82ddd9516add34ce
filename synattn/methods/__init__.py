"""The method registry: one :class:`Method` spec per attention method (see ``base.py``).

Each module of this package registers its methods when imported; importing the package imports
all of them (the built-in ones first, in the order of :data:`BUILT_IN`, then any other module,
by name). Adding a method is adding one module here (docs/adding_a_method.md).

Example:
    >>> from synattn.methods import methods
    >>> [m.name for m in methods()][:3]
    ['relations', 'specialized_heads', 'supervised_head']
"""

from __future__ import annotations

import importlib
import pkgutil

from synattn.methods.base import (
    SIDES,
    Claim,
    Method,
    Option,
    Site,
    check_claims,
    check_head,
    check_layer,
    check_layers,
    register,
    registered,
    unregister,
)

BUILT_IN = ("relations", "specialized", "supervised", "constituent", "bird_eye", "cross_attention",
            "syntactic")
"""The built-in method modules, in the order of their settings in ``StackConfig``."""

# by name, not `from synattn.methods import ...`: each import registers its method, and the order of
# BUILT_IN (the order of the settings in StackConfig) is the point, which sorted imports would lose
for _name in BUILT_IN:
    importlib.import_module(f"{__name__}.{_name}")
# discovery: any other module of this package is a method (one file, docs/adding_a_method.md), whose
# name this file does not know
for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _module.name not in BUILT_IN and _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def methods() -> list[Method]:
    """Every registered method, built-in ones first."""
    return registered()


def method(name: str) -> Method:
    """The registered method called ``name``."""
    for m in registered():
        if m.name == name:
            return m
    raise KeyError(f"no method {name!r}; registered: {', '.join(m.name for m in registered())}")


__all__ = ["BUILT_IN", "SIDES", "Claim", "Method", "Option", "Site", "check_claims",
           "check_head", "check_layer", "check_layers", "method", "methods", "register", "unregister"]
