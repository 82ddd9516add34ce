"""Models that another library builds, trained and evaluated like synattn's own.

An experiment's model section names the library by its package name as a key (``model:
{transformers: ...}``, docs/hf.md); the library's hooks then replace what the task kind does itself:
the model config, the syntax request, the model, its training task and the loading of a
checkpoint. A model whose class comes from the library's package is trained by the library's task.

The one library is Hugging Face ``transformers``: :mod:`synattn.hf.task` registers its hooks. It is
imported on first use (this module names it, in :data:`LIBRARIES`, and nothing outside ``hf/``
does), so synattn works without it installed.

Example:
    >>> from synattn.train.libraries import library_of_section
    >>> library_of_section({"d_model": 256}) is None   # a synattn model
    True
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from synattn.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from synattn.syntax.request import SyntaxRequest
    from synattn.train.tasks import Task


class LibraryEntry(NamedTuple):
    """Where a library's hooks are and how to recognise its files without importing it."""

    module: str
    """The module that registers its :class:`ModelLibrary` (imported on first use)."""
    install: str
    """What ``pip install`` installs it with."""
    checkpoint_key: str
    """A key of the ``config.json`` its checkpoints have (and synattn's own do not)."""


LIBRARIES: dict[str, LibraryEntry] = {
    "transformers": LibraryEntry("synattn.hf.task", "synattn[hf]", "architectures"),
}
"""The libraries by package name (the key of an experiment's model section)."""


@dataclass(frozen=True)
class ModelLibrary:
    """One library's hooks.

    Attributes:
        name: its package name (a key of :data:`LIBRARIES`).
        model_config: ``(exp, manifest, labels, placeholder)`` → the model config of ``exp`` with the
            dataset's sizes (``placeholder``: the sizes are stand-ins, no dataset read yet).
        syntax_request: ``config`` → the :class:`SyntaxRequest` of the syntax its features read.
        build_model: ``exp`` → a new model (the dataset checked first).
        task: ``model`` → the :class:`Task` that trains it.
        load_checkpoint: ``folder`` → the model of a checkpoint folder.
        save: ``(model, folder)`` → writes the model's weights (and config) into a checkpoint folder
            (None: its ``save_pretrained``).
    """

    name: str
    model_config: Callable[[Any, dict, dict, bool], Any]
    syntax_request: Callable[[Any], SyntaxRequest]
    build_model: Callable[[Any], nn.Module]
    task: Callable[[nn.Module], Task]
    load_checkpoint: Callable[[Path], nn.Module]
    save: Callable[[nn.Module, Path], None] | None = None


_REGISTERED: dict[str, ModelLibrary] = {}


def register_library(library: ModelLibrary) -> ModelLibrary:
    """Registers ``library``'s hooks (its module calls this when imported)."""
    if library.name not in LIBRARIES:
        raise ValueError(f"library {library.name!r} is not one of {', '.join(LIBRARIES)}")
    _REGISTERED[library.name] = library
    return library


def library(name: str) -> ModelLibrary:
    """The hooks of the library ``name``, its module imported on first use.

    Raises:
        ConfigError: the library is not installed (saying what to install).
    """
    if name not in _REGISTERED:
        entry = LIBRARIES[name]
        try:
            # lazy: the library (transformers) is optional and heavy, loaded by the entry's name on first use
            importlib.import_module(entry.module)
        except ImportError:
            raise ConfigError(f"model.{name} needs the {name} package (pip install '{entry.install}')") from None
    return _REGISTERED[name]


def library_of_section(model: dict) -> ModelLibrary | None:
    """The library an experiment's model section names (None: a synattn model)."""
    names = [name for name in LIBRARIES if name in model]
    return library(names[0]) if names else None


def library_of_model(model: Any) -> ModelLibrary | None:
    """The library whose package ``model``'s class (or one of its bases) comes from (None: none)."""
    packages = {cls.__module__.split(".")[0] for cls in type(model).__mro__}
    names = [name for name in LIBRARIES if name in packages]
    return library(names[0]) if names else None


def library_of_checkpoint(folder: Path) -> ModelLibrary | None:
    """The library whose checkpoint ``folder`` is, read from its ``config.json`` (None: synattn's
    own, or no readable config)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = [name for name, entry in LIBRARIES.items() if isinstance(config, dict) and entry.checkpoint_key in config]
    return library(names[0]) if names else None
