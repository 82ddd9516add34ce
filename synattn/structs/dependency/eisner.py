"""Projective dependency CRF: Eisner's algorithm with an explicit outside pass.

Score layout as in :mod:`synattn.structs.dependency.arc_scores`: ``scores[b, h, d]`` is the arc head ``h``
→ dependent ``d``, index 0 is ROOT, words ``1..n``; marginals use the same layout.

The inside pass is Eisner's (1996) O(n³) algorithm over complete spans ``C`` and incomplete spans
``I`` in both directions (→: head at the left end; ←: head at the right end). For a span
``(i, j)``:

    I→(i, j) = s[i, j] + S(i, j),   I←(i, j) = s[j, i] + S(i, j),
    S(i, j)  = ⊕_{i<=r<j} C→(i, r) ⊗ C←(r+1, j)
    C→(i, j) = ⊕_{i<r<=j} I→(i, r) ⊗ C→(r, j)
    C←(i, j) = ⊕_{i<=r<j} C←(i, r) ⊗ I←(r, j)

and ``log Z = C→(0, n)``. With ``multiroot=False``, ROOT's complete spans ``C→(0, w)`` are made
impossible unless ``w = n``, so ROOT takes exactly one child (as in supar).

**Chart names** (the same in this module, in the compiled kernels of
:mod:`synattn.structs.dependency._eisner_kernels` and in the reference
:func:`synattn.structs.reference.eisner_log_partition`): ``C``/``I`` complete/incomplete span,
``R``/``L`` headed at its left end (arcs point right, ``→``) / at its right end (``←``), ``S``
the split sum; a prefix ``A_`` for a chart stored by span start, ``B_`` for one stored by span
end. So ``A_CR`` holds ``C→`` by span start, ``B_IL`` holds ``I←`` by span end.

Vectorisation: all charts live in one tensor ``K [2, 3, N+1, N+1, B]``, *width-major with the batch
innermost*: ``K[1] = A`` indexed by span start, ``A[ch, w, i]`` for the span ``(i, i+w)``, and
``K[0] = B`` indexed by span end with reversed width, ``B[ch, N-w, j]`` for ``(j-w, j)``
(torch-struct's two-chart trick). For one width, the terms of ``C←``, ``S`` and ``C→`` over all
split points and start positions are then the sum of two strided views ``[3, w, n, B]`` whose
inner ``[n, B]`` blocks are contiguous, reduced in one pass over the split dimension (fast on
CPU: never the innermost one); the one split of ``C←``/``C→`` that uses the incomplete span of
the same width is added afterwards. One Python iteration handles one span width.

The outside pass is written out: the adjoint of the inside pass, widths in decreasing order. It
keeps ``O(B·N²)`` memory instead of autograd's ``O(B·N³)`` and serves both the marginals (log
semiring) and the best tree (max semiring: the adjoint routed to the best split). Since the
marginals are the gradient of ``log Z``, their Jacobian is the (symmetric) Hessian of ``log Z``;
:class:`EisnerMarginals` therefore computes its backward ``H g`` as a *forward-mode* derivative of
the same inside-outside code in direction ``g``, again in ``O(B·N²)`` memory.

On CPU tensors the same passes run as compiled kernels (:mod:`synattn.structs.dependency._eisner_kernels`,
numba; one sentence per loop iteration, sentences spread over threads) when
:func:`~synattn.structs.backend.use_numba` says so; the autograd Functions below dispatch inside
``forward``/``backward``, so both backends are differentiable alike and give the same numbers.
"""

from __future__ import annotations

from functools import cached_property

import torch
import torch.nn.functional as F

from ..backend import kernels, serial_if_small, use_numba, use_triton
from ..constants import NEG
from ..distribution import check_count
from ..forward_mode import forward_derivative
from ..registry import Implementation, numba_applies, register, triton_applies
from ..scores import fp32_inside
from ..semirings.log_max import LogSemiring, MaxSemiring
from .arc_scores import ArcCRF, heads_from_arcs, usable_arcs

# (chart, channel) of each item in K (names in the module docstring): K[0] is B (by span end),
# K[1] is A (by span start). A holds C←, C→ and I→ shifted by one width (K[A_IR][w-1] holds
# width w); B holds I← shifted the other way (K[B_IL][N-w+1] holds width w), C← and C→. With
# this order the terms of [C←, S, C→] of one width are two strided views, and each write of one
# width is one view.
A_CL, A_CR, A_IR = (1, 0), (1, 1), (1, 2)
B_IL, B_CL, B_CR = (0, 0), (0, 1), (0, 2)


def _width_views(K: torch.Tensor, w: int, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Strided views of ``K`` (or of its adjoint) for the ``n = N+1-w`` spans of width ``w``.

    ``part="terms"``: ``a, b`` ``[3, w, n, B]`` with ``a + b`` the terms of ``[C←, S, C→]``
    over the split points (those of ``C←``, ``C→`` that use an incomplete span of width ``w``
    itself read it from the chart). ``part="out"``: where ``[I←, I→]`` ``[2, n, B]`` (in B and
    in A) and ``[C←, C→]`` ``[2, 2 (B, A), n, B]`` of width ``w`` are stored.
    Views are taken after the writes they depend on, as autograd requires.
    """
    _, _, L, _, batch = K.shape
    N, n = L - 1, L - w
    sc, sh, sw, si, _ = K.stride()
    if part == "terms":
        size, stride = (3, w, n, batch), (sh, sw, si, 1)
        return (K.as_strided(size, stride, sc),  # A[:, 0:w, 0:n]
                K.as_strided(size, stride, (N - w + 1) * sw + w * si))  # B[:, N-w+1:, w:]
    inc_b = B_IL[0] * sc + B_IL[1] * sh + (N - w + 1) * sw + w * si
    inc_a = A_IR[0] * sc + A_IR[1] * sh + (w - 1) * sw
    comp_b = B_CL[0] * sc + B_CL[1] * sh + (N - w) * sw + w * si
    comp_a = A_CL[0] * sc + A_CL[1] * sh + w * sw
    return (K.as_strided((2, n, batch), (inc_a - inc_b, si, 1), inc_b),
            K.as_strided((2, 2, n, batch), (sh, comp_a - comp_b, si, 1), comp_b))


def _diagonals(x: torch.Tensor, pad_rows: bool) -> torch.Tensor:
    """View ``[B, L(w), L(i)]`` of ``x [B, L, 2L]`` (``x[b, i, i+w]``) or ``[B, 2L, L]`` (``x[b, i+w, i]``)."""
    batch, L = x.shape[0], min(x.shape[1:])
    step = (L, L + 1) if pad_rows else (1, 2 * L + 1)
    return x.as_strided((batch, L, L), (2 * L * L, *step), x.storage_offset())


def to_width_major(scores: torch.Tensor) -> torch.Tensor:
    """``[B, L, L]`` arc scores → ``[2, L, L, B]``: ``[0, w, i] = s[i+w, i]`` (←), ``[1, w, i] = s[i, i+w]`` (→)."""
    L = scores.shape[-1]
    left = _diagonals(F.pad(scores, (0, 0, 0, L)), pad_rows=True)  # [B, L(w), L(i)]
    right = _diagonals(F.pad(scores, (0, L)), pad_rows=False)
    return torch.stack((left, right), -1).permute(3, 1, 2, 0).contiguous()  # [2, L(w), L(i), B]


def from_width_major(sd: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`to_width_major` for ``sd`` that is 0 at width 0 and past the chart."""
    L, batch = sd.shape[1], sd.shape[-1]
    left = sd.new_zeros(batch, 2 * L, L)
    _diagonals(left, pad_rows=True).copy_(sd[0].permute(2, 0, 1))
    right = sd.new_zeros(batch, L, 2 * L)
    _diagonals(right, pad_rows=False).copy_(sd[1].permute(2, 0, 1))
    return left[:, :L] + right[:, :, :L]  # [B, L, L]


def eisner_inside(sd: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                  semiring: type[LogSemiring] = LogSemiring) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Inside pass of Eisner's algorithm (works under autograd and forward-mode AD).

    Args:
        sd: ``[2, N+1, N+1, batch_size]`` width-major arc scores (:func:`to_width_major`).
        lengths: ``[batch_size]`` number of words (``1..N``).
        multiroot: allow several words to attach to ROOT.
        semiring: :class:`LogSemiring` (log-partition) or :class:`MaxSemiring` (best score).

    Returns:
        ``log_z [batch_size]``, the chart ``K [2, 3, N+1, N+1, batch_size]`` and, per width
        ``w``, the sums ``[3, N+1-w, batch_size]`` of ``[C←, S, C→]`` before the split that uses
        the width-``w`` incomplete span: what :func:`eisner_outside` needs.
    """
    _, L, _, batch = sd.shape
    N = L - 1
    K = torch.full((2, 3, L, L, batch), NEG, dtype=sd.dtype, device=sd.device)
    K[A_CL][0] = 0.0  # complete spans of width 0
    K[A_CR][0] = 0.0
    K[B_CL][N] = 0.0
    K[B_CR][N] = 0.0
    sums = [sd.new_zeros(0)]  # sums[w] = [C←, S, C→] of width w before adding the width-w I
    for w in range(1, L):
        n = L - w
        a, b = _width_views(K, w, "terms")
        out = semiring.sum(a + b, 1, overwrite=True)  # [3, n, B]
        sums.append(out)
        I = out[1] + sd[:, w, :n]  # noqa: E741 (Eisner's incomplete spans) [I←, I→] = S + [s(j→i), s(i→j)]
        _width_views(K, w, "out")[0].copy_(I)
        C = semiring.plus(out[0::2], I)  # add the split that uses I (C←(i,i) = C→(j,j) = 0)
        if not multiroot:  # ROOT's right complete span must cover the whole sentence
            C = C.masked_fill(root_span_mask(n, lengths != w), NEG)
        _width_views(K, w, "out")[1].copy_(C.unsqueeze(1).expand(2, 2, n, batch))
    log_z = K[A_CR][lengths, 0, torch.arange(batch, device=sd.device)]  # C→(0, n)
    return log_z, K, sums


def eisner_outside(sd: torch.Tensor, lengths: torch.Tensor, multiroot: bool, K: torch.Tensor,
                   sums: list[torch.Tensor], semiring: type[LogSemiring] = LogSemiring) -> torch.Tensor:
    """Outside pass: the adjoint of :func:`eisner_inside` for ``d log_z / d scores``.

    Args:
        sd, lengths, multiroot, semiring: as given to :func:`eisner_inside`.
        K, sums: what it returned.

    Returns:
        ``[2, N+1, N+1, batch_size]`` width-major arc marginals (log semiring) or arc
        indicators of the best tree (max semiring). All adjoints are ``>= 0``.
    """
    _, L, _, batch = sd.shape
    gK = torch.zeros_like(K)
    grad = torch.zeros_like(sd)
    gK[A_CR][lengths, 0, torch.arange(batch, device=sd.device)] = 1.0
    for w in range(L - 1, 0, -1):
        n = L - w
        ginc, gcomp = _width_views(gK, w, "out")
        gC = gcomp.sum(1)  # [2, n, B]: adjoints of C←, C→ (each is stored twice)
        inc, comp = _width_views(K, w, "out")
        C = comp[:, 1]  # [2, n, B]: C←, C→ as stored in A
        if not multiroot:  # masked C→(0, w): no adjoint; use the unmasked sum as the total
            dead = root_span_mask(n, lengths != w)
            gC = gC.masked_fill(dead, 0.0)
            C = torch.where(dead, semiring.plus(sums[w][0::2], inc), C)
        a, b = _width_views(K, w, "terms")
        t = a + b  # [3, w, n, B], now with the width-w I at split 0 of C← and split w-1 of C→
        semiring.backward_(t[0::2], C, gC, 1)
        # the incomplete spans of width w are complete now: their adjoints are score gradients
        gI = ginc + t.as_strided((2, n, batch), (2 * t.stride(0) + (w - 1) * t.stride(1), batch, 1))
        grad[:, w, :n] = gI
        semiring.backward_(t[1:2], sums[w][1:2], gI.sum(0, keepdim=True), 1)
        for view in _width_views(gK, w, "terms"):
            view += t
    return grad


def _step_elements(sd: torch.Tensor) -> int:
    """Elements of the largest per-width temporary ``[3, w, n, B]`` (at ``w = n = L/2``)."""
    return 3 * (sd.shape[1] // 2) ** 2 * sd.shape[-1]


def root_span_mask(n: int, dead: torch.Tensor) -> torch.Tensor:
    """``[2, n, B]`` True at ``C→(0, w)`` for the sentences in ``dead [B]``."""
    mask = torch.zeros(2, n, dead.shape[0], dtype=torch.bool, device=dead.device)
    mask[1, 0] = dead
    return mask


def eisner_marginals(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                     semiring: type[LogSemiring] = LogSemiring,
                     compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_z [B]`` and ``d log_z / d scores [B, N+1, N+1]`` by inside + explicit outside.

    ``compiled``: run the numba kernels (CPU tensors, no autograd or forward-mode AD through
    them) instead of the PyTorch code.
    """
    if compiled:
        return kernels("dependency._eisner_kernels").marginals(scores, lengths, multiroot,
                                                               viterbi=semiring is MaxSemiring)
    sd = to_width_major(scores)
    with serial_if_small(_step_elements(sd), sd.device):
        log_z, K, sums = eisner_inside(sd, lengths, multiroot, semiring)
        grad = from_width_major(eisner_outside(sd, lengths, multiroot, K, sums, semiring))
    # (items no tree uses get at most the smallest normal number from the outside pass)
    return log_z, torch.where(usable_arcs(lengths, grad.shape[-1]), grad, 0.0)


def marginals_vjp_by_autograd(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                              g: torch.Tensor) -> torch.Tensor:
    """``g^T d mu / d scores`` by autograd's double backward of the PyTorch inside pass, itself
    differentiable (the backward of every backend's marginals when a third derivative is asked for).
    On ``scores`` itself, not a detached copy: the result must stay a function of the scores."""
    log_z = eisner_inside(to_width_major(scores), lengths, multiroot)[0]
    (mu,) = torch.autograd.grad(log_z.sum(), scores, create_graph=True)
    mu = torch.where(usable_arcs(lengths, mu.shape[-1]), mu, 0.0)
    return torch.autograd.grad(mu, scores, g, create_graph=True)[0]


class EisnerMarginals(torch.autograd.Function):
    """Arc marginals; backward is the Hessian-vector product by forward-mode differentiation.

    ``mu = d log Z / d s`` and ``d mu / d s`` is the symmetric Hessian ``H`` of ``log Z``, so the
    vector-Jacobian product the backward needs, ``g^T H``, equals the Jacobian-vector product
    ``H g``: the forward-mode derivative of the inside-outside computation in direction ``g``.
    Both directions keep ``O(B·N²)`` memory. ``compiled``: the numba kernels (True), the PyTorch
    code (False) or as :func:`~synattn.structs.backend.use_numba` says (None).
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                compiled: bool | None = None) -> torch.Tensor:
        ctx.save_for_backward(scores, lengths)
        ctx.multiroot = multiroot
        ctx.compiled = use_numba(scores) if compiled is None else compiled
        return eisner_marginals(scores, lengths, multiroot, compiled=ctx.compiled)[1]

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths = ctx.saved_tensors
        if torch.is_grad_enabled():  # a third derivative was asked for: use autograd throughout
            return marginals_vjp_by_autograd(scores, lengths, ctx.multiroot, g), None, None, None
        if ctx.compiled:  # the same derivative, by inside-outside on dual numbers
            hg = kernels("dependency._eisner_kernels").marginals_jvp(scores, lengths, ctx.multiroot, g)
        else:
            hg = forward_derivative(lambda x: eisner_marginals(x, lengths, ctx.multiroot)[1],
                                    scores, g)
        return hg, None, None, None


class _EisnerLogPartition(torch.autograd.Function):
    """``log Z`` whose backward is the explicit outside pass (``O(B·N²)`` memory); ``compiled``
    as for :class:`EisnerMarginals`."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool,
                compiled: bool | None = None) -> torch.Tensor:
        ctx.multiroot = multiroot
        ctx.compiled = use_numba(scores) if compiled is None else compiled
        if ctx.compiled:  # the outside pass runs now, with the inside pass, if a backward may come
            if not ctx.needs_input_grad[0]:
                return kernels("dependency._eisner_kernels").log_partition(scores, lengths, multiroot)
            log_z, mu = kernels("dependency._eisner_kernels").marginals(scores, lengths, multiroot)
            ctx.save_for_backward(scores, lengths, mu)
            return log_z
        sd = to_width_major(scores)
        with serial_if_small(_step_elements(sd), sd.device):
            log_z, K, sums = eisner_inside(sd, lengths, multiroot)
        ctx.save_for_backward(scores, lengths, sd, K, *sums)
        return log_z

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        scores, lengths, *saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward requested: stay differentiable
            mu = EisnerMarginals.apply(scores, lengths, ctx.multiroot, ctx.compiled)
        elif ctx.compiled:
            (mu,) = saved
        else:
            sd, K, *sums = saved
            with serial_if_small(_step_elements(sd), sd.device):
                mu = from_width_major(eisner_outside(sd, lengths, ctx.multiroot, K, sums))
            mu = torch.where(usable_arcs(lengths, mu.shape[-1]), mu, 0.0)
        return mu * g[:, None, None], None, None, None


# The accelerations of the reference :func:`synattn.structs.reference.eisner_log_partition`: numba
# (CPU), Triton (CUDA; :mod:`synattn.structs.triton_kernels.eisner`, imported on first use), PyTorch.
register("projective", Implementation(
    "numba", lambda s, lengths, multiroot: _EisnerLogPartition.apply(s, lengths, multiroot, True),
    lambda s, lengths, multiroot: EisnerMarginals.apply(s, lengths, multiroot, True),
    applies=numba_applies))
register("projective", Implementation(
    "torch", lambda s, lengths, multiroot: _EisnerLogPartition.apply(s, lengths, multiroot, False),
    lambda s, lengths, multiroot: EisnerMarginals.apply(s, lengths, multiroot, False)))
register("projective", Implementation(
    "triton", lambda s, lengths, multiroot: kernels("triton_kernels.eisner").LogPartition.apply(s, lengths, multiroot),
    lambda s, lengths, multiroot: kernels("triton_kernels.eisner").Marginals.apply(s, lengths, multiroot),
    applies=triton_applies), before="torch")


def _sampled_semiring(generator: torch.Generator | None) -> type[LogSemiring]:
    """The log semiring whose ``backward_`` routes all of the adjoint to one term drawn with
    probability ``exp(t_k - sum)`` (Gumbel-max) instead of spreading it: the outside pass then
    expands a tree top-down, each span into a sampled split, exactly as the inside chart weighs
    them (torch-struct's ``SampledSemiring``)."""

    class Sampled(LogSemiring):
        @staticmethod
        def backward_(terms, total, grad, dim):
            u = torch.rand(terms.shape, generator=generator, dtype=terms.dtype,
                           device=terms.device)
            # (max's indices: the same first-best index as argmax, 3-5x faster on the CPU)
            pick = (terms - torch.log(-torch.log(u.clamp_min(1e-30)))).max(dim, keepdim=True).indices
            return terms.zero_().scatter_(dim, pick, grad.unsqueeze(dim))

    return Sampled


def eisner_sample(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool, count: int,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """``[count, B, N]`` heads of exact samples of projective trees: one inside pass (PyTorch
    path), then one outside pass over ``count`` copies of the charts with sampled routing."""
    with torch.no_grad():
        sd = to_width_major(scores.double())
        log_z, K, sums = eisner_inside(sd, lengths, multiroot)

        def rep(x: torch.Tensor) -> torch.Tensor:  # batch innermost: [..., count * B]
            return x.repeat(*[1] * (x.dim() - 1), count)

        arcs = eisner_outside(rep(sd), lengths.repeat(count), multiroot, rep(K),
                              [rep(x) for x in sums], _sampled_semiring(generator))
        arcs = from_width_major(arcs)  # [count*B, L, L]
        heads = heads_from_arcs(arcs, lengths.repeat(count))
        return heads.view(count, scores.shape[0], scores.shape[-1] - 1)


class DependencyCRF(ArcCRF):
    """Projective dependency trees (Eisner's algorithm), batched with per-sentence lengths.

    Arguments as :class:`~synattn.structs.dependency.arc_scores.ArcCRF`: ``scores [batch_size, n+1, n+1]``
    (``scores[b, h, d]`` for head ``h`` → dependent ``d``, ROOT = 0), ``lengths [batch_size]``
    and ``multiroot``.

    Example:
        >>> crf = DependencyCRF(torch.randn(2, 6, 6), torch.tensor([5, 3]), multiroot=False)
        >>> crf.marginals.shape     # p(h -> d), zero outside each sentence
        torch.Size([2, 6, 6])
        >>> crf.argmax.shape        # heads of words 1..n (0 = ROOT), -1 past each length
        torch.Size([2, 5])

    Results are float32 for half inputs (the dynamic program runs in float32 or float64, also
    under autocast). Eisner (1996); syntactic attention: Kim et al. (2017) §3.
    """

    structure = "projective"  # log_partition and marginals: synattn.structs.registry

    def _semiring_program(self) -> tuple[str, list[torch.Tensor], tuple]:
        """``(program, potentials, extra)`` for :mod:`synattn.structs.semirings.programs`: the name
        of its generic program, the potentials ``[B, ...]`` a semiring converts, the other arguments."""
        return "eisner", [self.scores], (self.lengths, self.multiroot)

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, batch_size, n]`` exact samples of projective trees as heads (``-1``
        padding, all ``-1`` where no tree exists), top-down from the inside chart, in float64:
        on CPU tensors with numba one compiled inside pass and a walk per sample that picks each
        span's split with its posterior weight (:func:`~._eisner_kernels.sample`), elsewhere
        :func:`eisner_sample` (one inside and one sampled outside pass in PyTorch). The uniforms
        come from ``generator``. Not differentiable."""
        if use_numba(self.scores):
            check_count(count, 8 * self.scores.shape[0] * 3 * self.scores.shape[-1])  # uniforms, heads
            heads = kernels("dependency._eisner_kernels").sample(self.scores.detach(), self.lengths,
                                                                 self.multiroot, count, generator)
        else:
            check_count(count, 8 * self.scores[..., 0, 0].numel() * self.scores.shape[-1] ** 2)  # chart copies
            heads = eisner_sample(self.scores.detach(), self.lengths, self.multiroot, count, generator)
        if self.masked:
            heads = heads.masked_fill(~self.feasible.view(1, -1, 1), -1)
        return heads

    @cached_property
    @fp32_inside
    def _best(self) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            if use_triton(self.scores):
                return kernels("triton_kernels.eisner").best_tree(self.scores, self.lengths, self.multiroot)
            return eisner_marginals(self.scores, self.lengths, self.multiroot, MaxSemiring,
                                    compiled=use_numba(self.scores))
