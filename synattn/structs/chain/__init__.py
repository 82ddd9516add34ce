"""Chains: the linear-chain CRF (:mod:`~synattn.structs.chain.crf`; its PyTorch dynamic program
:mod:`~synattn.structs.chain.dp`, constraints and sampling :mod:`~synattn.structs.chain.decoding`,
compiled kernels ``_kernels.py``/``_kernels_grad.py``) and the semi-Markov CRF over labelled
segments (:mod:`~synattn.structs.chain.semimarkov`, kernels ``_semimarkov_kernels.py``).

``synattn.structs.chain`` was the linear-chain module itself: its names are still read here.
"""

from .crf import (
    ChainLogPartition,
    ChainMarginals,
    LinearChainCRF,
    chain_log_partition,
    forward_backward,
    transfer_matrices,
)
from .semimarkov import SemiMarkovCRF

__all__ = ["ChainLogPartition", "ChainMarginals", "LinearChainCRF", "SemiMarkovCRF", "chain_log_partition",
           "forward_backward", "transfer_matrices"]


def __getattr__(name: str):
    """The other names of the linear-chain module, for code written against its old path."""
    from . import crf

    if not name.startswith("__") and hasattr(crf, name):
        return getattr(crf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
