"""Semirings for the dynamic programs of ``synattn.structs``.

A dynamic program is written once over a semiring ``(sum, mul)`` where ``mul`` is always ``+`` on
log-scores (Goodman 1999):

- :class:`LogSemiring` (``sum`` = logsumexp) gives log-partition functions;
- :class:`MaxSemiring` (``sum`` = max) gives Viterbi scores.

Each semiring also knows the *backward* of its ``sum``: how much of the adjoint of ``sum_k t_k``
flows back to each term ``t_k``: the posterior weights ``exp(t_k - sum)`` for the log semiring,
all of it to the (first) best term for the max semiring. A hand-written outside pass that uses
it computes marginals (log) or the indicator of the best structure (max) with the same code.

The **signed log-space semifield** (Li and Eisner 2009) represents a real number ``a`` as the pair
``(log|a|, sign a)``; it carries gradients that may be negative through log-space recursions
without overflow. Kim et al. (2017) backpropagate through forward-backward in it (Kim et al. 2017,
"Backpropagating through Forward-Backward").

Masked entries use the finite constant :data:`~synattn.structs.constants.NEG`, never ``-inf``: ``exp(NEG - m)`` is exactly 0,
and ``NEG - NEG`` is 0 rather than NaN.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Callable, Iterator, TypeVar

import torch
import torch.autograd.forward_ad as fwAD

from .constants import IMPOSSIBLE, MAX_TOTAL_SCORE, NEG  # noqa: F401  (re-exported)


F = TypeVar("F", bound=Callable)


def mask_impossible(x: torch.Tensor, source: torch.dtype | None = None) -> torch.Tensor:
    """``x`` with every entry ``<= NEG`` (``-inf``, ``finfo.min``, ``-1e30``, ``-1e9``) set to
    :data:`NEG`; NaN stays NaN. Gradients flow to the other entries only.

    ``source``: the dtype ``x`` was cast from; for float16, whose ``finfo.min`` is only
    ``-65504``, entries at or below that minimum are masks too.
    """
    limit = torch.finfo(torch.float16).min if source == torch.float16 else NEG
    return x.masked_fill(x <= limit, NEG)


def check_scores(xs: list[tuple[torch.Tensor, torch.Tensor | None]], parts: int,
                 what: str) -> bool:
    """Refuse scores too large for masks to stay impossible; say whether any part is masked.

    Args:
        xs: ``(scores, usable)`` pairs, scores after :func:`mask_impossible`, ``usable`` the
            entries that matter (broadcastable; None: all).
        parts: the number of scores one structure adds up.
        what: the arguments' names, for the message.

    Returns:
        True if some usable entry is :data:`NEG` (masked). One host synchronisation in all
        (two when some entry is masked, too large or NaN).

    Raises:
        ValueError: a usable entry is NaN (the kernels would read it as a mask, the PyTorch
            code would return NaN: refused alike on every backend), or ``parts * max |x| >
            MAX_TOTAL_SCORE`` over usable entries above ``NEG``.
    """
    xs = [(x.detach(), usable) for x, usable in xs if x.numel()]
    if not xs:
        return False
    # fast path (one reduction per tensor): no entry masked anywhere and all small enough
    bounds = torch.stack([v for x, _ in xs for v in torch.aminmax(x)]).tolist()
    lows, highs = bounds[0::2], bounds[1::2]
    nan = any(v != v for v in bounds)  # (aminmax propagates NaN: one anywhere takes the slow path)
    if not nan and min(lows) > NEG and max(max(highs), -min(lows)) * parts <= MAX_TOTAL_SCORE:
        return False
    stats = []
    for x, usable in xs:
        masked = x <= NEG
        keep = ~masked if usable is None else usable & ~masked
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        nan = torch.isnan(x) if usable is None else torch.isnan(x) & usable
        top = torch.where(keep & ~nan, x.abs(), zero).amax()
        hit = (masked if usable is None else masked & usable).any()
        stats += [top, hit.to(x.dtype), nan.any().to(x.dtype)]
    values = torch.stack(stats).tolist()
    if any(values[2::3]):
        raise ValueError(f"{what}: NaN among the scores (only entries that no structure uses, "
                         f"past a sentence's length, may hold NaN)")
    top = max(values[0::3])
    if top * parts > MAX_TOTAL_SCORE:
        raise ValueError(f"{what}: finite scores up to {top:.3g} in magnitude over {parts} parts "
                         f"per structure exceed the supported range (parts x max|score| <= "
                         f"{MAX_TOTAL_SCORE:.0e}); mask impossible parts with -inf or any value "
                         f"<= {NEG:.0e} instead")
    return any(v > 0 for v in values[1::3])


def logsumexp(x: torch.Tensor, dim: int, overwrite: bool = False) -> torch.Tensor:
    """``log(sum(exp(x), dim))`` for finite ``x``.

    Without autograd, a size-2 dimension uses ``torch.logaddexp`` (one kernel) and the general
    case works in place (on ``x`` itself if ``overwrite``): fewer kernels than
    ``torch.logsumexp``, which also handles ``inf``, which never occurs here. Reductions are
    fastest on CPU when ``dim`` is not the innermost one, so callers keep the batch innermost.
    """
    if torch.is_grad_enabled() and x.requires_grad:
        # (logaddexp's double backward overflows for differences like NEG - x)
        return torch.logsumexp(x, dim)
    if x.shape[dim] == 2:
        a, b = x.unbind(dim)
        return torch.logaddexp(a, b)
    m = x.amax(dim, keepdim=True)
    x = x.sub_(m) if overwrite else x - m
    return x.exp_().sum(dim).log_().add_(m.squeeze(dim))


class LogSemiring:
    """Log-space sum-product: ``sum`` = logsumexp, ``mul`` = ``+``."""

    @staticmethod
    def sum(x: torch.Tensor, dim: int, overwrite: bool = False) -> torch.Tensor:
        return logsumexp(x, dim, overwrite)

    @staticmethod
    def plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a ⊕ b`` elementwise."""
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            return torch.logsumexp(torch.stack((a, b)), 0)  # (see logsumexp)
        return torch.logaddexp(a, b)

    @staticmethod
    def backward_(terms: torch.Tensor, total: torch.Tensor, grad: torch.Tensor,
                  dim: int) -> torch.Tensor:
        """Overwrite ``terms`` with their adjoints, for ``total = sum(terms, dim)`` and ``grad >= 0``.

        ``grad * exp(terms - total)``, computed as ``exp(terms + log(grad) - total)``; a zero
        ``grad`` gives exactly 0 (no denormal numbers, which are slow on CPUs).
        ``total`` must be the true sum (finite), not a value masked afterwards.
        """
        shift = torch.where(grad > 0, grad.log() - total, 2 * NEG)
        return terms.add_(shift.unsqueeze(dim)).exp_()


class MaxSemiring:
    """Max-plus (Viterbi): ``sum`` = max, ``mul`` = ``+``."""

    @staticmethod
    def sum(x: torch.Tensor, dim: int, overwrite: bool = False) -> torch.Tensor:
        return x.amax(dim)

    @staticmethod
    def plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.maximum(a, b)

    @staticmethod
    def backward_(terms: torch.Tensor, total: torch.Tensor, grad: torch.Tensor,
                  dim: int) -> torch.Tensor:
        """Overwrite ``terms`` with a subgradient: ``grad`` on the first best term, 0 elsewhere."""
        best = terms.argmax(dim, keepdim=True)
        return terms.zero_().scatter_(dim, best, grad.unsqueeze(dim))


Semiring = type[LogSemiring] | type[MaxSemiring]


# ---------------------------------------------------------------------------------------------
# Signed log-space semifield (Li and Eisner 2009): a = sign * exp(logabs).
# ---------------------------------------------------------------------------------------------

def signed_log(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log|x|, sign x)``; zero maps to ``(NEG, +1)`` so that it stays finite."""
    zero = x == 0
    logabs = torch.where(zero, torch.full_like(x, NEG), x.abs().log())
    sign = torch.where(x < 0, -torch.ones_like(x), torch.ones_like(x))
    return logabs, sign


def signed_exp(logabs: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """Back to ordinary numbers: ``sign * exp(logabs)``."""
    return sign * logabs.exp()


def signed_logsumexp(logabs: torch.Tensor, sign: torch.Tensor,
                     dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The semifield sum ``⊕`` over ``dim``: ``(log|Σ s exp(l)|, sign Σ s exp(l))``.

    This is the table of Li and Eisner (2009) applied to a whole dimension at once: shift by the
    largest ``l``, add signed terms, take the log of the magnitude. An exact cancellation gives
    ``(NEG + max, +1)``: a finite stand-in for zero.
    """
    m = logabs.amax(dim, keepdim=True)
    total = (sign * (logabs - m).exp()).sum(dim)
    m = m.squeeze(dim)
    out_sign = torch.where(total < 0, -torch.ones_like(total), torch.ones_like(total))
    mag = total.abs()
    out = torch.where(mag > 0, mag.clamp_min(torch.finfo(mag.dtype).tiny).log() + m, m + NEG)
    return out, out_sign


# ---------------------------------------------------------------------------------------------
# Precision policy shared by all dynamic programs.
# ---------------------------------------------------------------------------------------------

def float_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a dynamic program runs in: float64 stays, everything else becomes float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def fp32_inside(fn: F) -> F:
    """Run ``fn`` with autocast disabled; callers cast half inputs up with :func:`float_dtype`.

    The dynamic programs add many log-scores and exponentiate differences; in float16/bfloat16
    this loses all precision, so (as supar does) they always run in float32 or float64.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


SMALL_STEP = 1 << 18
"""Elements per step below which a dynamic program's loop runs with one CPU thread."""


@contextlib.contextmanager
def serial_if_small(step_elements: int, device: torch.device) -> Iterator[None]:
    """Run the block with one intra-op thread on CPU when its kernels are small.

    A dynamic program issues many kernels of ``step_elements`` elements each, one Python step
    after another; below :data:`SMALL_STEP` splitting them over threads costs more in
    synchronisation than it gains (measured on a 2-core machine, also under load). The thread
    count is restored afterwards.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1 or step_elements >= SMALL_STEP:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def lengths_mask(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """``[batch_size, n]`` boolean mask, True at positions ``< lengths``."""
    return torch.arange(n, device=lengths.device) < lengths.unsqueeze(-1)


def forward_derivative(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                       direction: torch.Tensor) -> torch.Tensor:
    """The derivative of ``fn`` at ``x`` in ``direction`` by forward-mode AD (dual numbers): for
    ``fn`` = the marginals (the gradient of ``log Z``) it is the Hessian of ``log Z`` times
    ``direction``, which by the Hessian's symmetry is also the marginals' vector-Jacobian
    product, the backward that Eisner, Matrix-Tree and CKY use on the PyTorch path."""
    with fwAD.dual_level(), warnings.catch_warnings():
        # (torch's first use of forward AD loads decompositions through torch.jit.script)
        warnings.simplefilter("ignore", DeprecationWarning)
        out = fn(fwAD.make_dual(x, direction.to(x.dtype)))
        tangent = fwAD.unpack_dual(out).tangent
        # (no tangent: ``fn`` does not depend on ``x`` here, e.g. one-word CKY marginals)
        return torch.zeros_like(out) if tangent is None else tangent
