"""``synattn reproduce``: one rerunnable study per method family, each comparing a method with its
baseline on the same data and budget, with the noise measured over seeds (and sacreBLEU's paired
bootstrap for translations). See docs/reproduce.md.

Example:
    >>> sorted(STUDIES)
    ['mt-syntax', 'pretrained-syntax', 'structured-attention', 'supervised-head', 'tree-transformer']
"""

from __future__ import annotations

from synattn.reproduce.mt_syntax import MTSyntaxStudy
from synattn.reproduce.pretrained_syntax import PretrainedSyntaxStudy
from synattn.reproduce.structured import StructuredAttentionStudy
from synattn.reproduce.study import Arm, Budget, Context, Study
from synattn.reproduce.supervised_head import SupervisedHeadStudy
from synattn.reproduce.tree_transformer import TreeTransformerStudy

STUDIES: dict[str, Study] = {s.name: s for s in (SupervisedHeadStudy(), TreeTransformerStudy(), MTSyntaxStudy(),
                                                StructuredAttentionStudy(), PretrainedSyntaxStudy())}
"""Every study by its command-line name."""

__all__ = ["STUDIES", "Arm", "Budget", "Context", "Study"]
