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
- how it **builds** its attention features for one layer (:meth:`Method.layer_features`,
  :meth:`Method.cross_features`), and for Hugging Face models (:meth:`Method.hf_features`,
  generated from :attr:`Method.config` and :meth:`Method.feature` unless a method writes its own).

Model configs (``synattn.models.config``), the syntax request, model building
(``synattn.models.features``) and ``synattn.hf.FEATURES`` iterate :func:`methods`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

from synattn.attention.claims import Claim, find_conflict
from synattn.attention.feature import AttentionFeature
from synattn.config_io import check_fields, check_type, from_dict
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
    """One field a method adds to ``StackConfig`` (or a Hugging Face entry): name, type annotation,
    default (or factory), and the least value of a size (None: no bound)."""

    name: str
    type: Any
    default: Any = None
    factory: Callable[[], Any] | None = None
    minimum: int | None = None

    def default_value(self) -> Any:
        """A fresh default value."""
        return self.factory() if self.factory is not None else self.default


@dataclass(frozen=True)
class HFAlias:
    """An older name of a method's Hugging Face feature, still read (with a ``FutureWarning``).

    ``options``: what the old name implied (``{"relations": ["sequential"]}``); ``renames``: old
    option -> new option, or -> ``(new option, function of the old value)``.
    """

    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    renames: dict[str, str | tuple[str, Callable[[Any], Any]]] = dataclasses.field(default_factory=dict)

    def upgrade(self, spec: dict[str, Any], feature: str) -> dict[str, Any]:
        """The entry ``spec`` of the old name as an entry of ``feature``."""
        out = {"feature": feature, **self.options}
        for key, value in spec.items():
            rename = self.renames.get(key, key)
            if isinstance(rename, tuple):
                out[rename[0]] = rename[1](value)
            elif key != "feature":
                out[rename] = value
        return out


class Method:
    """One attention method: its settings, inputs, placement, checks and builders.

    Subclass it in one module of :mod:`synattn.methods`, set the class attributes, override the
    hooks you need and decorate the class with :func:`register`. The defaults fit a method with one
    nested section ``name: config | None`` (off when null) and one feature per layer built by
    :meth:`feature`.

    Class attributes:
        name: the method's key in a stack config (and its Hugging Face feature name).
        config: the dataclass of its settings, the one place its options are declared (names,
            types, defaults); None: the method writes its own :meth:`options`.
        flat: the fields of :attr:`config` are keys of the stack itself (``relations: [...]``,
            ``max_distance: 8``) instead of one section ``name: config | None``.
        sides: where it may go (:data:`SIDES`).
        order: its place among a layer's features (0 first; see ``synattn.models.features``).
        fields_read: the syntax fields it reads when on.
        reads_hidden: its feature reads the attention's input hidden states (Hugging Face sites
            then capture them; see :meth:`hf_reads_hidden`).
        hf_sides: the sides it may go into in a Hugging Face model (None: :attr:`sides`).
        hf_layer_keys: the settings that a Hugging Face entry's ``layers`` replaces.
        hf_extras: options of a Hugging Face entry besides the settings (``num_labels``, ...).
        hf_fixed: settings every Hugging Face entry has (``constituent: true``), not options.
        hf_aliases: older Hugging Face feature names of the method (:class:`HFAlias`).
    """

    name: ClassVar[str]
    config: ClassVar[type | None] = None
    flat: ClassVar[bool] = False
    sides: ClassVar[tuple[str, ...]] = ("encoder", "decoder")
    order: ClassVar[float] = 50.0
    fields_read: ClassVar[frozenset[str]] = frozenset()
    reads_hidden: ClassVar[bool] = False
    hf_sides: ClassVar[tuple[str, ...] | None] = None
    hf_layer_keys: ClassVar[tuple[str, ...]] = ("layer", "layers")
    hf_extras: ClassVar[tuple[Option, ...]] = ()
    hf_fixed: ClassVar[dict[str, Any]] = {}
    hf_aliases: ClassVar[dict[str, HFAlias]] = {}

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

    # ---------------------------------------------------------------- Hugging Face models
    def hf_options(self) -> list[Option]:
        """The options of a Hugging Face entry (``synattn.hf.features``): the fields of
        :attr:`config` but :attr:`hf_layer_keys`, then :attr:`hf_extras`."""
        if self.config is None:
            return list(self.hf_extras)
        hints = typing.get_type_hints(self.config)
        skip = set(self.hf_layer_keys) | set(self.hf_fixed)
        return [Option(f.name, hints[f.name], f.default, None if f.default_factory is _MISSING else f.default_factory)
                for f in dataclasses.fields(self.config) if f.name not in skip] + list(self.hf_extras)

    def hf_stack(self, settings: Any, layers: int) -> Any:
        """A stand-in stack of ``layers`` layers with this method's ``settings`` (an instance of
        :attr:`config`), for :meth:`active`, :meth:`reads` and :meth:`validate`."""
        if self.flat:
            return SimpleNamespace(layers=layers, **{f.name: getattr(settings, f.name)
                                                     for f in dataclasses.fields(settings)})
        return SimpleNamespace(layers=layers, **{self.name: settings})

    def hf_reads_hidden(self, settings: Any) -> bool:
        """Whether the feature built from ``settings`` reads the hidden states (default :attr:`reads_hidden`)."""
        return self.reads_hidden

    def hf_build(self, site: Site, settings: Any, extras: dict[str, Any], shared: dict[str, Any]
                 ) -> list[AttentionFeature]:
        """The features of one Hugging Face attention (default: :meth:`feature`); ``extras``: the
        values of :attr:`hf_extras`; ``shared``: a dict kept while one model and side are built."""
        return [self.feature(site, settings)]

    def hf_features(self) -> dict[str, HFFeature]:
        """Its entry of ``synattn.hf.FEATURES``: one, named :attr:`name` (none without a config)."""
        return {} if self.config is None else {self.name: HFFeature(self)}


@dataclass(frozen=True)
class HFFeature:
    """A method inside Hugging Face models (``synattn.hf.FEATURES`` holds one per method).

    An entry's options are the method's own (:meth:`Method.hf_options`: the fields of its settings
    dataclass, with their defaults, and its :attr:`Method.hf_extras`): :meth:`settings` checks them
    against the dataclass's types, :meth:`check` with the method's own :meth:`Method.validate`, and
    :meth:`build` builds them with :meth:`Method.hf_build`. Errors are :class:`ConfigError` naming
    the option (``supervised_head.head=7 is out of range for heads=4``).
    """

    method: Method

    @property
    def sides(self) -> tuple[str, ...]:
        """The sides an entry may go into."""
        return self.method.hf_sides or self.method.sides

    @property
    def defaults(self) -> dict[str, Any]:
        """The options of an entry and their defaults."""
        return {o.name: o.default_value() for o in self.method.hf_options()}

    def settings(self, options: dict[str, Any], layer: int = 0) -> Any:
        """The method's settings (an instance of ``Method.config``) from an entry's ``options``, for
        layer ``layer``; checks the types of the settings and the extras."""
        method = self.method
        assert method.config is not None  # (an HF feature is a method with settings)
        hints = typing.get_type_hints(method.config)
        data = {k: v for k, v in options.items() if k in hints}
        for key in set(method.hf_layer_keys) & set(hints):
            data[key] = layer if hints[key] is int else None
        settings: Any = from_dict(method.config, {**data, **method.hf_fixed})
        check_fields(settings)
        for option in method.hf_extras:
            value = options.get(option.name, option.default_value())
            check_type(option.type, value, option.name)
            if option.minimum is not None and value is not None and value < option.minimum:
                raise ConfigError(f"{option.name}={brief(value)} must be >= {option.minimum}")
        return settings

    def check(self, options: dict[str, Any], side: str, heads: int, layers: int, layer: int) -> None:
        """Raises :class:`ConfigError` when the entry's ``options`` are wrong at layer ``layer`` of a
        side with ``layers`` layers of ``heads`` heads: types, then the method's own validate."""
        stack = self.method.hf_stack(self.settings(options, layer), layers)
        if not self.method.active(stack):
            first = self.method.hf_options()[0].name
            raise ConfigError(f"{first}={brief(options.get(first))} leaves {self.method.name} off; "
                              f"set {first}")
        model = SimpleNamespace(heads=heads, num_pos_tags=1, num_deprels=1, model_type="Hugging Face model",
                                has_cross_attention=lambda s: s == "cross")
        self.method.validate(model, side, stack)

    def build(self, site: Site, options: dict[str, Any], shared: dict[str, Any]) -> list[AttentionFeature]:
        """The features of the entry at ``site`` (``shared``: a dict kept for one model and side)."""
        extras = {o.name: options.get(o.name, o.default_value()) for o in self.method.hf_extras}
        return self.method.hf_build(site, self.settings(options, site.layer), extras, shared)

    def reads(self, options: dict[str, Any]) -> frozenset[str]:
        """The syntax fields an entry with these options reads from a batch."""
        return frozenset(self.method.reads(self.method.hf_stack(self.settings(options), 1)))

    def reads_hidden(self, options: dict[str, Any]) -> bool:
        """Whether the entry's features read the attention's input hidden states."""
        return self.method.hf_reads_hidden(self.settings(options))


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
