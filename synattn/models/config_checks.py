"""The checks of one encoder/decoder stack of a model config: ranges, and the compatibility of its
attention features with each other and with the stack (causal or not, cross-attention or not).

A mixin of :class:`synattn.models.config.ModelConfig`, which calls :meth:`StackChecks._validate_stack`
for each of its stacks; errors are :class:`synattn.errors.ConfigError` naming both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from synattn.attention.structured import TREE_KINDS
from synattn.errors import ConfigError

if TYPE_CHECKING:
    from synattn.models.config import SpecializedHeadsConfig, StackConfig, SupervisedHeadConfig

RELATIONS = ("sequential", "tree_distance", "traversal")
"""Relation kinds of relative attention: Shaw positions, tree distance, tree traversal."""

BIRD_EYE = ("sg", "sf")
"""Bird-Eye variants (docs/methods.md §4): syntax-guided pointer loss, syntax-free reweighting."""

CROSS_ATTENTION = ("segmentation", "sigmoid")
"""Structured encoder-decoder attention (docs/methods.md §5): the chain CRF, or its sigmoid baseline."""


class StackChecks:
    """The per-stack checks of a model config (needs ``heads``, ``num_pos_tags``, ``num_deprels``,
    ``model_type`` and ``has_cross_attention``)."""

    def _validate_stack(self, side: str, stack: StackConfig) -> None:
        if stack.layers < 1:
            raise ConfigError(f"{side}.layers={stack.layers} must be at least 1")
        for relation in stack.relations:
            if relation not in RELATIONS:
                raise ConfigError(f"{side}.relations: unknown relation {relation!r}; known: {', '.join(RELATIONS)}")
        if len(set(stack.relations)) != len(stack.relations):
            raise ConfigError(f"{side}.relations={stack.relations} lists a relation twice")
        if stack.relation_layers is not None:
            if not stack.relations:
                raise ConfigError(f"{side}.relation_layers is set but {side}.relations is empty")
            for layer in stack.relation_layers:
                if not 0 <= layer < stack.layers:
                    raise ConfigError(f"{side}.relation_layers has layer {layer}, out of range for "
                                     f"{side}.layers={stack.layers}")
        for name in ("max_relative_position", "max_distance", "max_traversal"):
            if getattr(stack, name) < 1:
                raise ConfigError(f"{side}.{name}={getattr(stack, name)} must be at least 1")
        sup, spec = stack.supervised_head, stack.specialized_heads
        if sup is not None:
            if sup.weight < 0:
                raise ConfigError(f"{side}.supervised_head.weight={sup.weight} must be >= 0")
            if not 0 <= sup.layer < stack.layers:
                raise ConfigError(f"{side}.supervised_head.layer={sup.layer} is out of range for "
                                 f"{side}.layers={stack.layers}")
            if not 0 <= sup.head < self.heads:
                raise ConfigError(f"{side}.supervised_head.head={sup.head} is out of range for heads={self.heads}")
        if spec is not None:
            self._validate_specialized(side, spec, sup)
        self._validate_structure(side, stack)
        self._validate_bird_eye(side, stack)
        self._validate_cross_attention(side, stack)
        if stack.syntactic_attention is not None:
            self._validate_syntactic(side, stack)

    def _validate_structure(self, side: str, stack: StackConfig) -> None:
        """Constituent and syntactic attention need the bidirectional self-attention of an encoder."""
        if not 0.0 <= stack.constituent_diagonal <= 1.0:
            raise ValueError(f"{side}.constituent_diagonal={stack.constituent_diagonal} must lie in [0, 1]")
        if stack.constituent_diagonal != 1.0 and not stack.constituent:
            raise ValueError(f"{side}.constituent_diagonal={stack.constituent_diagonal}, but "
                             f"{side}.constituent is off")
        if side == "encoder":
            return
        if stack.constituent:
            raise ConfigError(f"{side}.constituent=true, but constituent attention (Tree Transformer) "
                             f"needs bidirectional self-attention and the {side} is causal; use it in "
                             "an encoder")
        if stack.syntactic_attention is not None:
            raise ConfigError(f"{side}.syntactic_attention is set, but syntactic attention needs "
                             f"bidirectional self-attention and the {side} is causal; use it in an encoder")

    def _validate_bird_eye(self, side: str, stack: StackConfig) -> None:
        if stack.bird_eye is not None and stack.bird_eye not in BIRD_EYE:
            raise ConfigError(f"{side}.bird_eye={stack.bird_eye!r}: use one of {', '.join(BIRD_EYE)} (or null)")
        if stack.bird_eye is not None and side == "encoder":
            raise ConfigError(f"encoder.bird_eye={stack.bird_eye!r}, but Bird-Eye attention needs causal "
                             "self-attention (a decoder or language model) and the encoder is bidirectional")
        if stack.pointer_weight < 0:
            raise ConfigError(f"{side}.pointer_weight={stack.pointer_weight} must be >= 0")
        head = stack.pointer_head
        if head is None:
            return
        if stack.bird_eye != "sg":
            raise ConfigError(f"{side}.pointer_head={head} is set, but {side}.bird_eye={stack.bird_eye!r}: "
                             "the pointer loss exists with bird_eye='sg' only")
        if not 0 <= head < self.heads:
            raise ConfigError(f"{side}.pointer_head={head} is out of range for heads={self.heads}")
        sup = stack.supervised_head
        if sup is not None and sup.head == head:
            raise ConfigError(f"{side}.pointer_head={head} and {side}.supervised_head (layer {sup.layer}, "
                             f"head {sup.head}) train the same head toward different targets (syntax "
                             "hints and dependency heads)")

    def _validate_cross_attention(self, side: str, stack: StackConfig) -> None:
        kind = stack.cross_attention
        if kind is not None and kind not in CROSS_ATTENTION:
            raise ConfigError(f"{side}.cross_attention={kind!r}: use one of {', '.join(CROSS_ATTENTION)} "
                             "(or null for softmax attention)")
        if kind is not None and not self.has_cross_attention(side):
            raise ConfigError(f"{side}.cross_attention={kind!r}, but the {side} of this {self.model_type} "
                             "model has no cross-attention (only a translation decoder attends to "
                             "the source)")
        if stack.cross_attention_normalize and kind is None:
            raise ConfigError(f"{side}.cross_attention_normalize=true, but {side}.cross_attention is "
                             "not set (segmentation or sigmoid)")

    def _validate_syntactic(self, side: str, stack: StackConfig) -> None:
        syn = stack.syntactic_attention
        where = f"{side}.syntactic_attention"
        if not 0 <= syn.layer < stack.layers:
            raise ConfigError(f"{where}.layer={syn.layer} is out of range for {side}.layers={stack.layers}")
        if syn.tree not in TREE_KINDS:
            raise ConfigError(f"{where}.tree={syn.tree!r}: use one of {', '.join(TREE_KINDS)}")
        if syn.arc_dim < 1:
            raise ConfigError(f"{where}.arc_dim={syn.arc_dim} must be at least 1")
        claimed = [syn.head] + ([] if syn.children_head is None else [syn.children_head])
        for name, head in zip(("head", "children_head"), claimed):
            if not 0 <= head < self.heads:
                raise ConfigError(f"{where}.{name}={head} is out of range for heads={self.heads}")
        if syn.children_head == syn.head:
            raise ConfigError(f"{where}.head={syn.head} and {where}.children_head={syn.children_head} "
                             "are the same head")
        sup, spec = stack.supervised_head, stack.specialized_heads
        if sup is not None and sup.layer == syn.layer and sup.head in claimed:
            raise ConfigError(f"{where} (layer {syn.layer}, heads {claimed}) and {side}.supervised_head "
                             f"(layer {sup.layer}, head {sup.head}) claim the same head")
        if spec is not None and syn.layer == 0 and set(spec.heads) & set(claimed):
            raise ConfigError(f"{where} (layer 0, heads {claimed}) and {side}.specialized_heads "
                             f"(layer 0, heads {spec.heads}) claim the same head")

    def _validate_specialized(self, side: str, spec: SpecializedHeadsConfig,
                              sup: SupervisedHeadConfig | None) -> None:
        if side != "encoder":
            raise ConfigError(f"{side}.specialized_heads is set, but specialized heads exist only "
                             f"in encoder layer 0")
        sizes = {"pos": ("num_pos_tags", self.num_pos_tags), "deprel": ("num_deprels", self.num_deprels)}
        if spec.source not in sizes:
            raise ConfigError(f"{side}.specialized_heads.source={spec.source!r}: use 'pos' or 'deprel'")
        size_name, size = sizes[spec.source]
        if size < 1:
            raise ConfigError(f"{side}.specialized_heads.source={spec.source!r} needs {size_name} > 0, "
                             f"got {size_name}={size}")
        if spec.label_dim is not None and spec.label_dim < 1:
            raise ConfigError(f"{side}.specialized_heads.label_dim={spec.label_dim} must be at least 1 (or null)")
        if not spec.heads or len(set(spec.heads)) != len(spec.heads):
            raise ConfigError(f"{side}.specialized_heads.heads={spec.heads} must be distinct and non-empty")
        for head in spec.heads:
            if not 0 <= head < self.heads:
                raise ConfigError(f"{side}.specialized_heads.heads has head {head}, out of range for "
                                 f"heads={self.heads}")
        if sup is not None and sup.layer == 0 and sup.head in spec.heads:
            raise ConfigError(f"{side}.supervised_head (layer 0, head {sup.head}) and "
                             f"{side}.specialized_heads (layer 0, heads {spec.heads}) claim the same head")
