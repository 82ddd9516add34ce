"""Pieces shared by the Triton kernels: the online log-sum-exp of a tile and launch settings."""

from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def lse_accumulate(t, dt, m, acc, dacc, VITERBI: tl.constexpr, DUAL: tl.constexpr):
    """Fold one tile of terms ``t [BI, BK]`` (``-inf`` where masked) into the running
    ``(max m, Σ exp(t - m), Σ exp(t - m)·ṫ)`` of each row; ``dt`` is the tile's tangent (0 where
    masked; read only if ``DUAL``). Under ``VITERBI`` only the running max is kept."""
    m_new = tl.maximum(m, tl.max(t, 1))
    if not VITERBI:
        safe = tl.where(m_new == NEG_INF, 0.0, m_new)
        scale = tl.exp(m - safe)
        e = tl.exp(t - safe[:, None])
        acc = acc * scale + tl.sum(e, 1)
        if DUAL:
            dacc = dacc * scale + tl.sum(e * dt, 1)
    return m_new, acc, dacc


@triton.jit
def lse_finish(m, acc, dacc, VITERBI: tl.constexpr, DUAL: tl.constexpr):
    """``(⊕ of the row, its tangent)`` from the running state of :func:`lse_accumulate`: the
    log-sum-exp (``-inf`` for an empty row) and ``Σ softmax·ṫ`` (0 for an empty row), or the max."""
    if VITERBI:
        value = m
    else:
        full = acc > 0
        value = tl.where(full, tl.where(m == NEG_INF, 0.0, m) + tl.log(tl.where(full, acc, 1.0)), NEG_INF)
    d = dacc
    if DUAL:
        d = tl.where(acc > 0, dacc / tl.where(acc > 0, acc, 1.0), 0.0)
    return value, d


@triton.jit
def fold(x, dx, m, acc, dacc, VITERBI: tl.constexpr, DUAL: tl.constexpr):
    """Fold a chunk ``x [BK]`` (``-inf`` where masked; tangent ``dx``, 0 there) into the running
    scalar ``(max, Σ exp(x - max), Σ exp(x - max)·ẋ)`` (:func:`lse_finish` ends it)."""
    m_new = tl.maximum(m, tl.max(x, 0))
    if not VITERBI:
        safe = tl.where(m_new == NEG_INF, 0.0, m_new)
        scale = tl.exp(m - safe)
        e = tl.exp(x - safe)
        acc = acc * scale + tl.sum(e, 0)
        if DUAL:
            dacc = dacc * scale + tl.sum(e * dx, 0)
    return m_new, acc, dacc


@triton.jit
def gather_pair(x_ptr, y_ptr, dx_ptr, dy_ptr, mask, m, acc, dacc, VITERBI: tl.constexpr, DUAL: tl.constexpr):
    """Fold the terms ``X + Y`` at the pointers ``x_ptr``, ``y_ptr`` ``[BI, BK]`` (``mask`` where
    they exist; their tangents at ``dx_ptr``, ``dy_ptr`` under ``DUAL``) into the running
    log-sum-exp of each row (:func:`lse_accumulate`)."""
    t = tl.load(x_ptr, mask=mask, other=NEG_INF) + tl.load(y_ptr, mask=mask, other=NEG_INF)
    dt = t
    if DUAL:
        dt = tl.load(dx_ptr, mask=mask, other=0.0) + tl.load(dy_ptr, mask=mask, other=0.0)
    return lse_accumulate(t, dt, m, acc, dacc, VITERBI, DUAL)


def tile(size: int, cap: int = 32) -> int:
    """A power-of-two tile edge: the next power of two of ``size``, between 16 and ``cap``."""
    return max(16, min(cap, triton.next_power_of_2(max(1, size))))


def tl_dtype(x: torch.Tensor):
    """The Triton type of a float32 or float64 tensor (the kernels compute in the input's type)."""
    return tl.float64 if x.dtype == torch.float64 else tl.float32


def signature(kernel, pointer: str = "*fp32", **types: str) -> dict[str, str]:
    """The argument types of ``kernel`` for :func:`triton.compile`: ``constexpr`` for its constexpr
    parameters, ``types[name]`` where given, ``pointer`` otherwise."""
    params = inspect.signature(kernel.fn).parameters.values()  # (also for interpreted kernels)
    return {p.name: "constexpr" if "constexpr" in str(p.annotation) else types.get(p.name, pointer)
            for p in params}
