"""What every dynamic program of :mod:`synattn.structs` does with its scores before it runs:
masks to :data:`~synattn.structs.constants.NEG`, the range check that keeps masked parts
impossible, the float32/float64 precision policy, and masks of positions past a length.

Masked entries use the finite constant :data:`~synattn.structs.constants.NEG`, never ``-inf``:
``exp(NEG - m)`` is exactly 0, and ``NEG - NEG`` is 0 rather than NaN.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

from .constants import IMPOSSIBLE, MAX_TOTAL_SCORE, NEG

F = TypeVar("F", bound=Callable)


def mask_impossible(x: torch.Tensor, source: torch.dtype | None = None) -> torch.Tensor:
    """``x`` with every entry ``<= NEG`` (``-inf``, ``finfo.min``, ``-1e30``, ``-1e9``) set to
    :data:`NEG`; NaN stays NaN. Gradients flow to the other entries only.

    ``source``: the dtype ``x`` was cast from; for float16, whose ``finfo.min`` is only
    ``-65504``, entries at or below that minimum are masks too.
    """
    return x.masked_fill(x <= mask_limit(source), NEG)


def mask_limit(source: torch.dtype | None = None) -> float:
    """The value at or below which :func:`mask_impossible` reads an entry of scores cast from
    ``source`` as a mask: :data:`NEG`, or float16's ``finfo.min``."""
    return torch.finfo(torch.float16).min if source == torch.float16 else NEG


def impossible_as_inf(x: torch.Tensor) -> torch.Tensor:
    """``x`` (a log-partition or a best score) with every value at or below
    :data:`~synattn.structs.constants.IMPOSSIBLE` (no structure survives the masks) as ``-inf``."""
    return torch.where(x > IMPOSSIBLE, x, torch.full_like(x, -float("inf")))


def check_scores(xs: list[tuple[torch.Tensor, torch.Tensor | None]], parts: int,
                 what: str, first: tuple[torch.Tensor, Callable[[], str]] | None = None) -> bool:
    """Refuse scores too large for masks to stay impossible; say whether any part is masked.

    Args:
        xs: ``(scores, usable)`` pairs, scores after :func:`mask_impossible`, ``usable`` the
            entries that matter (broadcastable; None: all).
        parts: the number of scores one structure adds up.
        what: the arguments' names, for the message.
        first: ``(flag, message)``: a boolean tensor (e.g. "some length is out of range"), read
            in the same host synchronisation; if it is True, ``ValueError(message())`` is raised
            before anything else.

    Returns:
        True if some usable entry is :data:`NEG` (masked). One host synchronisation in all
        (two when some entry is masked, too large or NaN).

    Raises:
        ValueError: a usable entry is NaN (the kernels would read it as a mask, the PyTorch
            code would return NaN: refused alike on every backend), or ``parts * max |x| >
            MAX_TOTAL_SCORE`` over usable entries above ``NEG``.
    """
    xs = [(x.detach(), usable) for x, usable in xs if x.numel()]
    flags = [] if first is None else [first[0].to(torch.float64).reshape(1)]
    # fast path: no entry masked anywhere, all small enough
    ok, clear = in_range_and_zero([x for x, _ in xs], parts, flags)
    if first is not None and not clear[0]:
        raise ValueError(first[1]())
    if ok:
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
    check_range(what, any(values[2::3]), max(values[0::3]), parts)
    return any(v > 0 for v in values[1::3])


def check_range(what: str, nan: bool, top: float, parts: int) -> None:
    """:func:`check_scores`' verdict from its statistics (also those a compiled pass gathers):
    ``nan`` whether a usable entry is NaN, ``top`` the largest magnitude of a usable unmasked one.

    Raises:
        ValueError: NaN, or ``parts * top > MAX_TOTAL_SCORE``.
    """
    if nan:
        raise ValueError(f"{what}: NaN among the scores (only entries that no structure uses, "
                         f"past a sentence's length, may hold NaN)")
    if top * parts > MAX_TOTAL_SCORE:
        raise ValueError(f"{what}: finite scores up to {top:.3g} in magnitude over {parts} parts "
                         f"per structure exceed the supported range (parts x max|score| <= "
                         f"{MAX_TOTAL_SCORE:.0e}); mask impossible parts with -inf or any value "
                         f"<= {NEG:.0e} instead")



def in_range(xs: list[torch.Tensor], parts: int) -> bool:
    """Whether every entry of ``xs``, ignored ones included, is finite, above the mask limit of
    :func:`mask_impossible` and small enough (``parts * max |x| <= MAX_TOTAL_SCORE``).

    Then :func:`mask_impossible` changes nothing and :func:`check_scores` accepts the tensors
    whatever entries are usable, so a caller may use them as given (ignored entries hold finite,
    bounded numbers: a product with 0 is 0). One reduction per tensor (``aminmax``, NaN
    propagating) and one host synchronisation in all; no temporary of the tensors' size.
    """
    return in_range_and_zero(xs, parts, [])[0]


def _unexpanded(x: torch.Tensor) -> torch.Tensor:
    """``x`` without its broadcast dimensions (stride 0, e.g. a transition matrix expanded over
    the batch and positions): the same entries, each once, so its min and max are ``x``'s."""
    if all(stride or size == 1 for stride, size in zip(x.stride(), x.shape)):
        return x
    return x[tuple(slice(None) if stride else slice(0, 1) for stride in x.stride())]


def in_range_and_zero(xs: list[torch.Tensor], parts: int, zeros: list[torch.Tensor]
                      ) -> tuple[bool, list[bool]]:
    """:func:`in_range` of ``xs`` and, in the same host synchronisation, whether each of ``zeros``
    (views of the entries a caller needs to be 0, e.g. a diagonal) is all 0."""
    xs = [_unexpanded(x.detach()) for x in xs if x.numel()]
    zeros = [z if z.numel() else z.new_zeros(1) for z in zeros]  # (an empty view is all 0)
    reduced = [v.double() for x in [*xs, *zeros] for v in torch.aminmax(x.detach())]
    bounds = torch.stack(reduced).tolist() if reduced else []
    cut = 2 * len(xs)
    lows, highs = bounds[0:cut:2], bounds[1:cut:2]
    limits = [mask_limit(x.dtype) for x in xs]
    ok = not xs or (not any(v != v for v in bounds[:cut])  # (NaN anywhere)
                    and all(lo > limit for lo, limit in zip(lows, limits))
                    and max(max(highs), -min(lows)) * parts <= MAX_TOTAL_SCORE)
    return ok, [lo == 0 and hi == 0 for lo, hi in zip(bounds[cut::2], bounds[cut + 1::2])]


def weights_as_given(xs: list[torch.Tensor], parts: int, diagonals: list[tuple[int, int]],
                     like: torch.Tensor) -> list[torch.Tensor] | None:
    """Pairwise weights for an update that multiplies each by its partner's marginal (0 for a
    partner that is no variable), without masking them entry by entry; None when some entry, used
    or not, is NaN, masked or out of range (:func:`in_range`): the caller masks them then.

    Each ``xs[i]`` comes back in ``like``'s dtype and device with its diagonal over the dimensions
    ``diagonals[i]`` set to 0 (the entries where the partner is the variable itself or its own
    counterpart, which no product with a marginal excludes), on a copy unless it is 0 already and
    no gradient is needed. One host synchronisation (bounds and diagonals in one reduction step).
    """
    views = [x.diagonal(0, *d) for x, d in zip(xs, diagonals)]
    ok, zero = in_range_and_zero(xs, parts, views)
    if not ok:
        return None
    out = []
    for x, d, clean in zip(xs, diagonals, zero):
        keep = clean and not (torch.is_grad_enabled() and x.requires_grad)
        w = x.to(like.device, like.dtype, copy=not keep)
        if not keep:
            w.diagonal(0, *d).zero_()
        out.append(w)
    return out


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
        if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")):
            return fn(*args, **kwargs)  # (nothing to disable: the contexts cost ~10 µs a call)
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]



def lengths_mask(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """``[batch_size, n]`` boolean mask, True at positions ``< lengths``."""
    return torch.arange(n, device=lengths.device) < lengths.unsqueeze(-1)



def plain_lengths(lengths, batch: int, top: int, device: torch.device) -> torch.Tensor | None:
    """The lengths as a long tensor when they are ``[batch]`` values in ``1..top`` (None: all
    ``top``), else None, read without a host synchronisation on the CPU: the compiled kernels'
    fast path, which leaves everything else to the full checks (and their messages)."""
    if lengths is None:
        return torch.full((batch,), top, dtype=torch.long, device=device)
    lengths = torch.as_tensor(lengths, device=device)
    integers = not (lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool)
    if lengths.shape != (batch,) or lengths.device.type != "cpu" or not integers:
        return None  # (fractional lengths and the like: the full checks refuse them by name)
    lengths = lengths.long()
    values = lengths.numpy()
    return lengths if values.min() >= 1 and values.max() <= top else None


def kernel_flagged(stats, parts: int) -> tuple[bool, float]:
    """``(refused, top)`` from a compiled kernel's statistics of some scores, ``[B, 3]``: NaN
    present 1/0, smallest and largest entry above :data:`NEG` per sentence (``+inf``, ``-inf``
    when there is none): whether :func:`check_scores` would refuse them (NaN, or ``parts * max
    |x| > MAX_TOTAL_SCORE``, an infinite score included; the caller then runs the full check for
    its message) and ``max |x|``. ``[3]`` statistics are taken as already reduced over the
    batch."""
    if stats.ndim == 1:
        nan, lo, hi = stats.tolist()
    elif not len(stats):  # (an empty batch)
        return False, 0.0
    else:
        (nan, _, hi), (_, lo, _) = stats.max(0).tolist(), stats.min(0).tolist()
    top = max(-lo, hi, lo, -hi) if lo <= hi else 0.0  # (the extremes of the sentences with entries)
    return nan > 0 or top * parts > MAX_TOTAL_SCORE, top
