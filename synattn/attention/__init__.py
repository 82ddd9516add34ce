"""One multi-head attention whose features compose (see ``feature.py`` for the hooks).

Features of seeds 000 and 001 (METHODS §1–§2): Shaw relative positions
(:class:`RelativePositions`), tree-distance / traversal labels (:class:`TreeRelations`),
specialized POS/deprel heads (:class:`SpecializedHeads`) and the dependency-supervised biaffine
head (:class:`SupervisedHead`).
"""

from synattn.attention.cache import KVCache
from synattn.attention.core import MultiheadAttention
from synattn.attention.feature import AttentionContext, AttentionExtras, AttentionFeature
from synattn.attention.inputs import IGNORE_INDEX, SyntaxInputs
from synattn.attention.masks import attention_mask
from synattn.attention.relative import (RelativeEmbedding, RelativePositions, TreeRelations,
                                        label_logits, label_values, sequential_labels)
from synattn.attention.specialized import SpecializedHeads
from synattn.attention.supervised import SupervisedHead

__all__ = [
    "IGNORE_INDEX", "AttentionContext", "AttentionExtras", "AttentionFeature", "KVCache",
    "MultiheadAttention", "RelativeEmbedding", "RelativePositions", "SpecializedHeads",
    "SupervisedHead", "SyntaxInputs", "TreeRelations", "attention_mask", "label_logits",
    "label_values", "sequential_labels",
]
