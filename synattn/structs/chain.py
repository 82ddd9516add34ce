"""Linear-chain CRF: log-partition, marginals (forward-backward) and Viterbi.

A labelling ``y = (y_0 .. y_{n-1})`` of a sentence of ``n`` positions with ``C`` labels scores

    score(y) = Σ_i unary[i, y_i] + Σ_{i<n-1} edge[i, y_i, y_{i+1}]

(**layout: ``edge[b, i, p, c]`` is the score of ``y_i = p`` followed by ``y_{i+1} = c``**, i.e.
from → to, like ``scores[b, head, dependent]`` for trees). Internally the potentials become an
initial vector ``u0 = unary[:, 0]`` and transfer matrices
``T[p, c, i-1, b] = edge[b, i-1, p, c] + unary[b, i, c]``, stored labels-first with the batch
innermost (``[C, C, N-1, B]``, fast on CPU); positions past a sentence's length get the identity
transfer matrix (``0`` on the diagonal, :data:`NEG` elsewhere),
so a padded chain has the same log-partition as the short one and no ``-inf`` is ever formed.

Node marginals use :class:`ChainMarginals`, a custom autograd Function whose backward is the
seed's "backpropagating through forward-backward" in the signed log-space semifield
(Kim et al. 2017, §3.3 and Kim et al. 2017; Li and Eisner 2009). With ``C = 2`` this is the
segmentation attention of docs/methods.md §5.

On CPU tensors with numba installed (see :mod:`synattn.structs.backend`) everything runs in
compiled kernels (:mod:`synattn.structs._chain_kernels`: one loop per chain, chains over threads)
inside the same autograd Functions, and these then take the transfer matrices batch-first in
memory (``T`` is a ``[C, C, N-1, B]`` view of ``[B, N-1, C, C]`` storage). Otherwise (CUDA, or no
numba) two equivalent PyTorch schedules compute the forward and backward vectors: a sequential
scan (one step per position) and, for small label sets (``C <= 4``), a parallel Hillis–Steele
prefix scan over transfer matrices in ``O(log N)`` steps. All give the same numbers up to rounding.
"""

from __future__ import annotations

from functools import cached_property

import torch

from .backend import use_numba
from .distribution import Decoding, StructDistribution
from .semiring import (IMPOSSIBLE, NEG, check_scores, fp32_inside, float_dtype, lengths_mask,
                       logsumexp, mask_impossible, serial_if_small, signed_exp, signed_log,
                       signed_logsumexp)

PROMOTE_ABOVE = 100.0
"""On the PyTorch path, float32 potentials above this magnitude run in float64 inside: the log-space
sums of long chains (``n × |potential|``) lose too many bits in float32."""

SCAN_MAX_LABELS = 4
"""Label sets up to this size use the parallel prefix scan (its work grows like ``C**3 log N``)."""


# ---------------------------------------------------------------------------------------------
# Log-space forward-backward. Internal layout: labels first, batch innermost (fast reductions
# and broadcasts on CPU): u0 [C, B], T [C(from), C(to), n-1, B], alpha and beta [C, n, B].
# ---------------------------------------------------------------------------------------------

def _log_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Log-space matrix product over the first two dims: ``LSE_q a[p, q, ...] + b[q, c, ...]``."""
    return logsumexp(a.unsqueeze(2) + b.unsqueeze(0), 1)  # [C, C, C, ...] -> [C, C, ...]


def _prefix_products(T: torch.Tensor) -> torch.Tensor:
    """Inclusive log-space prefix products ``P[:, :, i] = T[:, :, 0] ⊗ .. ⊗ T[:, :, i]`` (Hillis–Steele).

    Args:
        T: ``[C, C, m, batch_size]`` transfer matrices.

    Returns:
        ``[C, C, m, batch_size]``.
    """
    k = 1
    while k < T.shape[2]:
        T = torch.cat((T[:, :, :k], _log_matmul(T[:, :, :-k], T[:, :, k:])), 2)
        k *= 2
    return T


def _alpha_beta_scan(u0: torch.Tensor, T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    P = _prefix_products(T)  # [C, C, n-1, B]
    alpha = torch.cat((u0.unsqueeze(1), logsumexp(u0[:, None, None] + P, 0)), 1)  # [C, n, B]
    # suffix products T[i] ⊗ .. ⊗ T[-1] are transposed prefix products of the reversed transposes
    Q = _prefix_products(T.flip(2).transpose(0, 1))  # Q[:, :, j] = (T[-1-j] ⊗ .. ⊗ T[-1])^T
    beta = logsumexp(Q, 0).flip(1)  # [C, n-1, B]: beta[:, i] for i < n-1
    return alpha, torch.cat((beta, torch.zeros_like(u0).unsqueeze(1)), 1)  # [C, n, B]


def _alpha_beta_sequential(u0: torch.Tensor, T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # alpha left to right and beta right to left in the same steps: beta's recursion is alpha's
    # with the transposed transfer matrices in reverse order
    TT = torch.stack((T, T.flip(2).transpose(0, 1)))  # [2, C, C, n-1, B]
    v = torch.stack((u0, torch.zeros_like(u0)))  # [2, C, B]: alpha_0, beta_{n-1}
    steps = [v]
    for i in range(T.shape[2]):
        v = logsumexp(v.unsqueeze(2) + TT[:, :, :, i], 1)  # [2, C, B]
        steps.append(v)
    alpha = torch.stack([step[0] for step in steps], 1)  # [C, n, B]
    beta = torch.stack([step[1] for step in reversed(steps)], 1)
    return alpha, beta


def _step_elements(T: torch.Tensor, scan: bool | None) -> int:
    """Elements of one step's largest temporary: ``[C, C, C, n-1, B]`` (scan), ``[2, C, C, B]``."""
    C, _, m, batch = T.shape
    if scan or (scan is None and C <= SCAN_MAX_LABELS):
        return C ** 3 * m * batch
    return 2 * C * C * batch


def forward_backward(u0: torch.Tensor, T: torch.Tensor,
                     scan: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward log-vectors of a chain in transfer-matrix form.

    Args:
        u0: ``[C, batch_size]`` scores of the first label.
        T: ``[C, C, n-1, batch_size]`` transfer matrices (see the module docstring).
        scan: parallel prefix scan (True), sequential (False) or by label count (None).

    Returns:
        ``alpha, beta``, each ``[C, n, batch_size]``: ``alpha[c, i]`` is the log-sum of the
        prefixes ending in ``y_i = c``, ``beta[c, i]`` of the suffixes starting from it.
    """
    if scan is None:
        scan = T.shape[0] <= SCAN_MAX_LABELS
    return (_alpha_beta_scan if scan else _alpha_beta_sequential)(u0, T)


def chain_log_partition(u0: torch.Tensor, T: torch.Tensor, scan: bool | None = None) -> torch.Tensor:
    """Differentiable log-partition ``[batch_size]`` of a chain in transfer-matrix form.

    With the scan schedule the transfer matrices are multiplied as a balanced tree.
    """
    if scan is None:
        scan = T.shape[0] <= SCAN_MAX_LABELS
    if not scan:
        alpha = u0
        for i in range(T.shape[2]):
            alpha = logsumexp(alpha.unsqueeze(1) + T[:, :, i], 0)
        return logsumexp(alpha, 0)
    while T.shape[2] > 1:
        if T.shape[2] % 2:
            T = torch.cat((T[:, :, :-2], _log_matmul(T[:, :, -2:-1], T[:, :, -1:])), 2)
        T = _log_matmul(T[:, :, 0::2], T[:, :, 1::2])  # [C, C, m/2, B]
    if T.shape[2] == 1:
        u0 = logsumexp(u0.unsqueeze(1) + T[:, :, 0], 0)
    return logsumexp(u0, 0)


def pair_marginals(u0: torch.Tensor, T: torch.Tensor,
                   scan: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable marginals of the first label ``[C, B]`` and of label pairs
    ``[C, C, n-1, B]`` (``p(y_i = p, y_{i+1} = c)``) of a chain in transfer-matrix form: together,
    the gradient of ``log Z`` with respect to ``u0`` and ``T``."""
    alpha, beta = forward_backward(u0, T, scan)
    log_z = logsumexp(alpha[:, -1], 0)
    return ((alpha[:, 0] + beta[:, 0] - log_z).exp(),
            (alpha[:, None, :-1] + T + beta[None, :, 1:] - log_z).exp())


# ---------------------------------------------------------------------------------------------
# Marginals with the seed's signed log-space backward.
# ---------------------------------------------------------------------------------------------

class ChainMarginals(torch.autograd.Function):
    """Node marginals ``p(y_i = c)`` whose backward runs in the signed log-space semifield.

    Forward: forward-backward in log space, ``mu = exp(alpha + beta - A)``.

    Backward (Kim et al. 2017, "Backpropagating through Forward-Backward"): with ``g = dL/dmu``,
    the adjoints of ``alpha`` and ``beta`` scaled by ``exp(-alpha)``, ``exp(-beta)`` obey linear
    recursions of the same shape as forward-backward run in the opposite directions,

        â[i-1, p] = g[i-1,p] e^{beta[i-1,p]-A}  ⊕  ⊕_c T[p, c, i-1] ⊗ â[i, c]
        b̂[i, c]   = g[i,c] e^{alpha[i,c]-A}     ⊕  ⊕_p b̂[i-1, p] ⊗ T[p, c, i-1]

    whose values can be negative and as large as ``e^{-alpha}``: they are carried as
    ``(log|x|, sign x)`` pairs. The potential gradients are then

        dL/dT[p,c,i-1] = signexp(â[i,c] ⊗ alpha[i-1,p] ⊗ T  ⊕  b̂[i-1,p] ⊗ beta[i,c] ⊗ T
                                 ⊕  Ā ⊗ alpha[i-1,p] ⊗ T ⊗ beta[i,c] ⊗ (-A))

    with ``Ā = -Σ g mu`` the adjoint of the log-partition.

    Inputs are ``u0 [C, B]``, ``T [C, C, N-1, B]`` (identity-padded) and ``mask [B, N]`` (valid
    positions, a prefix of each chain); the output ``[B, N, C]`` is zero at padded positions.
    On the compiled path (numba, CPU; ``scan`` is ignored) the forward is the same
    forward-backward, and the backward computes the same vector-Jacobian product in its
    expectation form (a covariance, see :mod:`synattn.structs._chain_kernels`): in float64 with
    probabilities only, it needs no semifield and a third of the exponentials. The tests check
    the two backwards against each other, autograd's double backward and finite differences.
    """

    @staticmethod
    def forward(ctx, u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor,
                scan: bool | None = None) -> torch.Tensor:
        ctx.compiled = use_numba(u0, T)
        if ctx.compiled:
            from . import _chain_kernels

            mu, alpha, beta, log_z = _chain_kernels.marginals(u0.t(), _batch_first(T), mask)
            ctx.save_for_backward(u0, T, mask, alpha, beta, log_z)
            return mu
        with serial_if_small(_step_elements(T, scan), T.device):
            alpha, beta = forward_backward(u0, T, scan)
        log_z = logsumexp(alpha[:, -1], 0)  # [B]
        mu = (alpha + beta - log_z).exp_().permute(2, 1, 0) * mask.unsqueeze(-1)  # [B, N, C]
        ctx.save_for_backward(u0, T, mask, alpha, beta, log_z, mu)
        return mu

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if torch.is_grad_enabled():  # a third derivative was asked for: autograd throughout
            u0, T, mask = ctx.saved_tensors[:3]
            return (*_differentiable_marginals_vjp(u0, T, mask, g), None, None)
        if ctx.compiled:
            from . import _chain_kernels

            _, T, mask, alpha, beta, log_z = ctx.saved_tensors
            grad_u0, grad_T = _chain_kernels.marginals_backward(_batch_first(T), mask, alpha, beta,
                                                                log_z, g)
            return grad_u0.t(), grad_T.permute(2, 3, 1, 0), None, None  # [C, B], [C, C, N-1, B]
        _, T, mask, alpha, beta, log_z, mu = ctx.saved_tensors
        g = (g * mask.unsqueeze(-1)).permute(2, 1, 0)  # [C, N, B]
        lg, sg = signed_log(g)
        d_alpha = lg + beta - log_z  # direct adjoint of alpha, times exp(-alpha); sign sg
        d_beta = lg + alpha - log_z
        n = alpha.shape[1]

        # adjoint of alpha, right to left: a[i-1] = d_alpha[i-1] ⊕ T[:, :, i-1] ⊗ a[i]
        a_l, a_s = [d_alpha[:, -1]], [sg[:, -1]]
        for i in range(n - 1, 0, -1):
            terms = torch.cat((T[:, :, i - 1] + a_l[-1], d_alpha[:, i - 1, None]), 1)  # [C, C+1, B]
            signs = torch.cat((a_s[-1].expand_as(T[:, :, i - 1]), sg[:, i - 1, None]), 1)
            l, s = signed_logsumexp(terms, signs, 1)  # [C, B]
            a_l.append(l)
            a_s.append(s)
        a_l, a_s = torch.stack(a_l[::-1], 1), torch.stack(a_s[::-1], 1)  # [C, N, B]

        # adjoint of beta, left to right: b[i] = d_beta[i] ⊕ b[i-1] ⊗ T[:, :, i-1]
        b_l, b_s = [d_beta[:, 0]], [sg[:, 0]]
        for i in range(1, n):
            terms = torch.cat((T[:, :, i - 1] + b_l[-1].unsqueeze(1), d_beta[None, :, i]), 0)  # [C+1, C, B]
            signs = torch.cat((b_s[-1].unsqueeze(1).expand_as(T[:, :, i - 1]), sg[None, :, i]), 0)
            l, s = signed_logsumexp(terms, signs, 0)  # [C, B]
            b_l.append(l)
            b_s.append(s)
        b_l, b_s = torch.stack(b_l, 1), torch.stack(b_s, 1)  # [C, N, B]

        lA, sA = signed_log(-(g * mu.permute(2, 1, 0)).sum((0, 1)))  # [B]
        # gradient of the transfer matrices: three signed terms, ⊕ then signexp
        base = alpha[:, None, :-1] + T  # [C, C, N-1, B]: alpha[p, i-1] ⊗ T[p, c, i-1]
        t1 = base + a_l[None, :, 1:]
        t2 = T + b_l[:, None, :-1] + beta[None, :, 1:]
        t3 = base + beta[None, :, 1:] - log_z + lA
        signs = (a_s[None, :, 1:].expand_as(T), b_s[:, None, :-1].expand_as(T), sA.expand_as(T))
        grad_T = signed_exp(*signed_logsumexp(torch.stack((t1, t2, t3)), torch.stack(signs), 0))
        # gradient of u0: alpha[:, 0] = u0
        l0, s0 = signed_logsumexp(
            torch.stack((a_l[:, 0] + alpha[:, 0], lA + alpha[:, 0] + beta[:, 0] - log_z)),
            torch.stack((a_s[:, 0], sA.expand_as(a_s[:, 0]))), 0)
        return signed_exp(l0, s0), grad_T, None, None


def _differentiable_marginals_vjp(u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor,
                                  g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward of :class:`ChainMarginals` built from differentiable PyTorch operations
    (autograd's double backward of forward-backward), so that derivatives of every order are
    exact. Used only when a derivative of the backward itself is wanted."""
    with torch.enable_grad():
        node0, xi = pair_marginals(u0, T, scan=False)  # [C, B], [C, C, N-1, B]
        mu = torch.cat((node0.unsqueeze(1), xi.sum(0)), 1).permute(2, 1, 0)  # [B, N, C]
        mu = mu * mask.unsqueeze(-1)
        inputs = [t for t in (u0, T) if t.requires_grad]
        grads = iter(torch.autograd.grad(mu, inputs, g, create_graph=True, allow_unused=True))
        return tuple(next(grads) if t.requires_grad else None for t in (u0, T))


def _batch_first(T: torch.Tensor) -> torch.Tensor:
    """``[B, N-1, C, C]`` view of transfer matrices ``[C, C, N-1, B]`` (the kernels' layout)."""
    return T.permute(3, 2, 0, 1)


class ChainLogPartition(torch.autograd.Function):
    """Log-partition ``[B]`` by the compiled forward recursion; its gradient is the edge marginals.

    Inputs as :class:`ChainMarginals` (``u0 [C, B]``, identity-padded ``T [C, C, N-1, B]``,
    ``mask [B, N]``). The backward runs the compiled forward-backward; under ``create_graph``
    (a second derivative is wanted) it computes the same edge marginals with differentiable
    PyTorch operations instead.
    """

    @staticmethod
    def forward(ctx, u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from . import _chain_kernels

        ctx.save_for_backward(u0, T, mask)
        return _chain_kernels.log_partition(u0.t(), _batch_first(T), mask)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        u0, T, mask = ctx.saved_tensors
        if torch.is_grad_enabled():
            node0, xi = pair_marginals(u0, T)
            return node0 * grad, xi * grad, None
        from . import _chain_kernels

        node0, xi = _chain_kernels.edge_marginals(u0.t(), _batch_first(T), mask, grad,
                                                  pad_diagonal=True)
        return node0.t(), xi.permute(2, 3, 1, 0), None  # [C, B], [C, C, N-1, B]


# ---------------------------------------------------------------------------------------------
# Viterbi.
# ---------------------------------------------------------------------------------------------

def viterbi(u0: torch.Tensor, T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best labelling of each chain in transfer-matrix form (``u0 [C, B]``, ``T [C, C, n-1, B]``).

    Returns:
        ``scores [batch_size]`` and ``labels [batch_size, n]`` (the first best on ties).
    """
    delta, pointers = u0, []
    for i in range(T.shape[2]):
        delta, arg = (delta.unsqueeze(1) + T[:, :, i]).max(0)  # [C, B]
        pointers.append(arg)
    score, last = delta.max(0)
    labels = [last]
    for arg in reversed(pointers):
        labels.append(arg.gather(0, labels[-1].unsqueeze(0)).squeeze(0))
    return score, torch.stack(labels[::-1], 1)


# ---------------------------------------------------------------------------------------------
# The distribution.
# ---------------------------------------------------------------------------------------------

class LinearChainCRF(StructDistribution, Decoding):
    """A batch of linear-chain CRFs with per-sentence lengths.

    Besides ``log_partition``, ``marginals``, ``edge_marginals``, ``max``, ``argmax`` and
    ``score``: ``log_prob``, ``entropy``, ``cross_entropy`` and ``kl``
    (:class:`~synattn.structs.distribution.StructDistribution`).

    Give either ``log_potentials`` (edge form) or ``unary`` and ``transition``.

    Args:
        log_potentials: ``[batch_size, n-1, C, C]``; ``log_potentials[b, i, p, c]`` scores
            ``y_i = p, y_{i+1} = c`` (unaries folded in, as in torch-struct but from → to).
        lengths: ``[batch_size]`` sentence lengths in ``1..n``; default all ``n``.
        unary: ``[batch_size, n, C]`` label scores per position.
        transition: ``[C, C]`` or ``[batch_size, C, C]``; ``transition[p, c]`` scores ``p → c``.
        scan: force the parallel (True) or sequential (False) schedule of the PyTorch path;
            None picks by ``C``. The compiled kernels (numba, CPU) ignore it.

    Example:
        >>> crf = LinearChainCRF(unary=torch.randn(2, 5, 2), transition=torch.randn(2, 2),
        ...                      lengths=torch.tensor([5, 3]))
        >>> crf.marginals.shape          # p(y_i = c), zero past each length
        torch.Size([2, 5, 2])

    Results are float32 for half-precision inputs (the dynamic program always runs in float32
    or float64, also under autocast). ``argmax`` pads with ``-1``.
    """

    def __init__(self, log_potentials: torch.Tensor | None = None,
                 lengths: torch.Tensor | None = None, *,
                 unary: torch.Tensor | None = None, transition: torch.Tensor | None = None,
                 scan: bool | None = None):
        if (log_potentials is None) == (unary is None):
            raise ValueError("give either log_potentials [B, n-1, C, C] or unary [B, n, C] "
                             "(with transition [C, C])")
        if log_potentials is not None:
            if log_potentials.dim() != 4 or log_potentials.shape[-1] != log_potentials.shape[-2]:
                raise ValueError(f"log_potentials must be [B, n-1, C, C], got {tuple(log_potentials.shape)}")
            dtype = float_dtype(log_potentials)
            edge = mask_impossible(log_potentials.to(dtype), log_potentials.dtype)
            batch, n, C = edge.shape[0], edge.shape[1] + 1, edge.shape[-1]
            unary = edge.new_zeros(batch, n, C)
        else:
            if unary.dim() != 3:
                raise ValueError(f"unary must be [B, n, C], got {tuple(unary.shape)}")
            batch, n, C = unary.shape
            if transition is None:
                transition = unary.new_zeros(C, C)
            if transition.shape[-2:] != (C, C) or transition.dim() not in (2, 3):
                raise ValueError(f"transition must be [C, C] or [B, C, C] with C={C}, "
                                 f"got {tuple(transition.shape)}")
            dtype = float_dtype(unary)
            unary = mask_impossible(unary.to(dtype), unary.dtype)
            trans = mask_impossible(transition.to(dtype), transition.dtype)
            trans = trans if trans.dim() == 3 else trans.unsqueeze(0)
            edge = trans.unsqueeze(1).expand(batch, n - 1, C, C)
        if lengths is None:
            lengths = torch.full((batch,), n, dtype=torch.long, device=unary.device)
        lengths = torch.as_tensor(lengths, device=unary.device).long()
        if lengths.shape != (batch,) or bool((lengths < 1).any()) or bool((lengths > n).any()):
            raise ValueError(f"lengths must be [B] with values in 1..{n}, got {lengths.tolist()}")
        self.mask = lengths_mask(lengths, n)  # [B, n]
        self.unary, self.edge, self.lengths, self.scan = unary, edge, lengths, scan
        self.masked = check_scores([(unary, self.mask.unsqueeze(-1)),
                                    (edge, self.mask[:, 1:, None, None])], 2 * n,
                                   "unary/log_potentials/transition")
        """Whether some label or transition is masked (``<= NEG``): only then can a chain have no
        valid labelling."""

    @property
    def feasible(self) -> torch.Tensor:
        """``[batch_size]`` bool: the chain has a labelling that avoids every masked part."""
        return self.log_partition.detach() > -float("inf")

    def _valid(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, ...]`` (work dtype) in the potentials' dtype, zero for chains without a valid
        labelling."""
        x = x.to(self.unary.dtype)
        if not self.masked:
            return x
        return torch.where(self.feasible.view(-1, *[1] * (x.dim() - 1)), x, x.new_zeros(()))

    @cached_property
    @fp32_inside
    def _potentials(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``u0 [C, B]`` and identity-padded transfer matrices ``T [C, C, n-1, B]``; float64 on
        the PyTorch path for float32 potentials above :data:`PROMOTE_ABOVE` in magnitude."""
        compiled = use_numba(self.unary, self.edge)
        unary, edge = self.unary, self.edge
        if not compiled and unary.dtype == torch.float32:
            top = max((float(torch.where(x > NEG, x.detach().abs(), 0.0).max())
                       for x in (unary, edge) if x.numel()), default=0.0)
            if top > PROMOTE_ABOVE:
                unary, edge = unary.double(), edge.double()
        return transfer_matrices(unary, edge, self.mask, batch_innermost=not compiled)

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[batch_size]`` log-sum of the scores of all labellings; ``-inf`` (with a zero
        gradient) for a chain whose masks leave no labelling."""
        u0, T = self._potentials
        if use_numba(u0, T):
            log_z = ChainLogPartition.apply(u0, T, self.mask)
        else:
            with serial_if_small(_step_elements(T, self.scan), T.device):
                log_z = chain_log_partition(u0, T, scan=self.scan)
        log_z = log_z.to(self.unary.dtype)
        if not self.masked:
            return log_z
        return torch.where(log_z > IMPOSSIBLE, log_z, torch.full_like(log_z, -float("inf")))

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[batch_size, n, C]`` node marginals ``p(y_i = c)``; differentiable (signed log
        backward). All 0 for a chain whose masks leave no labelling."""
        u0, T = self._potentials
        return self._valid(ChainMarginals.apply(u0, T, self.mask, self.scan))

    @cached_property
    @fp32_inside
    def edge_marginals(self) -> torch.Tensor:
        """``[batch_size, n-1, C, C]`` pair marginals ``p(y_i = p, y_{i+1} = c)``, zero past lengths.

        Equal to ``d log_partition / d log_potentials``; differentiable (with autograd through
        the PyTorch path when gradients are needed, else by a compiled kernel on CPU).
        """
        u0, T = self._potentials
        if use_numba(u0, T) and not (torch.is_grad_enabled() and T.requires_grad):
            from . import _chain_kernels

            _, xi = _chain_kernels.edge_marginals(u0.t(), _batch_first(T), self.mask,
                                                  self.mask.new_ones(T.shape[-1], dtype=T.dtype),
                                                  pad_diagonal=False)
            return self._valid(xi)
        xi = pair_marginals(u0, T, self.scan)[1]  # [C, C, n-1, B]
        return self._valid(xi.permute(3, 2, 0, 1) * self.mask[:, 1:, None, None])

    @cached_property
    @fp32_inside
    def _viterbi(self) -> tuple[torch.Tensor, torch.Tensor]:
        compiled = use_numba(self.unary, self.edge)
        with torch.no_grad():
            u0, T = transfer_matrices(self.unary.detach(), self.edge.detach(), self.mask,
                                      batch_innermost=not compiled)
            if compiled:
                from . import _chain_kernels

                return _chain_kernels.viterbi(u0.t(), _batch_first(T), self.mask)
            return viterbi(u0, T)

    @property
    def max(self) -> torch.Tensor:
        """``[batch_size]`` score of the best labelling (not differentiable); ``-inf`` if none."""
        best = self._viterbi[0]
        return torch.where(best > IMPOSSIBLE, best, torch.full_like(best, -float("inf")))

    @property
    def argmax(self) -> torch.Tensor:
        """``[batch_size, n]`` best labelling (Viterbi), ``-1`` past each length and for a
        chain without a valid labelling."""
        none = (self.max == -float("inf")).unsqueeze(-1)
        return self._viterbi[1].masked_fill(~self.mask | none, -1)

    # --- constraints, sampling, k-best (the helpers live in chain_decoding.py) -----------------

    def constrain(self, labels: torch.Tensor | None = None,
                  allowed: torch.Tensor | None = None) -> "LinearChainCRF":
        """The same CRF restricted to the labellings consistent with a partial annotation.

        Args:
            labels: ``[batch_size, n]`` known labels, ``-1`` where free.
            allowed: ``[batch_size, n, C]`` bool, False for labels to exclude at a position.

        Returns:
            A :class:`LinearChainCRF` over the consistent labellings (differentiable with respect
            to the original potentials; ``log_partition - constrain(...).log_partition`` is the
            partial-annotation loss).
        """
        from .chain_decoding import constrained_unary

        return self._with_unary(constrained_unary(self.unary, labels, allowed))

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, batch_size, n]`` exact samples (forward filtering, backward sampling);
        ``-1`` padding, all ``-1`` where no labelling exists. Not differentiable."""
        from .chain_decoding import ffbs

        return ffbs(self, count, generator)

    def _with_unary(self, unary: torch.Tensor) -> "LinearChainCRF":
        """A CRF with the same transitions, lengths and schedule and new unaries (no checks)."""
        crf = LinearChainCRF.__new__(LinearChainCRF)
        crf.unary, crf.edge, crf.lengths, crf.scan, crf.mask = (unary, self.edge, self.lengths,
                                                                self.scan, self.mask)
        crf.masked = self.masked or check_scores([(unary, self.mask.unsqueeze(-1))], 1, "unary")
        return crf

    def _num_choices(self) -> int:
        return self.unary.shape[-1]

    def _num_positions(self) -> int:
        return self.unary.shape[1]

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor) -> "LinearChainCRF":
        crf = LinearChainCRF.__new__(LinearChainCRF)
        unary = self.unary.detach()[index]
        crf.unary = torch.where(allowed, unary, torch.full_like(unary, NEG))
        crf.edge, crf.lengths, crf.mask = self.edge.detach()[index], self.lengths[index], self.mask[index]
        crf.scan, crf.masked = self.scan, True
        return crf

    @staticmethod
    def _choice_marginals(crf, i: int) -> torch.Tensor:
        return crf.marginals[:, i]

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        zero = self.unary.new_zeros(())
        return [(torch.where(self.mask.unsqueeze(-1), self.unary, zero), self.marginals),
                (torch.where(self.mask[:, 1:, None, None], self.edge, zero), self.edge_marginals)]

    @fp32_inside
    def score(self, labels: torch.Tensor) -> torch.Tensor:
        """``[batch_size]`` score of given labellings ``[batch_size, n]`` (entries past lengths ignored)."""
        labels = labels.clamp_min(0).masked_fill(~self.mask, 0)
        node = self.unary.gather(2, labels.unsqueeze(-1)).squeeze(-1)  # [B, n]
        C = self.edge.shape[-1]
        pair = self.edge.flatten(2).gather(2, (labels[:, :-1] * C + labels[:, 1:]).unsqueeze(-1))
        pair = pair.squeeze(-1)  # [B, n-1]
        zero = node.new_zeros(())
        total = (torch.where(self.mask, node, zero).sum(1)
                 + torch.where(self.mask[:, 1:], pair, zero).sum(1))
        return torch.where(total > IMPOSSIBLE, total, torch.full_like(total, -float("inf")))


def transfer_matrices(unary: torch.Tensor, edge: torch.Tensor, mask: torch.Tensor,
                      batch_innermost: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``u0 [C, B]`` and ``T [C, C, n-1, B]`` (internal layout), identity past each length.

    Args:
        unary: ``[B, n, C]``; edge: ``[B, n-1, C, C]``; mask: ``[B, n]`` valid positions.
        batch_innermost: store ``T`` with the batch innermost (the PyTorch path); if False,
            ``T`` is a view of batch-first storage ``[B, n-1, C, C]`` (the compiled kernels).
    """
    C = unary.shape[-1]
    T = edge + unary[:, 1:, None, :]  # [B, n-1, C, C]
    eye = torch.full((C, C), NEG, dtype=T.dtype, device=T.device).fill_diagonal_(0.0)
    T = torch.where(mask[:, 1:, None, None], T, eye).permute(2, 3, 1, 0)  # [C, C, n-1, B]
    return unary[:, 0].t(), T.contiguous() if batch_innermost else T
