"""One multi-head attention whose features compose: the mechanism (see ``feature.py`` for the hooks).

:class:`MultiheadAttention` (``core.py``) runs the steps every feature plugs into; the features
implement :class:`AttentionFeature` (``feature.py``); ``masks.py`` builds the masks, ``cache.py``
the key/value cache, ``claims.py`` the rule of which features may share a layer, and
``adapter.py`` a drop-in for ``torch.nn.MultiheadAttention`` with syntax inputs bound per forward
pass. :class:`SpanAttention` (``span.py``), structured attention over the constituents of a tree
CRF, is a feature no method builds yet.

The methods' features live with their specs, one file per method in :mod:`synattn.methods`
(docs/methods.md §1–§5): ``relations.py`` (:class:`~synattn.methods.relations.RelativePositions`,
:class:`~synattn.methods.relations.TreeRelations`), ``specialized.py``, ``supervised.py``,
``constituent.py``, ``bird_eye.py``, ``cross_attention.py`` (segmentation attention),
``syntactic.py`` and ``tree_distance_bias.py``.
"""

from synattn.attention.adapter import SyntaxMultiheadAttention, bind_syntax
from synattn.attention.cache import KVCache
from synattn.attention.claims import Claim, find_conflict
from synattn.attention.core import MultiheadAttention, attend_features, check_compatible
from synattn.attention.feature import AttentionContext, AttentionExtras, AttentionFeature
from synattn.attention.masks import attention_mask, bidirectional_keys, padding_keys
from synattn.attention.span import SpanAttention
from synattn.syntax.fields import SyntaxField, TreeBatch, register_field, syntax_fields
from synattn.syntax.inputs import IGNORE_INDEX, SyntaxInputs

__all__ = [
    "IGNORE_INDEX", "AttentionContext", "AttentionExtras", "AttentionFeature", "Claim", "KVCache",
    "MultiheadAttention", "SpanAttention", "SyntaxField", "SyntaxInputs", "SyntaxMultiheadAttention",
    "TreeBatch", "attend_features", "attention_mask", "bidirectional_keys", "bind_syntax", "check_compatible",
    "find_conflict", "padding_keys", "register_field", "syntax_fields",
]
