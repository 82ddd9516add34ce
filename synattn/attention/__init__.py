"""One multi-head attention whose features compose (see ``feature.py`` for the hooks).

Features of docs/methods.md §1–§2 (docs/methods.md §1–§2): Shaw relative positions
(:class:`RelativePositions`), tree-distance / traversal labels (:class:`TreeRelations`),
specialized POS/deprel heads (:class:`SpecializedHeads`) and the dependency-supervised biaffine
head (:class:`SupervisedHead`). Features of docs/methods.md §3–§5 (docs/methods.md §3–§5): Tree Transformer
constituent attention (:class:`ConstituentAttention`, a-values threaded through a stack in each
forward's carry, read back by :func:`recorded_links`), Bird-Eye attention (:class:`SyntaxGuidedPointer` for BET(SG),
:class:`BirdEyeReweighting` for BET(SF)) and structured attention
(:class:`SegmentationAttention`, :class:`SpanSegmentationAttention` over labelled segments of a
semi-Markov CRF, :class:`SyntacticAttention`, and :class:`SpanAttention` over a constituency tree
CRF).
"""

from synattn.attention.adapter import SyntaxMultiheadAttention, bind_syntax
from synattn.attention.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer, pointer_loss
from synattn.attention.cache import KVCache
from synattn.attention.claims import Claim, find_conflict
from synattn.attention.constituent import ConstituentAttention, ConstituentState, constituent_prior, recorded_links
from synattn.attention.core import MultiheadAttention, attend_features, check_compatible
from synattn.attention.feature import AttentionContext, AttentionExtras, AttentionFeature
from synattn.attention.masks import attention_mask, bidirectional_keys, padding_keys
from synattn.attention.relative import (
    RelativeEmbedding,
    RelativePositions,
    TreeRelations,
    label_logits,
    label_values,
    sequential_labels,
)
from synattn.attention.segments import SpanSegmentationAttention
from synattn.attention.span import SpanAttention
from synattn.attention.specialized import SpecializedHeads
from synattn.attention.structured import (
    SEGMENTATION_MODES,
    TREE_KINDS,
    ArcScorer,
    SegmentationAttention,
    SyntacticAttention,
)
from synattn.attention.supervised import SupervisedHead
from synattn.syntax.fields import SyntaxField, TreeBatch, register_field, syntax_fields
from synattn.syntax.inputs import IGNORE_INDEX, SyntaxInputs

__all__ = [
    "IGNORE_INDEX", "SEGMENTATION_MODES", "TREE_KINDS", "ArcScorer", "AttentionContext",
    "AttentionExtras", "AttentionFeature", "BirdEyeReweighting", "Claim", "ConstituentAttention",
    "ConstituentState", "KVCache", "MultiheadAttention", "RelativeEmbedding", "RelativePositions",
    "SegmentationAttention", "SpanAttention", "SpanSegmentationAttention", "SpecializedHeads", "SupervisedHead",
    "SyntacticAttention", "SyntaxField", "SyntaxGuidedPointer", "SyntaxInputs", "SyntaxMultiheadAttention",
    "TreeBatch", "TreeRelations", "attend_features", "attention_mask", "bidirectional_keys", "bind_syntax",
    "check_compatible", "constituent_prior", "find_conflict", "label_logits", "label_values", "padding_keys",
    "pointer_loss", "recorded_links", "register_field", "sequential_labels", "syntax_fields",
]
