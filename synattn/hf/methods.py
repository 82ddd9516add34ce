"""What each method needs inside a Hugging Face model besides its spec: one adapter per method.

A method's spec (:mod:`synattn.methods`) says what a native model needs. An entry of
``synattn.hf`` (``{"feature": "supervised_head", "side": "encoder", "layers": [2], "head": 0}``)
is built from the same spec, through the method's :class:`HFAdapter`: the entry's options are the
fields of the method's settings less those the entry's ``layers`` replaces (:attr:`HFAdapter.layer_keys`),
plus options only a Hugging Face model needs (:attr:`HFAdapter.extras`: the ``num_labels`` of
specialized heads, the ``name`` of a loss), checked by the spec's own ``validate`` and built by
:meth:`HFAdapter.build` (default: the spec's ``feature``). A method without an adapter of its own
gets :class:`HFAdapter` itself, so a new method needs nothing here (``tree_distance_bias`` has
none). :func:`adapter` gives a method's adapter; :func:`adapts` registers one, by method name.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

from synattn.attention.feature import AttentionFeature
from synattn.methods import Method, Option, Site
from synattn.methods.bird_eye import BirdEyeConfig, BirdEyeReweighting, SyntaxGuidedPointer
from synattn.methods.constituent import ConstituentAttention, ConstituentConfig
from synattn.methods.cross_attention import cross_attention_features
from synattn.methods.relations import FIELDS, RelationsConfig, RelativePositions, TreeRelations, relation_labels
from synattn.methods.specialized import SpecializedHeads, SpecializedHeadsConfig
from synattn.methods.supervised import SupervisedHead, SupervisedHeadConfig


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


class HFAdapter:
    """A method inside Hugging Face models; the defaults fit a method whose feature needs nothing
    but its settings.

    Class attributes:
        sides: the sides an entry may go into (None: the method's own ``sides``).
        layer_keys: the settings that an entry's ``layers`` replaces.
        extras: options of an entry besides the settings.
        fixed: settings every entry has (``constituent: true``), not options.
        aliases: older feature names of the method (:class:`HFAlias`).
    """

    sides: ClassVar[tuple[str, ...] | None] = None
    layer_keys: ClassVar[tuple[str, ...]] = ("layer", "layers")
    extras: ClassVar[tuple[Option, ...]] = ()
    fixed: ClassVar[dict[str, Any]] = {}
    aliases: ClassVar[dict[str, HFAlias]] = {}

    def __init__(self, method: Method):
        self.method = method

    def options(self) -> list[Option]:
        """The options of an entry: the fields of the method's settings but :attr:`layer_keys` and
        :attr:`fixed`, then :attr:`extras`."""
        config = self.method.config
        if config is None:
            return list(self.extras)
        hints = typing.get_type_hints(config)
        skip = set(self.layer_keys) | set(self.fixed)
        return [Option(f.name, hints[f.name], f.default,
                       None if f.default_factory is dataclasses.MISSING else f.default_factory)
                for f in dataclasses.fields(config) if f.name not in skip] + list(self.extras)

    def stack(self, settings: Any, layers: int) -> Any:
        """A stand-in stack of ``layers`` layers with the method's ``settings``, for the spec's
        ``active``, ``reads`` and ``validate``."""
        if self.method.flat:
            return SimpleNamespace(layers=layers, **{f.name: getattr(settings, f.name)
                                                     for f in dataclasses.fields(settings)})
        return SimpleNamespace(layers=layers, **{self.method.name: settings})

    def build(self, site: Site, settings: Any, extras: dict[str, Any], shared: dict[str, Any]
              ) -> list[AttentionFeature]:
        """The features of one attention (default: the spec's ``feature``); ``extras``: the values
        of :attr:`extras`; ``shared``: a dict kept while one model and side are built."""
        return [self.method.feature(site, settings)]


_ADAPTERS: dict[str, type[HFAdapter]] = {}


def adapts(name: str) -> Callable[[type[HFAdapter]], type[HFAdapter]]:
    """Class decorator: ``cls`` is the adapter of method ``name``."""
    def register(cls: type[HFAdapter]) -> type[HFAdapter]:
        _ADAPTERS[name] = cls
        return cls
    return register


def adapter(method: Method) -> HFAdapter:
    """The adapter of ``method`` (:class:`HFAdapter` when it has none of its own)."""
    return _ADAPTERS.get(method.name, HFAdapter)(method)


@adapts("relations")
class RelationsHF(HFAdapter):
    layer_keys = ("relation_layers",)
    aliases: ClassVar[dict[str, HFAlias]] = {
        "tree_relations": HFAlias({"relations": ["tree_distance"]}, {
            "field": ("relations", lambda field: [{"tree_dist": "tree_distance"}.get(field, field)]),
            "values": "relative_values"}),
        "relative_positions": HFAlias({"relations": ["sequential"]}, {"max_relative": "max_relative_position",
                                                                      "values": "relative_values"})}

    def build(self, site: Site, settings: RelationsConfig, extras: dict[str, Any], shared: dict[str, Any]
              ) -> list[AttentionFeature]:
        # the tree labels get one more, "outside" label: special tokens (synattn.hf.align)
        features: list[AttentionFeature] = []
        for relation in settings.relations:
            if relation == "sequential":
                features.append(RelativePositions(settings.max_relative_position, site.head_dim,
                                                  values=settings.relative_values))
            else:
                labels = relation_labels(FIELDS[relation], settings.max_distance, settings.max_traversal)
                features.append(TreeRelations(FIELDS[relation], labels, site.head_dim,
                                              values=settings.relative_values))
        return features


@adapts("specialized_heads")
class SpecializedHeadsHF(HFAdapter):
    sides = ("encoder", "decoder")  # any layer of a Hugging Face model
    extras = (Option("num_labels", int | None, None, minimum=1),)  # the label vocabulary's size

    def build(self, site: Site, settings: SpecializedHeadsConfig, extras: dict[str, Any],
              shared: dict[str, Any]) -> list[AttentionFeature]:
        if extras["num_labels"] is None:
            raise ValueError("specialized_heads needs 'num_labels' (the size of the POS or deprel "
                             "vocabulary of synattn.hf.SyntaxEncoder)")
        return [SpecializedHeads(extras["num_labels"], site.head_dim, settings.heads, settings.source,
                                 settings.label_dim)]


@adapts("supervised_head")
class SupervisedHeadHF(HFAdapter):
    extras = (Option("name", str, "parse"),)  # the name of its loss

    def build(self, site: Site, settings: SupervisedHeadConfig, extras: dict[str, Any],
              shared: dict[str, Any]) -> list[AttentionFeature]:
        return [SupervisedHead(site.head_dim, settings.head, settings.weight, extras["name"])]


@adapts("constituent")
class ConstituentHF(HFAdapter):
    fixed: ClassVar[dict[str, Any]] = {"constituent": True}  # an entry turns it on

    def build(self, site: Site, settings: ConstituentConfig, extras: dict[str, Any],
              shared: dict[str, Any]) -> list[AttentionFeature]:
        # the chosen layers are numbered 0, 1, ... in the order they are built (bottom first); their
        # a-values travel in each forward's carry
        index = shared["constituent_layers"] = shared.get("constituent_layers", -1) + 1
        return [ConstituentAttention(site.d_model, index, diagonal=settings.constituent_diagonal)]


@adapts("bird_eye")
class BirdEyeHF(HFAdapter):
    # the name of the BET(SG) loss, the width of BET(SF)'s scorer (None: d_model)
    extras = (Option("name", str, "pointer"), Option("hidden", int | None, None, minimum=1))
    aliases: ClassVar[dict[str, HFAlias]] = {
        "pointer": HFAlias({"variant": "sg"}, {"weight": "pointer_weight", "head": "pointer_head"}),
        "bird_eye_reweighting": HFAlias({"variant": "sf"})}

    def build(self, site: Site, settings: BirdEyeConfig, extras: dict[str, Any],
              shared: dict[str, Any]) -> list[AttentionFeature]:
        if settings.variant == "sf":
            return [BirdEyeReweighting(site.d_model, site.heads, extras["hidden"])]
        return [SyntaxGuidedPointer(settings.pointer_weight, settings.pointer_head, extras["name"])]


@adapts("cross_attention")
class CrossAttentionHF(HFAdapter):
    layer_keys = ("cross_attention_layers",)
    aliases: ClassVar[dict[str, HFAlias]] = {
        "segmentation": HFAlias({"cross_attention": "segmentation"}, {
            "mode": ("cross_attention", lambda mode: {"structured": "segmentation"}.get(mode, mode)),
            "normalize": "cross_attention_normalize"}),
        "span_segmentation": HFAlias({"cross_attention": "segments"}, {"max_segment": "cross_attention_max_segment"})}

    def build(self, site: Site, settings: Any, extras: dict[str, Any], shared: dict[str, Any]
              ) -> list[AttentionFeature]:
        return cross_attention_features(site, settings)


@adapts("syntactic_attention")
class SyntacticAttentionHF(HFAdapter):
    aliases: ClassVar[dict[str, HFAlias]] = {"syntactic": HFAlias()}
