"""The one exponential of the compiled kernels, :func:`exp`, which LLVM can vectorise (numba calls
``math.exp`` one entry at a time, the largest cost of the Eisner and Matrix-Tree kernels).

``exp(x) = 2^k · exp(r)`` with ``x = k·ln 2 + r``, ``|r| <= ln(2)/2`` (Cody and Waite 1980: ``ln 2``
in two parts, the first exact in ``k·LN2_HI``), ``exp(r)`` by its Taylor polynomial of degree 13
(remainder below ``1e-17`` relative), ``2^k`` from its IEEE bits; within about 1 ulp. Inputs below
:data:`EXP_MIN` give 0 (``2^k`` must stay a normal number).
"""

from __future__ import annotations

import numba
import numpy as np

LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
EXP_MIN = -708.0
ROUND = 6755399441055744.0  # 1.5·2^52: (y + ROUND) - ROUND is y rounded to an integer


@numba.njit(cache=True, fastmath=False, inline="always")
def exp_reduced(r):
    """``exp(r)`` for ``|r| <= ln(2)/2``: the degree-13 Taylor polynomial in Horner form."""
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    return p * r + 1.0


@numba.njit(cache=True, fastmath=False)
def exp(x):
    """``exp(x)`` within 1 ulp for ``EXP_MIN <= x <= 700``, 0 below (a NaN stays NaN); no
    library call, so loops over it vectorise."""
    xc = EXP_MIN if x < EXP_MIN else x
    k = (xc * LOG2E + ROUND) - ROUND  # round(x / log 2)
    p = exp_reduced((xc - k * LN2_HI) - k * LN2_LO)
    two_k = np.int64((np.int64(k) + 1023) << 52).view(np.float64)  # the float64 2^k
    return 0.0 if x < EXP_MIN else p * two_k
