"""CKY inside and outside passes on the PyTorch path, the calls into the compiled kernels, and
the autograd Functions of ``log Z`` and the span marginals. :mod:`synattn.structs.cky.crf` documents
the layout, the recursion and the charts; :class:`~synattn.structs.cky.TreeCRF` is the public
interface.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.autograd.forward_ad import unpack_dual

from .. import reference, registry
from ..arguments import length_tensor, score_tensor
from ..backend import kernels, serial_if_small, use_numba
from ..constants import IMPOSSIBLE, NEG
from ..forward_mode import forward_derivative
from ..scores import check_scores, float_dtype, in_range_and_zero
from ..semirings.log_max import LogSemiring, MaxSemiring

DEAD = IMPOSSIBLE
"""A ``log Z`` below this means every tree uses a forbidden span: no valid structure."""


# ---------------------------------------------------------------------------------------------
# Layout helpers.
# ---------------------------------------------------------------------------------------------

def _diagonals(x: torch.Tensor) -> torch.Tensor:
    """View ``[B, N(w), N(i)]`` of ``x [B, N, 2N]`` with ``[b, w, i] = x[b, i, i+w]``."""
    batch, N = x.shape[0], x.shape[1]
    return x.as_strided((batch, N, N), (2 * N * N, 1, 2 * N + 1), x.storage_offset())


def to_width_major(scores: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` span scores → ``[N(w), N(i), B]`` with ``[w, i] = scores[:, i, i+w]``."""
    N = scores.shape[-1]
    return _diagonals(F.pad(scores, (0, N))).permute(1, 2, 0).contiguous()


def from_width_major(sd: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`to_width_major` (entries past the chart, ``i + w >= N``, are dropped)."""
    N, batch = sd.shape[0], sd.shape[-1]
    out = sd.new_zeros(batch, N, 2 * N)
    _diagonals(out).copy_(sd.permute(2, 0, 1))
    return out[:, :, :N]


@functools.lru_cache(maxsize=64)
def _upper(N: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions [N], [N, N] True at i <= j)`` (read only; cached: a call costs ~20 µs)."""
    pos = torch.arange(N, device=device)
    return pos, pos[:, None] <= pos[None, :]


def span_mask(lengths: torch.Tensor, N: int) -> torch.Tensor:
    """``[batch_size, N, N]`` True at the spans ``i <= j < lengths[b]`` of each sentence."""
    pos, upper = _upper(N, lengths.device)
    return upper & (pos < lengths.unsqueeze(-1)).unsqueeze(1)  # (j < length; then i <= j is too)


def check_lengths(lengths: torch.Tensor | None, batch: int, N: int,
                  device: torch.device) -> torch.Tensor:
    """``[batch]`` long lengths on ``device`` (default all ``N``); ValueError unless in ``1..N``."""
    if lengths is None:
        return torch.full((batch,), N, dtype=torch.long, device=device)
    lengths = length_tensor(lengths, device)
    if lengths.shape != (batch,) or bool(((lengths < 1) | (lengths > N)).any()):
        raise ValueError(_bad_lengths(lengths, N))
    return lengths


def _bad_lengths(lengths: torch.Tensor, N: int) -> str:
    return f"lengths must be [B] with values in 1..{N}, got {lengths.tolist()}"


def check_span_scores(scores: torch.Tensor,
                      lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate span scores and lengths.

    Returns:
        Scores in float32/float64 with ignored entries set to 0 and forbidden ones (``<= NEG``,
        ``-inf`` included) set to ``NEG`` (with zero gradient), and long lengths on their device.

    Raises:
        ValueError: not a floating-point tensor, bad shapes or lengths, NaN or finite scores
            too large (:func:`~synattn.structs.scores.check_scores`) within the sentences.
    """
    score_tensor(scores, "scores", "TreeCRF")
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 1:
        raise ValueError(f"span scores must be [B, N, N] with N >= 1, got {tuple(scores.shape)}")
    batch, N, _ = scores.shape
    if lengths is None:
        lengths, bad = torch.full((batch,), N, dtype=torch.long, device=scores.device), None
    else:
        lengths = length_tensor(lengths, scores.device)
        if lengths.shape != (batch,):
            raise ValueError(_bad_lengths(lengths, N))
        bad = lengths.clamp(1, N) - lengths  # (0 where in range)
    # fast path: every entry, padding included, finite, unmasked and in range (one reduction, read
    # with the lengths' range in one host synchronisation): then the clamp and the check of the
    # masked scores below would change and find nothing
    in_range, clear = in_range_and_zero([scores], 2 * N - 1, [] if bad is None else [bad])
    if bad is not None and not clear[0]:
        raise ValueError(_bad_lengths(lengths, N))
    scores = scores.to(float_dtype(scores))
    scores = torch.where(span_mask(lengths, N), scores, scores.new_zeros(()))
    if not in_range:
        scores = scores.clamp_min(NEG)
        check_scores([(scores, None)], 2 * N - 1, "scores")  # (NaN, and the range of the scores)
    return scores, lengths


# ---------------------------------------------------------------------------------------------
# PyTorch path: inside and outside passes.
# ---------------------------------------------------------------------------------------------

def cky_inside(sd: torch.Tensor, lengths: torch.Tensor, semiring: type[LogSemiring] = LogSemiring
               ) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Inside pass over width-major scores ``sd [N, N, B]`` (autograd and forward-mode AD work).

    Returns:
        ``log_z [B]`` (or the best score), the chart ``K [2, N, N, B]`` and the split sums
        ``S`` ``[N-w, B]`` per width ``w`` (index 0 unused), which :func:`cky_outside` needs.
    """
    N, _, batch = sd.shape
    K = torch.full((2, N, N, batch), NEG, dtype=sd.dtype, device=sd.device)
    K[0, 0] = sd[0]
    K[1, N - 1] = sd[0]
    sums = [sd.new_zeros(0)]
    for w in range(1, N):
        S = semiring.sum(K[0, :w, :N - w] + K[1, N - w:, w:], 0, overwrite=True)  # [N-w, B]
        sums.append(S)
        beta = S + sd[w, :N - w]
        K[0, w, :N - w] = beta
        K[1, N - 1 - w, w:] = beta
    log_z = K[0, lengths - 1, 0, torch.arange(batch, device=sd.device)]
    return log_z, K, sums


def cky_outside(sd: torch.Tensor, lengths: torch.Tensor, K: torch.Tensor, sums: list,
                semiring: type[LogSemiring] = LogSemiring) -> torch.Tensor:
    """Adjoint of :func:`cky_inside`: ``d log_z / d sd`` ``[N, N, B]`` (width-major span
    marginals with the log semiring, the best tree's spans as 0/1 with the max semiring)."""
    N, _, batch = sd.shape
    gK = torch.zeros_like(K)
    grad = torch.zeros_like(sd)
    gK[0, lengths - 1, 0, torch.arange(batch, device=sd.device)] = 1.0
    for w in range(N - 1, 0, -1):
        g = gK[0, w, :N - w] + gK[1, N - 1 - w, w:]  # [N-w, B]
        grad[w, :N - w] = g
        t = K[0, :w, :N - w] + K[1, N - w:, w:]  # [w, N-w, B]
        semiring.backward_(t, sums[w], g, 0)
        gK[0, :w, :N - w] += t
        gK[1, N - w:, w:] += t
    grad[0] = gK[0, 0] + gK[1, N - 1]
    return grad


def _step_elements(N: int, batch: int) -> int:
    return (N // 2) ** 2 * batch


def cky_marginals(scores: torch.Tensor, lengths: torch.Tensor, semiring: type[LogSemiring] = LogSemiring,
                  compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_z [B]`` and ``d log_z / d scores [B, N, N]`` for checked scores (inside + outside).

    Sentences without a valid tree get ``log_z = -inf`` and zero marginals.
    """
    if compiled:
        log_z, mu = kernels("cky._kernels").marginals(scores, lengths, viterbi=semiring is MaxSemiring)
    else:
        sd = to_width_major(scores)
        with serial_if_small(_step_elements(*sd.shape[1:]), sd.device):
            log_z, K, sums = cky_inside(sd, lengths, semiring)
            mu = from_width_major(cky_outside(sd, lengths, K, sums, semiring))
    return _dead_to_inf(log_z), _zero_dead(mu, log_z, lengths)


def _dead_to_inf(log_z: torch.Tensor) -> torch.Tensor:
    return torch.where(log_z < DEAD, float("-inf"), log_z)


def _zero_dead(x: torch.Tensor, log_z: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``x [B, N, N]`` with 0 outside each sentence's spans and in sentences without a tree."""
    keep = span_mask(lengths, x.shape[-1]) & (log_z >= DEAD)[:, None, None]
    return torch.where(keep, x, 0.0)


def marginals_vjp_by_autograd(scores: torch.Tensor, lengths: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``g^T d mu / d scores`` by autograd's double backward of the PyTorch inside pass, itself
    differentiable (every backend's marginals' backward when a third derivative is asked for). On
    ``scores`` itself, not a detached copy: the result must stay a function of the scores."""
    inner = cky_inside(to_width_major(scores), lengths)[0]
    (mu,) = torch.autograd.grad(inner.sum(), scores, create_graph=True)
    return torch.autograd.grad(mu, scores, g, create_graph=True)[0]


class CKYMarginals(torch.autograd.Function):
    """Span marginals; backward is the Hessian-vector product of ``log Z`` by forward-mode AD
    (``O(B·N²)`` memory), or autograd throughout when a third derivative is asked for."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor,
                compiled: bool | None = None) -> torch.Tensor:
        ctx.compiled = use_numba(scores) if compiled is None else compiled
        log_z, mu = cky_marginals(scores, lengths, compiled=ctx.compiled)
        ctx.save_for_backward(scores, lengths, log_z)
        return mu

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, log_z = ctx.saved_tensors
        if torch.is_grad_enabled():  # a third derivative was asked for: autograd throughout
            out = marginals_vjp_by_autograd(scores, lengths, g)
        elif ctx.compiled:
            out = kernels("cky._kernels").marginals_jvp(scores, lengths, g)
        else:
            def marginals(x: torch.Tensor) -> torch.Tensor:
                sd = to_width_major(x)
                _, K, sums = cky_inside(sd, lengths)
                return from_width_major(cky_outside(sd, lengths, K, sums))

            out = forward_derivative(marginals, scores, g)
        return _zero_dead(out, log_z, lengths), None, None


def _log_partition(scores: torch.Tensor, lengths: torch.Tensor, compiled: bool) -> torch.Tensor:
    """:class:`_CKYLogPartition`, through the autograd Function only where a derivative may be
    asked for (its call costs a tenth of a small compiled pass)."""
    if (torch.is_grad_enabled() and scores.requires_grad) or unpack_dual(scores).tangent is not None:
        return _CKYLogPartition.apply(scores, lengths, compiled)
    return _inside_only(scores, lengths, compiled)


def _inside_only(scores: torch.Tensor, lengths: torch.Tensor, compiled: bool) -> torch.Tensor:
    """``log Z [B]`` (``-inf`` without a tree) by the inside pass alone, no derivative."""
    if compiled:  # (-inf without a tree already)
        return kernels("cky._kernels").log_partition(scores, lengths)
    sd = to_width_major(scores)
    with serial_if_small(_step_elements(*sd.shape[1:]), sd.device):
        return _dead_to_inf(cky_inside(sd, lengths)[0])


class _CKYLogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the outside pass (the marginals)."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor,
                compiled: bool | None = None) -> torch.Tensor:
        compiled = use_numba(scores) if compiled is None else compiled
        ctx.compiled = compiled
        if not ctx.needs_input_grad[0]:
            return _inside_only(scores, lengths, compiled)
        log_z, mu = cky_marginals(scores, lengths, compiled=compiled)
        ctx.save_for_backward(scores, lengths, mu, log_z)
        return log_z

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, mu, log_z = ctx.saved_tensors
        if torch.is_grad_enabled():
            mu = CKYMarginals.apply(scores, lengths, ctx.compiled)
        g = torch.where(torch.isfinite(log_z), g, 0.0)  # no tree: zero gradient, whatever g is
        return mu * g[:, None, None], None, None


def _reference_log_partition(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """:func:`synattn.structs.reference.cky_log_partition` with ``-inf`` (and a zero gradient)
    for sentences without a tree, as the accelerations give."""
    return _dead_to_inf(reference.cky_log_partition(scores, lengths))


def _reference_marginals(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    log_z = reference.cky_log_partition(scores.detach(), lengths)
    mu = reference.marginals_by_autograd(reference.cky_log_partition, scores, lengths)
    return _zero_dead(mu, log_z, lengths)


# The reference with TreeCRF's handling of sentences without a tree, and its accelerations: numba
# (CPU), Triton (CUDA; :mod:`synattn.structs.triton_kernels.cky`, imported on first use), PyTorch.
registry.set_reference("cky", _reference_log_partition, _reference_marginals)
registry.register("cky", registry.Implementation(
    "numba", lambda s, lengths: _log_partition(s, lengths, True),
    lambda s, lengths: CKYMarginals.apply(s, lengths, True), applies=registry.numba_applies))
registry.register("cky", registry.Implementation(
    "torch", lambda s, lengths: _log_partition(s, lengths, False),
    lambda s, lengths: CKYMarginals.apply(s, lengths, False)))
registry.register("cky", registry.Implementation(
    "triton", lambda s, lengths: kernels("triton_kernels.cky").LogPartition.apply(s, lengths),
    lambda s, lengths: kernels("triton_kernels.cky").Marginals.apply(s, lengths),
    applies=registry.triton_applies), before="torch")
