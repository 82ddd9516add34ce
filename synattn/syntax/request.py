"""What syntax a batch is asked to carry: the fields of each side and the settings their labels
depend on.

A :class:`SyntaxRequest` names the registered syntax fields wanted on the source (``src``) and the
target (``tgt``) side of a batch, and the values of the settings those fields declare
(:class:`~synattn.syntax.fields.SyntaxField` ``setting`` and ``default``: ``tree_dist`` clips its
labels at ``max_distance`` 8, ``traversal`` at ``max_traversal`` 4). The settings are a mapping
declared by the fields, so a method whose new field has a setting of its own registers the field
(with the setting's name and default) in its module and nothing here changes; every declared
setting is also an attribute (``request.max_distance``) and a keyword of the constructor
(``SyntaxRequest(src=..., max_distance=2)``).

Example:
    >>> request = SyntaxRequest(src=frozenset({"tree_dist"}), max_distance=2)
    >>> request.max_distance, request.max_traversal, request.settings
    (2, 4, {'max_distance': 2})
    >>> SyntaxRequest(max_distance=8) == SyntaxRequest()   # a default is the same request
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from synattn.syntax.fields import declared_settings


@dataclass(frozen=True, init=False)
class SyntaxRequest:
    """Which syntax fields a model needs, per side (computed only when asked), and their settings.

    Attributes:
        src, tgt: the registered field names wanted on each side.
        settings: the declared settings (:func:`~synattn.syntax.fields.declared_settings`) that
            differ from their defaults; read one with :meth:`setting` or as an attribute.
        src_bos: the source framed as ``<s> x`` instead of ``x </s>`` (``ModelConfig.src_bos``).

    Raises:
        TypeError: a keyword that no registered field declares as its setting.
    """

    src: frozenset[str] = frozenset()
    tgt: frozenset[str] = frozenset()
    settings: Mapping[str, int] = field(default_factory=dict)
    src_bos: bool = False

    def __init__(self, src: frozenset[str] = frozenset(), tgt: frozenset[str] = frozenset(),
                 settings: Mapping[str, int] | None = None, src_bos: bool = False, **values: int):
        declared = declared_settings()
        given = {**(settings or {}), **values}
        unknown = sorted(name for name in given if name not in declared)
        if unknown:
            raise TypeError(f"SyntaxRequest: no syntax field declares the setting(s) {', '.join(unknown)} "
                            f"(declared: {', '.join(declared) or 'none'})")
        kept = {name: value for name, value in sorted(given.items()) if value != declared[name]}
        object.__setattr__(self, "src", frozenset(src))
        object.__setattr__(self, "tgt", frozenset(tgt))
        object.__setattr__(self, "settings", kept)
        object.__setattr__(self, "src_bos", bool(src_bos))

    def setting(self, name: str) -> int:
        """The value of the declared setting ``name`` (its field's default unless given).

        Raises:
            AttributeError: no registered field declares ``name``.
        """
        if name in self.settings:
            return self.settings[name]
        declared = declared_settings()
        if name not in declared:
            raise AttributeError(f"SyntaxRequest has no setting {name!r} (declared: {', '.join(declared) or 'none'})")
        return declared[name]

    def __getattr__(self, name: str) -> Any:  # only for names that are not attributes: the settings
        if name.startswith("_") or "settings" not in self.__dict__:  # (while unpickling, too)
            raise AttributeError(name)
        return self.setting(name)

    def __hash__(self) -> int:
        return hash((self.src, self.tgt, tuple(self.settings.items()), self.src_bos))
