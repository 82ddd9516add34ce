"""Semirings: the user's (torch-struct's set, :mod:`~synattn.structs.semirings.generic`), the
sampling ones (:mod:`~synattn.structs.semirings.sampling`), every dynamic program written once for
any of them (:mod:`~synattn.structs.semirings.programs`: ``crf.run(semiring)``), the interface
and the log and max semirings that the compiled and explicit-outside programs share with the
generic ones (:mod:`~synattn.structs.semirings.log_max`) and the signed log-space semifield
(:mod:`~synattn.structs.semirings.signed`).

``from synattn.structs.semirings import EntropySemiring, ...`` gives the user's semirings.
"""

from .generic import (
    CheckpointSemiring,
    CrossEntropySemiring,
    EntropySemiring,
    KLSemiring,
    KMaxSemiring,
    LogSemiring,
    MaxSemiring,
    Semiring,
    SparseMaxSemiring,
    sparsemax,
)

__all__ = ["CheckpointSemiring", "CrossEntropySemiring", "EntropySemiring", "KLSemiring",
           "KMaxSemiring", "LogSemiring", "MaxSemiring", "Semiring", "SparseMaxSemiring", "sparsemax"]
