"""Constants shared by the dynamic programs of :mod:`synattn.structs` (PyTorch code and compiled
kernels alike), defined once here.

Masked (impossible) parts hold the finite :data:`NEG`, never ``-inf``: ``exp(NEG - m)`` is
exactly 0, and ``NEG - NEG`` is 0 rather than NaN.
"""

NEG = -1e9
"""Log-score of an impossible event: finite, so that no recursion ever computes ``-inf - -inf``."""

IMPOSSIBLE = NEG / 2
"""A structure whose log-score is at or below this uses a masked part: it has probability 0."""

MAX_TOTAL_SCORE = 1e8
"""Largest ``parts per structure × max |finite score|`` accepted: it keeps every structure with a
masked part (score ``<= NEG + MAX_TOTAL_SCORE``) below :data:`IMPOSSIBLE` and every other one
above it, so that masked parts weigh exactly 0 and "no valid structure" is recognised."""

LOG0 = -1e30
"""Log-weight of "no arc" in the log-space Matrix-Tree elimination
(:mod:`synattn.structs.dependency.matrix_tree_log`): far below any sum of :data:`NEG` scores."""

TINY = 1e-300
"""Floor of a Matrix-Tree elimination pivot (a positive float64 well above the subnormals)."""

SAFE_PIVOT = 1e-250
"""A Matrix-Tree elimination pivot below this is not trusted: the sentence is recomputed in log
space (:mod:`synattn.structs.dependency.matrix_tree_log`)."""

SAFE_SPREAD = 700.0
"""A usable unmasked arc score this far below its column's largest underflows ``exp`` in the
scaled Matrix-Tree elimination: such sentences are computed in log space."""

SERIAL_WORK = 1 << 19
"""Below this ``Σ (n+1)³`` over a batch (a few milliseconds on one core) the compiled tree kernels
run on one thread: on a busy 2-core machine, waking a second thread costs more than it saves."""
