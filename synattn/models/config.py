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
      bird_eye: sg                             # BET(SG) pointer loss (sg) or BET(SF) (sf)
      pointer_weight: 1.0
      cross_attention: segmentation            # or sigmoid (translation decoders only)

Constructing a config checks the type of every field (recursively) and the compatibility of the
features; errors are :class:`synattn.errors.ConfigError` (a ``ValueError``) naming both sides
(``encoder.supervised_head.layer=6 is out of range for encoder.layers=6``). ``from_yaml`` adds the
file to the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from synattn.errors import ConfigError
from synattn.models.config_checks import BIRD_EYE, CROSS_ATTENTION, RELATIONS, StackChecks
from synattn.models.config_io import check_fields, from_dict, load_yaml, save_yaml, to_dict

__all__ = ["BIRD_EYE", "CROSS_ATTENTION", "RELATIONS", "EncoderDecoderConfig", "LanguageModelConfig",
           "MaskedLMConfig", "ModelConfig", "SpecializedHeadsConfig", "StackConfig", "SupervisedHeadConfig",
           "SyntacticAttentionConfig"]

C = TypeVar("C", bound="ModelConfig")


@dataclass
class SpecializedHeadsConfig:
    """Specialized heads of encoder layer 0 (docs/methods.md §1): query/key from label embeddings.

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
    """The dependency-supervised head of one layer (Deguchi et al. 2019; docs/methods.md §2).

    Attributes:
        layer: 0-based layer index (default: the 4th layer).
        head: head index.
        weight: λ, weight of its parse loss.
    """

    layer: int = 3
    head: int = 0
    weight: float = 1.0


@dataclass
class SyntacticAttentionConfig:
    """Structured syntactic attention in one encoder layer (Kim et al. 2017; docs/methods.md §5).

    Attributes:
        layer: 0-based layer index.
        head: the head that attends to each position's soft parent.
        children_head: a head that attends to the soft children (None: none).
        tree: ``projective`` (Eisner inside-outside) or ``nonprojective`` (Matrix-Tree).
        multiroot: allow several words under ROOT.
        arc_dim: width of the arc scorer's head/dependent projections.
    """

    layer: int = 0
    head: int = 0
    children_head: int | None = None
    tree: str = "projective"
    multiroot: bool = False
    arc_dim: int = 64


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
        constituent: Tree Transformer constituent attention in every layer (docs/methods.md §3;
            encoders only, one a-value record threaded through the layers).
        constituent_diagonal: C_ii of the constituent prior: 1 (the paper's empty product) or
            1e-9 (the public Tree Transformer code, for faithful reproductions).
        bird_eye: ``sg`` (BET(SG): pointer loss toward the syntax hints on every block) or
            ``sf`` (BET(SF): diagonal-free reweighted attention in every block), docs/methods.md §4;
            causal stacks only.
        pointer_weight: λ_p, the weight of each block's pointer loss (``bird_eye: sg``).
        pointer_head: the head trained by the pointer loss (None: the head average).
        cross_attention: ``segmentation`` (binary chain CRF) or ``sigmoid`` encoder-decoder
            attention in every layer (docs/methods.md §5; translation decoders only). None: softmax.
        cross_attention_normalize: rescale the structured weights to 2 p_i / Σ_j p_j (the
            public SAN code); off by default, as in the paper.
        syntactic_attention: one encoder layer's structured syntactic attention head(s).
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
    constituent: bool = False
    constituent_diagonal: float = 1.0
    bird_eye: str | None = None
    pointer_weight: float = 1.0
    pointer_head: int | None = None
    cross_attention: str | None = None
    cross_attention_normalize: bool = False
    syntactic_attention: SyntacticAttentionConfig | None = None


@dataclass(kw_only=True)
class ModelConfig(StackChecks):
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

    def size_fields(self) -> tuple[str, ...]:
        """The names of the vocabulary-size fields."""
        return ()

    def special_fields(self) -> tuple[str, ...]:
        """Token-id fields besides pad/bos/eos (checked against every vocabulary)."""
        return ()

    def has_cross_attention(self, side: str) -> bool:
        """Whether the layers of stack ``side`` attend to an encoder memory."""
        return False

    def validate(self) -> None:
        """Checks types, ranges and feature compatibility; raises :class:`ConfigError` naming both sides."""
        check_fields(self)
        for name in ("d_model", "heads", "ffn_dim", *self.size_fields()):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least 1")
        for name in ("num_pos_tags", "num_deprels"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must not be negative")
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

    def size_fields(self) -> tuple[str, ...]:
        return ("src_vocab_size", "tgt_vocab_size")

    def has_cross_attention(self, side: str) -> bool:
        return side == "decoder"

    def validate(self) -> None:
        super().validate()
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
