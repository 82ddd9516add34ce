"""Model configs: one dataclass per model, validated when constructed.

A config names, per encoder/decoder stack, which attention features are on (docs/methods.md §1–§5)::

    encoder:
      layers: 6
      relations: [tree_distance, sequential]   # Shaw / tree labels, summed key+value embeddings
      specialized_heads: {source: pos, heads: [0]}   # encoder layer 0 only
      supervised_head: {layer: 3, head: 0, weight: 1.0}
      constituent: true                        # Tree Transformer, every layer (encoders only)
      syntactic_attention: {layer: 1, head: 0, tree: projective, multiroot: false}
    decoder:
      bird_eye: {variant: sg, pointer_weight: 1.0}   # BET(SG) pointer loss (sg) or BET(SF) (sf)
      cross_attention: segmentation            # or sigmoid (translation decoders only)

Constructing a config checks the type of every field (recursively) and the compatibility of the
features; errors are :class:`synattn.errors.ConfigError` (a ``ValueError``) naming both sides
(``encoder.supervised_head.layer=6 is out of range for encoder.layers=6``). ``from_yaml`` adds the
file to the message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from synattn.config_bounds import at_most
from synattn.config_io import StrictConfig
from synattn.errors import ConfigError
from synattn.limits import check_memory
from synattn.methods import methods
from synattn.methods.bird_eye import BIRD_EYE, BirdEyeConfig
from synattn.methods.constituent import CONSTITUENT_DIAGONAL
from synattn.methods.cross_attention import CROSS_ATTENTION, MAX_SEGMENT
from synattn.methods.relations import MAX_RELATIVE_POSITION, RELATIONS
from synattn.methods.specialized import SpecializedHeadsConfig
from synattn.methods.supervised import SupervisedHeadConfig
from synattn.methods.syntactic import SyntacticAttentionConfig
from synattn.methods.tree_distance_bias import TreeDistanceBiasConfig
from synattn.models.config_checks import StackChecks
from synattn.trees.relations import MAX_DISTANCE, MAX_TRAVERSAL

__all__ = ["BIRD_EYE", "CROSS_ATTENTION", "RELATIONS", "BirdEyeConfig", "EncoderDecoderConfig",
           "LanguageModelConfig", "MaskedLMConfig", "ModelConfig", "SpecializedHeadsConfig", "StackConfig",
           "SupervisedHeadConfig", "SyntacticAttentionConfig"]


@dataclass
class StackConfig:
    """The layers of an encoder or decoder and their attention features.

    The fields after ``layers`` are the settings of the registered methods (``synattn.methods``), in
    their order; each method declares them once, in its settings dataclass (``Method.config``):
    a method with a section adds ``name: config | None = None`` (null: off), a flat one the fields
    of its dataclass. They are written out here, statically, so that type checkers and readers see
    them; :func:`undeclared` compares them with the registry when this module is imported (a method
    added to ``synattn/methods/`` without its line here is refused, naming the line to add) and
    ``tests/methods/test_registry.py`` checks that names, types and defaults are the registry's.

    Attributes:
        layers: number of layers.
        relations, relation_layers, max_relative_position, max_distance, max_traversal,
            relative_values: relative attention (:class:`~synattn.methods.relations.RelationsConfig`,
            docs/methods.md §1).
        specialized_heads: specialized heads in layer 0 (encoder only).
        supervised_head: the dependency-supervised head (one ``layer``, or several ``layers``).
        constituent, constituent_diagonal: Tree Transformer constituent attention
            (:class:`~synattn.methods.constituent.ConstituentConfig`, docs/methods.md §3; encoders only).
        bird_eye: Bird-Eye attention (:class:`BirdEyeConfig`, docs/methods.md §4; causal stacks
            only): ``variant`` ``sg`` (BET(SG): pointer loss toward the syntax hints on every
            block, weight ``pointer_weight``, on head ``pointer_head`` or the head average) or
            ``sf`` (BET(SF): diagonal-free reweighted attention in every block); ``layers``: only
            those blocks. The string ``sg``/``sf`` is short for ``{variant: …}``.
        cross_attention, cross_attention_normalize, cross_attention_max_segment,
            cross_attention_layers: structured encoder-decoder attention
            (:class:`~synattn.methods.cross_attention.CrossAttentionConfig`, docs/methods.md §5;
            translation decoders only).
        syntactic_attention: one encoder layer's structured syntactic attention head(s).
        tree_distance_bias: ALiBi-style slopes times the tree distance.
    """

    layers: int = 6
    # relations (synattn/methods/relations.py)
    relations: list[str] = field(default_factory=list)
    relation_layers: list[int] | None = None
    max_relative_position: int = MAX_RELATIVE_POSITION
    max_distance: int = MAX_DISTANCE
    max_traversal: int = MAX_TRAVERSAL
    relative_values: bool = True
    specialized_heads: SpecializedHeadsConfig | None = None
    supervised_head: SupervisedHeadConfig | None = None
    # constituent (synattn/methods/constituent.py)
    constituent: bool = False
    constituent_diagonal: float = CONSTITUENT_DIAGONAL
    bird_eye: BirdEyeConfig | None = None
    # cross_attention (synattn/methods/cross_attention.py)
    cross_attention: str | None = None
    cross_attention_normalize: bool = False
    cross_attention_max_segment: int = MAX_SEGMENT
    cross_attention_layers: list[int] | None = None
    syntactic_attention: SyntacticAttentionConfig | None = None
    tree_distance_bias: TreeDistanceBiasConfig | None = None

    def __post_init__(self) -> None:
        for m in methods():
            m.coerce(self)

    @classmethod
    def upgrade(cls, data: dict, prefix: str = "") -> dict:
        """Rewrites older spellings of the methods' keys (``bird_eye: sg``, flat ``pointer_weight``)."""
        data = dict(data)
        for m in methods():
            data = m.upgrade(data, prefix)
        return data


def undeclared() -> list[str]:
    """The registered methods' options that :class:`StackConfig` does not declare, as the lines to add."""
    declared = {f.name for f in dataclasses.fields(StackConfig)}
    return [f"{o.name}: {getattr(o.type, '__name__', o.type)} = {o.default_value()!r}  # {type(m).__name__}"
            for m in methods() for o in m.options() if o.name not in declared]


if undeclared():
    raise TypeError(f"synattn/models/config.py: StackConfig lacks the settings of a registered method; add "
                    f"{'; '.join(undeclared())} (docs/adding_a_method.md)")


@dataclass(kw_only=True)
class ModelConfig(StackChecks, StrictConfig):
    """Settings shared by every model (Vaswani et al. 2017 defaults).

    Attributes:
        d_model, heads, ffn_dim: widths and number of heads (d_model divisible by heads).
        dropout: residual and embedding dropout; attention_dropout: on attention probabilities;
            activation_dropout: inside the feed-forward block.
        activation: ``relu`` or ``gelu``.
        norm: ``post`` (LayerNorm after each residual, the original) or ``pre`` (before each
            sublayer, with a final LayerNorm).
        absolute_positions: add sinusoidal position encodings to the embeddings.
        tie_output: the output projection shares the (target) embedding matrix.
        pad_id, bos_id, eos_id: special token ids (defaults: those of the sentencepiece models
            synattn trains, ``synattn.data.subwords``: 0 <pad>, 1 <unk>, 2 <s>, 3 </s>).
        num_pos_tags, num_deprels: label vocabulary sizes for specialized heads (0: none).
        src_bos: the encoder reads ``<s> x`` instead of ``x </s>``: as the Tree Transformer's
            public code frames its input (``[CLS] w1 … wn``), where the first word has a neighbour
            on its left and the last none (docs/methods.md §3). Models with an encoder only.
    """

    model_type: ClassVar[str] = ""

    d_model: int = 512
    heads: int = 8
    ffn_dim: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "post"
    absolute_positions: bool = True
    tie_output: bool = True
    pad_id: int = 0
    bos_id: int = 2
    eos_id: int = 3
    num_pos_tags: int = 0
    num_deprels: int = 0
    src_bos: bool = False

    def stacks(self) -> dict[str, StackConfig]:
        """The model's stacks by name (``encoder`` / ``decoder``)."""
        return {}

    def min_parameters(self) -> int:
        """A lower bound of the model's parameter count: its embeddings (``vocabulary x
        d_model``) and, per layer, the self-attention and feed-forward weights
        (``4 d_model² + 2 d_model ffn_dim``) and Shaw's relative position embeddings
        (``(2 max_relative_position + 1) x head_dim``, once), without biases, norms or other
        features."""
        d = self.d_model
        vocab = sum(getattr(self, name) for name in self.size_fields())
        layers = sum(stack.layers for stack in self.stacks().values())
        shaw = sum(2 * stack.max_relative_position + 1 for stack in self.stacks().values()
                   if "sequential" in stack.relations)
        return vocab * d + layers * (4 * d * d + 2 * d * self.ffn_dim) + shaw * (d // self.heads)

    def _check_memory(self) -> None:
        """Refuse sizes whose float32 weights alone exceed the machine's memory (naming them)."""
        sizes = {name: getattr(self, name) for name in ("d_model", "ffn_dim", *self.size_fields())}
        for side, stack in self.stacks().items():
            sizes[f"{side}.layers"] = stack.layers
            if "sequential" in stack.relations:
                sizes[f"{side}.max_relative_position"] = stack.max_relative_position
        worst = max(sizes, key=lambda name: sizes[name])  # (the option that is far too large)
        others = ", ".join(f"{name}={value}" for name, value in sizes.items() if name != worst)
        check_memory(worst, sizes[worst], 4 * self.min_parameters(),
                     f"the model's float32 weights (at least {self.min_parameters():.3g} parameters "
                     f"with {others})")

    def size_fields(self) -> tuple[str, ...]:
        """The names of the vocabulary-size fields."""
        return ()

    def special_fields(self) -> tuple[str, ...]:
        """Token-id fields besides pad/bos/eos (checked against every vocabulary)."""
        return ()

    def has_cross_attention(self, side: str) -> bool:
        """Whether the layers of stack ``side`` attend to an encoder memory."""
        return False

    def check(self) -> None:
        """Checks ranges and feature compatibility; raises :class:`ConfigError` naming both sides."""
        for name in ("d_model", "heads", "ffn_dim", *self.size_fields()):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least 1")
        for name in ("num_pos_tags", "num_deprels"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must not be negative")
            at_most(name, getattr(self, name), 100_000, "a label vocabulary")
        for name in ("pad_id", "bos_id", "eos_id", *self.special_fields()):
            value = getattr(self, name)
            for size_name in self.size_fields():
                if not 0 <= value < getattr(self, size_name):
                    raise ConfigError(f"{name}={value} is out of range for {size_name}={getattr(self, size_name)}")
        if self.d_model % self.heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name}={getattr(self, name)} must be in [0, 1)")
        if self.activation not in ("relu", "gelu"):
            raise ConfigError(f"activation={self.activation!r}: use 'relu' or 'gelu'")
        if self.norm not in ("pre", "post"):
            raise ConfigError(f"norm={self.norm!r}: use 'pre' or 'post'")
        for side, stack in self.stacks().items():
            self._validate_stack(side, stack)
        self._check_memory()
        if self.src_bos and "encoder" not in self.stacks():
            raise ConfigError("src_bos=true frames an encoder's input, but this model has no encoder")


@dataclass(kw_only=True)
class EncoderDecoderConfig(ModelConfig):
    """Encoder-decoder Transformer for translation.

    Attributes:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        share_embeddings: source and target share one embedding matrix (joint vocabulary).
        encoder, decoder: the two stacks.
    """

    model_type: ClassVar[str] = "encoder_decoder"

    src_vocab_size: int
    tgt_vocab_size: int
    share_embeddings: bool = False
    encoder: StackConfig = field(default_factory=StackConfig)
    decoder: StackConfig = field(default_factory=StackConfig)

    def stacks(self) -> dict[str, StackConfig]:
        return {"encoder": self.encoder, "decoder": self.decoder}

    def size_fields(self) -> tuple[str, ...]:
        return ("src_vocab_size", "tgt_vocab_size")

    def has_cross_attention(self, side: str) -> bool:
        return side == "decoder"

    def check(self) -> None:
        super().check()
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(f"share_embeddings=true needs src_vocab_size == tgt_vocab_size, got "
                             f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}")


@dataclass(kw_only=True)
class LanguageModelConfig(ModelConfig):
    """Decoder-only (causal) language model."""

    model_type: ClassVar[str] = "language_model"

    vocab_size: int
    decoder: StackConfig = field(default_factory=StackConfig)

    def stacks(self) -> dict[str, StackConfig]:
        return {"decoder": self.decoder}

    def size_fields(self) -> tuple[str, ...]:
        return ("vocab_size",)


@dataclass(kw_only=True)
class MaskedLMConfig(ModelConfig):
    """Encoder-only masked language model.

    Attributes:
        mask_id: id of the mask token (default 4: ``<mask>`` in synattn's sentencepiece models).
    """

    model_type: ClassVar[str] = "masked_lm"

    vocab_size: int
    mask_id: int = 4
    encoder: StackConfig = field(default_factory=StackConfig)

    def stacks(self) -> dict[str, StackConfig]:
        return {"encoder": self.encoder}

    def size_fields(self) -> tuple[str, ...]:
        return ("vocab_size",)

    def special_fields(self) -> tuple[str, ...]:
        return ("mask_id",)
