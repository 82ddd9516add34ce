"""Constituency trees by CKY: the binary tree CRF over span scores ``[B, N, N]``
(:mod:`~synattn.structs.cky.crf`; its PyTorch inside-outside :mod:`~synattn.structs.cky.dp`,
compiled ``_kernels.py``, exact k-best :mod:`~synattn.structs.cky.kbest`, labelled spans
:mod:`~synattn.structs.cky.labelled_spans`) and the PCFG in Chomsky
normal form (:mod:`~synattn.structs.cky.cfg`); span + span-pair scores by mean field or loopy belief
propagation (:mod:`~synattn.structs.cky.second_order_vi`).

``synattn.structs.cky`` was the tree CRF's module itself: its names are still read here.
"""

from .cfg import SentCFG
from .crf import CKYMarginals, TreeCRF, chart_to_spans, check_span_scores, sample_trees, spans_to_chart
from .second_order_vi import ConstituencyLBP, ConstituencyMFVI

__all__ = ["CKYMarginals", "ConstituencyLBP", "ConstituencyMFVI", "SentCFG", "TreeCRF", "chart_to_spans",
           "check_span_scores", "sample_trees", "spans_to_chart"]


def __getattr__(name: str):
    """The other names of the tree CRF's module, for code written against its old path."""
    from . import crf

    if not name.startswith("__") and hasattr(crf, name):
        return getattr(crf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
