"""Model configs: one dataclass per model, validated when constructed.

A config names, per encoder/decoder stack, which attention features are on (METHODS §1–§2)::

    encoder:
      layers: 6
      relations: [tree_distance, sequential]   # Shaw / tree labels, summed key+value embeddings
      specialized_heads: {source: pos, heads: [0]}   # encoder layer 0 only
      supervised_head: {layer: 3, head: 0, weight: 1.0}

Constructing a config checks the type of every field (recursively) and the compatibility of the
features; errors are ``ValueError`` naming both sides (``encoder.supervised_head.layer=6 is out
of range for encoder.layers=6``). ``from_yaml`` wraps them in ``InputError`` naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from synattn.models.config_io import check_fields, from_dict, load_yaml, save_yaml, to_dict

RELATIONS = ("sequential", "tree_distance", "traversal")
"""Relation kinds of relative attention: Shaw positions, tree distance, tree traversal."""

C = TypeVar("C", bound="ModelConfig")


@dataclass
class SpecializedHeadsConfig:
    """Specialized heads of encoder layer 0 (seed 000): query/key from label embeddings.

    Attributes:
        source: ``"pos"`` (POS tags) or ``"deprel"`` (dependency labels).
        heads: indices of the specialized heads.
        label_dim: width of the label embedding (None: d_k).
    """

    source: str = "pos"
    heads: list[int] = field(default_factory=lambda: [0])
    label_dim: int | None = None


@dataclass
class SupervisedHeadConfig:
    """The dependency-supervised head of one layer (seed 001; METHODS §2).

    Attributes:
        layer: 0-based layer index (default: the 4th layer).
        head: head index.
        weight: λ, weight of its parse loss.
    """

    layer: int = 3
    head: int = 0
    weight: float = 1.0


@dataclass
class StackConfig:
    """The layers of an encoder or decoder and their attention features.

    Attributes:
        layers: number of layers.
        relations: relative-attention relations of the self-attention, any of ``sequential``
            (Shaw), ``tree_distance``, ``traversal``; several are summed.
        relation_layers: the layers that get the relations (None: every layer).
        max_relative_position: Shaw's clipping distance k.
        max_distance: largest tree distance with its own label.
        max_traversal: longest traversal path with its own label.
        relative_values: also learn value embeddings a^V.
        specialized_heads: specialized heads in layer 0 (encoder only).
        supervised_head: the dependency-supervised head.
    """

    layers: int = 6
    relations: list[str] = field(default_factory=list)
    relation_layers: list[int] | None = None
    max_relative_position: int = 16
    max_distance: int = 8
    max_traversal: int = 4
    relative_values: bool = True
    specialized_heads: SpecializedHeadsConfig | None = None
    supervised_head: SupervisedHeadConfig | None = None


@dataclass(kw_only=True)
class ModelConfig:
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

    def __post_init__(self) -> None:
        self.validate()

    def stacks(self) -> dict[str, StackConfig]:
        """The model's stacks by name (``encoder`` / ``decoder``)."""
        return {}

    def validate(self) -> None:
        """Checks types and feature compatibility; raises ``ValueError`` naming both sides."""
        check_fields(self)
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1)")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation={self.activation!r}: use 'relu' or 'gelu'")
        if self.norm not in ("pre", "post"):
            raise ValueError(f"norm={self.norm!r}: use 'pre' or 'post'")
        for side, stack in self.stacks().items():
            self._validate_stack(side, stack)

    def _validate_stack(self, side: str, stack: StackConfig) -> None:
        if stack.layers < 1:
            raise ValueError(f"{side}.layers={stack.layers} must be at least 1")
        for relation in stack.relations:
            if relation not in RELATIONS:
                raise ValueError(f"{side}.relations: unknown relation {relation!r}; known: {', '.join(RELATIONS)}")
        if len(set(stack.relations)) != len(stack.relations):
            raise ValueError(f"{side}.relations={stack.relations} lists a relation twice")
        if stack.relation_layers is not None:
            if not stack.relations:
                raise ValueError(f"{side}.relation_layers is set but {side}.relations is empty")
            for layer in stack.relation_layers:
                if not 0 <= layer < stack.layers:
                    raise ValueError(f"{side}.relation_layers has layer {layer}, out of range for "
                                     f"{side}.layers={stack.layers}")
        for name in ("max_relative_position", "max_distance", "max_traversal"):
            if getattr(stack, name) < 1:
                raise ValueError(f"{side}.{name}={getattr(stack, name)} must be at least 1")
        sup, spec = stack.supervised_head, stack.specialized_heads
        if sup is not None:
            if not 0 <= sup.layer < stack.layers:
                raise ValueError(f"{side}.supervised_head.layer={sup.layer} is out of range for "
                                 f"{side}.layers={stack.layers}")
            if not 0 <= sup.head < self.heads:
                raise ValueError(f"{side}.supervised_head.head={sup.head} is out of range for heads={self.heads}")
        if spec is not None:
            self._validate_specialized(side, spec, sup)

    def _validate_specialized(self, side: str, spec: SpecializedHeadsConfig,
                              sup: SupervisedHeadConfig | None) -> None:
        if side != "encoder":
            raise ValueError(f"{side}.specialized_heads is set, but specialized heads exist only "
                             f"in encoder layer 0")
        sizes = {"pos": ("num_pos_tags", self.num_pos_tags), "deprel": ("num_deprels", self.num_deprels)}
        if spec.source not in sizes:
            raise ValueError(f"{side}.specialized_heads.source={spec.source!r}: use 'pos' or 'deprel'")
        size_name, size = sizes[spec.source]
        if size < 1:
            raise ValueError(f"{side}.specialized_heads.source={spec.source!r} needs {size_name} > 0, "
                             f"got {size_name}={size}")
        if not spec.heads or len(set(spec.heads)) != len(spec.heads):
            raise ValueError(f"{side}.specialized_heads.heads={spec.heads} must be distinct and non-empty")
        for head in spec.heads:
            if not 0 <= head < self.heads:
                raise ValueError(f"{side}.specialized_heads.heads has head {head}, out of range for "
                                 f"heads={self.heads}")
        if sup is not None and sup.layer == 0 and sup.head in spec.heads:
            raise ValueError(f"{side}.supervised_head (layer 0, head {sup.head}) and "
                             f"{side}.specialized_heads (layer 0, heads {spec.heads}) claim the same head")

    @classmethod
    def from_dict(cls: type[C], data: dict) -> C:
        """Builds the config from a dict; unknown keys and wrong types are ``ValueError``."""
        return from_dict(cls, data)

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_yaml(cls: type[C], path: str | Path) -> C:
        """Reads the config from a YAML file (errors are ``InputError`` naming the file)."""
        return load_yaml(cls, path)

    def to_yaml(self, path: str | Path) -> None:
        save_yaml(self, path)


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

    def validate(self) -> None:
        super().validate()
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(f"share_embeddings=true needs src_vocab_size == tgt_vocab_size, got "
                             f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}")


@dataclass(kw_only=True)
class LanguageModelConfig(ModelConfig):
    """Decoder-only (causal) language model."""

    model_type: ClassVar[str] = "language_model"

    vocab_size: int
    decoder: StackConfig = field(default_factory=StackConfig)

    def stacks(self) -> dict[str, StackConfig]:
        return {"decoder": self.decoder}


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
