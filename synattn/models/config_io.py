"""Strict conversion between config dataclasses and plain dicts / YAML / JSON.

Unknown keys and values of the wrong type are errors that name the key path
(``encoder.supervised_head.layer``) and what was expected. Ints are accepted where a float is
expected; bools are never accepted as ints.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml

from synattn.errors import InputError
from synattn.io import atomic_write

T = TypeVar("T")


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def check_type(tp: Any, value: Any, where: str) -> None:
    """Raises ``ValueError`` when ``value`` does not have the declared type ``tp``."""
    if _is_union(tp):
        args = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return
        if len(args) == 1:  # Optional[X]: X's own error names the nested field
            return check_type(args[0], value, where)
        for arg in args:
            try:
                return check_type(arg, value, where)
            except ValueError:
                pass
        raise ValueError(f"{where}: expected {_describe(tp)}, got {type(value).__name__} ({value!r})")
    if tp is type(None):
        if value is not None:
            raise ValueError(f"{where}: expected None, got {value!r}")
        return
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__} ({value!r})")
        (item,) = typing.get_args(tp)
        for i, v in enumerate(value):
            check_type(item, v, f"{where}[{i}]")
        return
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, tp):
            raise ValueError(f"{where}: expected a mapping of {tp.__name__} fields, got {value!r}")
        check_fields(value, where + ".")
        return
    ok = (isinstance(value, bool) if tp is bool
          else isinstance(value, (int, float)) and not isinstance(value, bool) if tp is float
          else isinstance(value, tp) and not (tp is int and isinstance(value, bool)))
    if not ok:
        raise ValueError(f"{where}: expected {_describe(tp)}, got {type(value).__name__} ({value!r})")


def check_fields(obj: Any, prefix: str = "") -> None:
    """Checks every field of dataclass ``obj`` (recursively) against its annotation."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        check_type(hints[f.name], getattr(obj, f.name), prefix + f.name)


def _convert(tp: Any, value: Any, where: str) -> Any:
    """Builds nested dataclasses out of dicts (types are checked afterwards)."""
    if _is_union(tp):
        if value is None:
            return None
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg) and isinstance(value, dict):
                return from_dict(arg, value, where + ".")
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value, where + ".")
    if typing.get_origin(tp) is list and isinstance(value, list):
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Builds dataclass ``cls`` from ``data``, rejecting unknown keys (``ValueError``)."""
    if not isinstance(data, dict):
        raise ValueError(f"{prefix.rstrip('.') or cls.__name__}: expected a mapping, got {data!r}")
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = [key for key in data if key not in known]
    if unknown:
        where = prefix.rstrip(".") or cls.__name__
        raise ValueError(f"unknown key '{prefix}{unknown[0]}' in {where}; known keys: {', '.join(known)}")
    hints = typing.get_type_hints(cls)
    return cls(**{key: _convert(hints[key], value, prefix + key) for key, value in data.items()})


def to_dict(obj: Any) -> dict[str, Any]:
    """Returns the config as plain dicts and lists."""
    return dataclasses.asdict(obj)


class _Loader(yaml.SafeLoader):
    """YAML 1.1's safe loader, also reading ``5e-4`` and ``1e4`` as floats (as YAML 1.2 and
    Python do; PyYAML alone reads them as strings)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                 |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                 |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                 |[-+]?\.(?:inf|Inf|INF)
                 |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """Parses YAML text with synattn's loader (safe: builds only plain data)."""
    return yaml.load(text, Loader=_Loader)


def load_yaml(cls: type[T], path: str | Path) -> T:
    """Reads a config of class ``cls`` from a YAML file; errors name the file."""
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.load(f, Loader=_Loader)
        except yaml.YAMLError as error:
            line = getattr(getattr(error, "problem_mark", None), "line", None)
            raise InputError(f"invalid YAML: {error}", str(path), None if line is None else line + 1)
    try:
        return from_dict(cls, {} if data is None else data)
    except ValueError as error:
        raise InputError(str(error), str(path)) from None


def save_yaml(obj: Any, path: str | Path) -> None:
    """Writes the config to a YAML file."""
    with atomic_write(path) as f:
        yaml.safe_dump(to_dict(obj), f, sort_keys=False)
