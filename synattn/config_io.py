"""Strict conversion between config dataclasses and plain dicts / YAML / JSON.

Unknown keys, missing required keys and values of the wrong type are :class:`ConfigError` naming
the key path (``encoder.supervised_head.layer``) and what was expected. Ints are accepted where a
float is expected; bools are never accepted as ints; floats must be finite (``.nan`` and ``.inf``
are refused). A range or compatibility check of a nested config (``train.lr=0 must be positive``)
is reported with the path of the section that holds it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml

from synattn.config_bounds import MAX_DEPTH, check_depth, check_number
from synattn.errors import ConfigError, InputError, brief
from synattn.io import atomic_write

T = TypeVar("T")


class ConfigFileError(ConfigError, InputError):
    """A config mistake found in a file: the message starts with the file (and line)."""


def config_error(err: Exception, where: str) -> ConfigFileError:
    """``err`` (a config mistake) as one line prefixed by ``where`` (a file or an override); the
    known keys of an unknown key's section (:func:`unknown_key`) go with it."""
    message = " ".join(str(err).split())
    if message.startswith(where + ":"):
        message = message[len(where) + 1:].lstrip()
    made = ConfigFileError(message, where)
    made.known_keys = getattr(err, "known_keys", None)  # type: ignore[attr-defined]
    return made


KNOWN_KEYS = "; known keys: "
"""What comes before the list of the known keys in an unknown key's message."""


def unknown_key(key: str, where: str, prefix: str, known: list[str]) -> ConfigError:
    """The error of an unknown key ``prefix + key`` in the section ``where`` whose keys are ``known``:
    one line, ``unknown key 'train.max_step' in train (did you mean 'train.max_steps'?); known keys:
    …`` (the closest key by :func:`difflib.get_close_matches`, when one is close); the keys also
    go with the error as ``known_keys``, for a command to show them wrapped
    (:func:`without_known_keys`)."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    guess = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
    err = ConfigError(f"unknown key '{prefix}{key}' in {where}{guess}{KNOWN_KEYS}{', '.join(known)}")
    err.known_keys = list(known)  # type: ignore[attr-defined]
    return err


def without_known_keys(message: str) -> str:
    """An unknown key's message without its list of known keys (a command that shows them wrapped);
    a note in parentheses after the list is kept."""
    head, _, tail = message.partition(KNOWN_KEYS)
    return head + (tail[tail.index(" ("):] if " (" in tail else "")


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def check_type(tp: Any, value: Any, where: str) -> None:
    """Raises :class:`ConfigError` when ``value`` does not have the declared type ``tp``."""
    if _is_union(tp):
        args = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return
        if len(args) == 1:  # Optional[X]: X's own error names the nested field
            return check_type(args[0], value, where)
        for arg in args:
            try:
                return check_type(arg, value, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected {_describe(tp)}, got {type(value).__name__} ({brief(value)})")
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected None, got {brief(value)}")
        return
    origin = typing.get_origin(tp)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} ({brief(value)})")
        return
    if tp is Any:
        return
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} ({brief(value)})")
        (item,) = typing.get_args(tp)
        for i, v in enumerate(value):
            check_type(item, v, f"{where}[{i}]")
        return
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, tp):
            raise ConfigError(f"{where}: expected a mapping of {tp.__name__} fields, got {brief(value)}")
        check_fields(value, where + ".")
        return
    ok = (isinstance(value, bool) if tp is bool
          else isinstance(value, (int, float)) and not isinstance(value, bool) if tp is float
          else isinstance(value, tp) and not (tp is int and isinstance(value, bool)))
    if not ok:
        raise ConfigError(f"{where}: expected {_describe(tp)}, got {type(value).__name__} ({brief(value)})")
    if tp is float and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {brief(value)}")
    if tp in (int, float):
        check_number(value, where)  # (synattn.config_bounds: no count or rate beyond any run's)


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
            if isinstance(arg, type) and dataclasses.is_dataclass(arg) and isinstance(value, dict):
                return from_dict(arg, value, where + ".")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value, where + ".")
    if typing.get_origin(tp) is list and isinstance(value, list):
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Builds dataclass ``cls`` from ``data``, rejecting unknown and missing keys; every error is
    a :class:`ConfigError` (a ``ValueError``) naming the key path under ``prefix``."""
    where = prefix.rstrip(".") or cls.__name__
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys to values, got {type(data).__name__} ({brief(data)})")
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"from_dict: {cls.__name__} is not a dataclass")
    upgrade = getattr(cls, "upgrade", None)  # a config that still reads older spellings of its keys
    if upgrade is not None:
        data = upgrade(data, prefix)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    known = [f.name for f in fields]
    for key in data:
        if not isinstance(key, str) or key not in known:
            shown = key if isinstance(key, str) and len(key) <= 60 else brief(key, 60)
            raise unknown_key(shown, where, prefix, known)
    missing = [f.name for f in fields if f.name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"missing key '{prefix}{missing[0]}' in {where}")
    hints = typing.get_type_hints(cls)
    values = {key: _convert(hints[key], value, prefix + key) for key, value in data.items()}
    try:
        return cls(**values)
    except ConfigError as err:
        if prefix and not getattr(err, "prefixed", False):
            err = ConfigError(prefix + str(err))
            err.prefixed = True
        raise err from None
    except (ValueError, TypeError) as err:  # a config class checking with plain ValueError
        raise ConfigError(f"{prefix}{err}") from None


def to_dict(obj: Any) -> dict[str, Any]:
    """Returns the config as plain dicts and lists."""
    return dataclasses.asdict(obj)


class _Loader(yaml.SafeLoader):
    """YAML 1.1's safe loader, also reading ``5e-4`` and ``1e4`` as floats (as YAML 1.2 and
    Python do; PyYAML alone reads them as strings), and refusing a key given twice in one
    mapping (PyYAML lets the last one win silently; a merge ``<<`` may still override)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {brief(key, 40)} (it is given twice in one mapping)",
                        key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                 |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                 |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                 |[-+]?\.(?:inf|Inf|INF)
                 |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """Parses YAML text with synattn's loader (safe: builds only plain data); nesting deeper than
    :data:`synattn.config_bounds.MAX_DEPTH` is a :class:`ConfigError`."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except RecursionError:
        raise ConfigError(f"YAML: nested more than {MAX_DEPTH} levels deep") from None
    check_depth(data, "YAML")
    return data


def load_yaml(cls: type[T], path: str | Path) -> T:
    """Reads a config of class ``cls`` from a YAML file; errors name the file."""
    data = read_yaml(path)
    try:
        return from_dict(cls, {} if data is None else data)
    except ValueError as error:
        raise config_error(error, str(path)) from None


def read_yaml(path: str | Path) -> Any:
    """The data of a YAML file; an unreadable file or invalid YAML is a one-line
    :class:`ConfigFileError` naming the file (and the line)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_Loader)
        check_depth(data, "YAML")
        return data
    except (RecursionError, ConfigError):
        raise ConfigFileError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep (a config is a "
                              "few levels of sections and keys)", str(path)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigFileError(f"invalid YAML: {problem}", str(path), line) from None
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"not valid UTF-8 (byte {error.object[error.start]:#04x})", str(path)) from None
    except OSError as error:
        raise ConfigFileError(f"cannot read the config: {error.strerror}", str(path)) from None


def save_yaml(obj: Any, path: str | Path) -> None:
    """Writes the config to a YAML file."""
    with atomic_write(path) as f:
        yaml.safe_dump(to_dict(obj), f, sort_keys=False)


class StrictConfig:
    """Base of synattn's config dataclasses: constructing one checks the type of every field
    (recursively, :func:`check_fields`) and then the subclass's ranges and compatibilities
    (:meth:`check`); dict and YAML I/O is strict (:func:`from_dict`)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Checks types, then :meth:`check`; raises :class:`ConfigError` naming the key."""
        check_fields(self)
        self.check()

    def check(self) -> None:
        """Ranges and compatibilities of the subclass's fields (types are already checked)."""

    @classmethod
    def from_dict(cls: type[T], data: dict) -> T:
        """Builds the config from a dict; unknown keys and wrong types are ``ConfigError`` (a ``ValueError``)."""
        return from_dict(cls, data)

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_yaml(cls: type[T], path: str | Path) -> T:
        """Reads the config from a YAML file (errors are ``InputError`` naming the file)."""
        return load_yaml(cls, path)

    def to_yaml(self, path: str | Path) -> None:
        save_yaml(self, path)
