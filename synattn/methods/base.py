"""What a method is: one :class:`Method` spec, registered once and read by every step that needs it.

A spec declares

- its **settings**: the fields it adds to a stack config (``StackConfig``), usually one nested
  section (``supervised_head: {layer: 3, head: 0}``) whose dataclass is :attr:`Method.config`;
- the **syntax inputs** it reads (fields of :class:`synattn.attention.SyntaxInputs`), so that
  batches carry them (``synattn.train.tasks.syntax_request_for``);
- **where it may go**: :attr:`Method.sides`, any of ``encoder`` (bidirectional self-attention),
  ``decoder`` (causal self-attention) and ``cross`` (a translation decoder's attention to the
  source);
- its **checks** (:meth:`Method.validate`) and what it **claims** of its layers
  (:meth:`Method.claims`: heads, a slot, a direction; :class:`synattn.attention.claims.Claim`): two
  methods claiming one head of one layer cannot be combined; the rule is written once, in
  :func:`synattn.attention.claims.conflict`, which attention modules apply to their features too;
- how it **builds** its attention features for one layer (:meth:`Method.feature`,
  :meth:`Method.layer_features`, :meth:`Method.cross_features`).

That is what a native model needs. Model configs (``synattn.models.config``), the syntax request
and model building (``synattn.models.features``) iterate :func:`methods`; so does
``synattn.hf.FEATURES``, which adds what a Hugging Face model needs besides (extra options, older
names, builders of their own) in one adapter per method, ``synattn/hf/methods.py``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from synattn.attention.claims import Claim, find_conflict
from synattn.attention.feature import AttentionFeature
from synattn.errors import ConfigError, brief

SIDES = ("encoder", "decoder", "cross")
"""Where a feature can go: bidirectional self-attention, causal self-attention, cross-attention."""

_MISSING = dataclasses.MISSING


@dataclass(frozen=True)
class Site:
    """One attention module of a model, as the builders see it.

    Attributes:
        side: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer: the layer index within its side.
        heads: number of query heads H.
        head_dim: d_k.
        d_model: width of the hidden states the attention reads.
    """

    side: str
    layer: int
    heads: int
    head_dim: int
    d_model: int

    @property
    def key(self) -> str:
        """Name of the site's submodule under ``model.synattn`` (``"encoder_3"``)."""
        return f"{self.side}_{self.layer}"


@dataclass(frozen=True)
class Option:
    """One field a method adds to ``StackConfig`` (or to a Hugging Face entry): name, type annotation,
    default (or factory), and the least value of a size (None: no bound)."""

    name: str
    type: Any
    default: Any = None
    factory: Callable[[], Any] | None = None
    minimum: int | None = None

    def default_value(self) -> Any:
        """A fresh default value."""
        return self.factory() if self.factory is not None else self.default


class Method:
    """One attention method: its settings, inputs, placement, checks and builders.

    Subclass it in one module of :mod:`synattn.methods`, set the class attributes, override the
    hooks you need and decorate the class with :func:`register`. The defaults fit a method with one
    nested section ``name: config | None`` (off when null) and one feature per layer built by
    :meth:`feature`.

    Class attributes:
        name: the method's key in a stack config (and its feature name in ``synattn.hf``).
        config: the dataclass of its settings, the one place its options are declared (names,
            types, defaults); None: the method writes its own :meth:`options`.
        flat: the fields of :attr:`config` are keys of the stack itself (``relations: [...]``,
            ``max_distance: 8``) instead of one section ``name: config | None``.
        sides: where it may go (:data:`SIDES`).
        order: its place among a layer's features (0 first; see ``synattn.models.features``).
        fields_read: the syntax fields it reads when on.
    """

    name: ClassVar[str]
    config: ClassVar[type | None] = None
    flat: ClassVar[bool] = False
    sides: ClassVar[tuple[str, ...]] = ("encoder", "decoder")
    order: ClassVar[float] = 50.0
    fields_read: ClassVar[frozenset[str]] = frozenset()

    # ---------------------------------------------------------------- settings
    def options(self) -> list[Option]:
        """The fields this method adds to ``StackConfig``: ``name: config | None = None`` (off when
        null), or the fields of :attr:`config` when :attr:`flat`; none without a config."""
        if self.config is None:
            return []
        if not self.flat:
            return [Option(self.name, self.config | None, None)]
        hints = typing.get_type_hints(self.config)
        return [Option(f.name, hints[f.name], f.default,
                       None if f.default_factory is _MISSING else f.default_factory)
                for f in dataclasses.fields(self.config)]

    def upgrade(self, data: dict[str, Any], where: str) -> dict[str, Any]:
        """Rewrites older spellings of this method's keys in a stack's dict (``where``: its path)."""
        return data

    def coerce(self, stack: Any) -> None:
        """Normalises a directly constructed stack config in place (e.g. a shorthand string)."""

    def section(self, stack: Any) -> Any:
        """This method's settings in ``stack`` (None when off)."""
        return getattr(stack, self.name)

    def active(self, stack: Any) -> bool:
        """Whether the method is on in ``stack``."""
        return self.section(stack) is not None

    # ---------------------------------------------------------------- inputs and placement
    def reads(self, stack: Any) -> set[str]:
        """The syntax fields the method needs for ``stack`` (none when off)."""
        return set(self.fields_read) if self.active(stack) else set()

    def allowed(self, model: Any, side: str) -> bool:
        """Whether the method may be on in stack ``side`` of ``model`` (a model config)."""
        if "cross" in self.sides and model.has_cross_attention(side):
            return True
        return side in self.sides

    def misplaced(self, model: Any, side: str, stack: Any) -> str:
        """The error when the method is on in a stack where it cannot go."""
        goes = " and ".join({"encoder": "encoders (bidirectional self-attention)",
                             "decoder": "decoders (causal self-attention)",
                             "cross": "translation decoders' cross-attention"}[s] for s in self.sides)
        return f"{side}.{self.name} is set, but {self.name} goes into {goes} only"

    # ---------------------------------------------------------------- checks
    def validate(self, model: Any, side: str, stack: Any) -> None:
        """Raises :class:`ConfigError` for bad values of this method's settings in ``stack``."""

    def claims(self, model: Any, side: str, stack: Any) -> list[Claim]:
        """What the method takes of its layers in ``stack``: the heads it replaces or trains, etc.
        (:class:`synattn.attention.claims.Claim`, in config terms; see :func:`check_claims`)."""
        return []

    # ---------------------------------------------------------------- building
    def position(self, stack: Any) -> float:
        """Its place among a layer's features (default :attr:`order`)."""
        return self.order

    def applies(self, stack: Any, layer: int) -> bool:
        """Whether layer ``layer`` gets the method (default: the section's ``layers``, None = all)."""
        layers = getattr(self.section(stack), "layers", None)
        return layers is None or layer in layers

    def feature(self, site: Site, settings: Any) -> AttentionFeature:
        """The method's feature at ``site`` from its section ``settings`` (an instance of :attr:`config`)."""
        raise NotImplementedError(f"{type(self).__name__} builds no single feature")

    def layer_features(self, model: Any, stack: Any, site: Site, shared: dict[str, Any]
                       ) -> list[AttentionFeature]:
        """The self-attention features of one layer (``shared``: a dict kept for the stack)."""
        if "cross" in self.sides and not ({"encoder", "decoder"} & set(self.sides)):
            return []
        if not self.active(stack) or not self.applies(stack, site.layer):
            return []
        return [self.feature(site, self.section(stack))]

    def cross_features(self, model: Any, stack: Any, site: Site) -> list[AttentionFeature]:
        """The cross-attention features of one decoder layer."""
        return []


_REGISTRY: dict[str, Method] = {}


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: registers one instance of a :class:`Method` subclass under its ``name``."""
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"method {cls.name!r} is registered twice ({type(_REGISTRY[cls.name]).__name__} "
                         f"and {cls.__name__})")
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> Method:
    """Removes method ``name`` from the registry (e.g. one a test registered); returns it."""
    return _REGISTRY.pop(name)


def registered() -> list[Method]:
    """The registered methods, in registration order (without importing the built-in ones)."""
    return list(_REGISTRY.values())


def check_claims(model: Any, side: str, stack: Any, methods: list[Method]) -> None:
    """Raises :class:`ConfigError` when two methods on in stack ``side`` cannot share a layer, by
    the rule attention modules apply to their features (:func:`synattn.attention.claims.find_conflict`).

    The later-registered method is named first (``encoder.syntactic_attention (layer 1, heads
    [1, 0]) and encoder.supervised_head (layer 1, head 0) cannot share a layer: both claim head 0``).
    """
    message = find_conflict([method.claims(model, side, stack) for method in reversed(methods)
                             if method.active(stack)])
    if message:
        raise ConfigError(message)


def check_head(value: int | Sequence[int], where: str, heads: int) -> None:
    """Raises :class:`ConfigError` unless ``0 <= value < heads`` (for a list: each of its values).

    Example:
        >>> check_head([0, 5], "encoder.specialized_heads.heads", 4)
        Traceback (most recent call last):
        synattn.errors.ConfigError: encoder.specialized_heads.heads has head 5, out of range for heads=4
    """
    _check_range(value, where, "head", heads, f"heads={heads}")


def check_layer(value: int | Sequence[int], where: str, side: str, layers: int) -> None:
    """Raises :class:`ConfigError` unless ``0 <= value < layers`` (for a list: each of its values);
    ``side``: the stack, named in the message (``... out of range for encoder.layers=6``)."""
    _check_range(value, where, "layer", layers, f"{side}.layers={layers}")


def check_layers(value: Sequence[int] | None, where: str, side: str, layers: int) -> None:
    """Raises :class:`ConfigError` unless ``value`` is None or a non-empty list of distinct layer
    indices, each in range (:func:`check_layer`): the ``layers`` of a method placed in a subset of
    a stack's layers (``bird_eye.layers``, ``supervised_head.layers``, ``cross_attention_layers``;
    None: the method's default placement).

    Example:
        >>> check_layers([2, 2], "decoder.bird_eye.layers", "decoder", 3)
        Traceback (most recent call last):
        synattn.errors.ConfigError: decoder.bird_eye.layers=[2, 2] lists layer 2 twice
    """
    if value is None:
        return
    if not value:
        raise ConfigError(f"{where}=[] lists no layer; list at least one, or null for the default placement")
    twice = next((v for i, v in enumerate(value) if v in value[:i]), None)
    if twice is not None:
        raise ConfigError(f"{where}={brief(list(value))} lists layer {twice} twice")
    check_layer(value, where, side, layers)


def _check_range(value: int | Sequence[int], where: str, what: str, size: int, bound: str) -> None:
    for v in [value] if isinstance(value, int) else value:
        if not 0 <= v < size:
            raise ConfigError(f"{where}={v} is out of range for {bound}" if isinstance(value, int)
                              else f"{where} has {what} {v}, out of range for {bound}")
