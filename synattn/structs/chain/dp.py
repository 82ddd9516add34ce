"""The linear-chain dynamic programs on the PyTorch path and their autograd Functions:
forward-backward (sequential or by a parallel prefix scan), ``log Z``, node and pair marginals,
their backward, and Viterbi. :mod:`synattn.structs.chain.crf` documents the layout and recursions;
:class:`~synattn.structs.chain.LinearChainCRF` is the public interface.
"""

from __future__ import annotations

import torch

from ..backend import kernels, serial_if_small, use_numba
from ..constants import NEG
from ..semirings.log_max import logsumexp
from ..semirings.signed import signed_exp, signed_log, signed_logsumexp

PROMOTE_ABOVE = 100.0
"""On the PyTorch path, float32 potentials above this magnitude run in float64 inside: the log-space
sums of long chains (``n × |potential|``) lose too many bits in float32."""

RESCALE_EVERY = 32
"""The sequential log-partition shifts its forward vector back to 0 every this many positions."""

SCAN_MAX_LABELS = 4
"""Label sets up to this size use the parallel prefix scan (its work grows like ``C**3 log N``)."""


# ---------------------------------------------------------------------------------------------
# Log-space forward-backward. Internal layout: labels first, batch innermost (fast reductions
# and broadcasts on CPU): u0 [C, B], T [C(from), C(to), n-1, B], alpha and beta [C, n, B].
# ---------------------------------------------------------------------------------------------

def _log_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Log-space matrix product over the first two dims: ``LSE_q a[p, q, ...] + b[q, c, ...]``."""
    return logsumexp(a.unsqueeze(2) + b.unsqueeze(0), 1)  # [C, C, C, ...] -> [C, C, ...]


def _normalised(x: torch.Tensor, dim: int | tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """``x - m`` and ``m``, the max of ``x`` over the label dims ``dim`` (kept), taken as a constant.

    The recursions keep their log-vectors within a few potentials of 0 this way: float32 log-sums
    of long chains reach ``n × |potential|``, where one rounding step (``ulp(1000) ≈ 6e-5``)
    is already a relative error of the marginals. The shifts are constants to autograd: every
    quantity computed from the shifted vectors is invariant to them (locally normalised).
    """
    m = x.detach().amax(dim, keepdim=True)
    if torch.is_grad_enabled() and x.requires_grad:
        return x - m, m
    return x.sub_(m), m


def _prefix_products(T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inclusive log-space prefix products ``P[:, :, i] = T[:, :, 0] ⊗ .. ⊗ T[:, :, i]`` (Hillis–Steele),
    each normalised to a maximum of 0 (:func:`_normalised`).

    Args:
        T: ``[C, C, m, batch_size]`` transfer matrices.

    Returns:
        ``P - s`` ``[C, C, m, batch_size]`` and the shifts ``s`` ``[1, 1, m, batch_size]``.
    """
    shift = T.new_zeros(1, 1, *T.shape[2:])
    k = 1
    while k < T.shape[2]:
        product, top = _normalised(_log_matmul(T[:, :, :-k], T[:, :, k:]), (0, 1))
        T = torch.cat((T[:, :, :k], product), 2)
        shift = torch.cat((shift[:, :, :k], shift[:, :, :-k] + shift[:, :, k:] + top), 2)
        k *= 2
    return T, shift


def _alpha_beta_scan(u0: torch.Tensor, T: torch.Tensor) -> tuple[torch.Tensor, ...]:
    u0, s0 = _normalised(u0.clone(), 0)  # [C, B], [1, B]
    P, sp = _prefix_products(T)  # [C, C, n-1, B], [1, 1, n-1, B]
    alpha, sa = _normalised(logsumexp(u0[:, None, None] + P, 0), 0)  # [C, n-1, B], [1, n-1, B]
    alpha = torch.cat((u0.unsqueeze(1), alpha), 1)  # [C, n, B]
    sa = torch.cat((s0, sa[0] + sp[0, 0] + s0), 0)  # [n, B]
    # suffix products T[i] ⊗ .. ⊗ T[-1] are transposed prefix products of the reversed transposes
    Q, sq = _prefix_products(T.flip(2).transpose(0, 1))  # Q[:, :, j] = (T[-1-j] ⊗ .. ⊗ T[-1])^T
    beta, sb = _normalised(logsumexp(Q, 0).flip(1), 0)  # [C, n-1, B]: beta[:, i] for i < n-1
    sb = torch.cat((sb[0] + sq[0, 0].flip(0), u0.new_zeros(1, u0.shape[1])), 0)  # [n, B]
    return alpha, torch.cat((beta, torch.zeros_like(u0).unsqueeze(1)), 1), sa, sb


def _alpha_beta_sequential(u0: torch.Tensor, T: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # alpha left to right and beta right to left in the same steps: beta's recursion is alpha's
    # with the transposed transfer matrices in reverse order
    TT = torch.stack((T, T.flip(2).transpose(0, 1)))  # [2, C, C, n-1, B]
    v, top = _normalised(torch.stack((u0, torch.zeros_like(u0))), 1)  # [2, C, B]: alpha_0, beta_{n-1}
    steps, tops = [v], [top]
    for i in range(T.shape[2]):
        v, top = _normalised(logsumexp(v.unsqueeze(2) + TT[:, :, :, i], 1), 1)  # [2, C, B]
        steps.append(v)
        tops.append(top)
    alpha = torch.stack([step[0] for step in steps], 1)  # [C, n, B]
    beta = torch.stack([step[1] for step in reversed(steps)], 1)
    shifts = torch.cat(tops, 1).cumsum(1)  # [2, n, B]
    return alpha, beta, shifts[0], shifts[1].flip(0)


def _step_elements(T: torch.Tensor, scan: bool | None) -> int:
    """Elements of one step's largest temporary: ``[C, C, C, n-1, B]`` (scan), ``[2, C, C, B]``."""
    C, _, m, batch = T.shape
    if scan or (scan is None and C <= SCAN_MAX_LABELS):
        return C ** 3 * m * batch
    return 2 * C * C * batch


def normalised_forward_backward(u0: torch.Tensor, T: torch.Tensor,
                                scan: bool | None = None) -> tuple[torch.Tensor, ...]:
    """:func:`forward_backward` with every log-vector shifted to a maximum of 0 over the labels:
    ``alpha - sa``, ``beta - sb`` ``[C, n, batch_size]`` and the shifts ``sa``, ``sb``
    ``[n, batch_size]`` (constants to autograd). Marginals computed from the shifted vectors by
    normalising each position locally keep float32 precision on long chains with large scores."""
    if scan is None:
        scan = T.shape[0] <= SCAN_MAX_LABELS
    return (_alpha_beta_scan if scan else _alpha_beta_sequential)(u0, T)


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
    alpha, beta, sa, sb = normalised_forward_backward(u0, T, scan)
    return alpha + sa, beta + sb


def chain_log_partition(u0: torch.Tensor, T: torch.Tensor, scan: bool | None = None) -> torch.Tensor:
    """Differentiable log-partition ``[batch_size]`` of a chain in transfer-matrix form.

    With the scan schedule the transfer matrices are multiplied as a balanced tree.
    """
    if scan is None:
        scan = T.shape[0] <= SCAN_MAX_LABELS
    if not scan:
        # alpha is shifted back to a maximum of 0 every RESCALE_EVERY steps and the shifts summed
        # in float64: a float32 alpha of magnitude n × |potential| rounds every step (at N = 200,000
        # and 8 labels the unshifted sum drifted by 7e-5 of log Z from the compiled kernel's)
        alpha, shifts = u0, []
        for i in range(T.shape[2]):
            alpha = logsumexp(alpha.unsqueeze(1) + T[:, :, i], 0)
            if i % RESCALE_EVERY == RESCALE_EVERY - 1:
                alpha, top = _normalised(alpha, 0)
                shifts.append(top[0])
        log_z = logsumexp(alpha, 0)
        if not shifts:
            return log_z
        return (log_z.double() + torch.stack(shifts).double().sum(0)).to(log_z.dtype)
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
    the gradient of ``log Z`` with respect to ``u0`` and ``T``. Each position is normalised on
    its own (a softmax of the shifted log-vectors, :func:`normalised_forward_backward`), so no
    large log value is subtracted from another."""
    alpha, beta, _, _ = normalised_forward_backward(u0, T, scan)
    C = T.shape[0]
    pairs = (alpha[:, None, :-1] + T + beta[None, :, 1:]).flatten(0, 1)  # [C*C, n-1, B]
    return (alpha[:, 0] + beta[:, 0]).softmax(0), pairs.softmax(0).unflatten(0, (C, C))


# ---------------------------------------------------------------------------------------------
# Marginals with Kim et al. (2017)'s signed log-space backward (their appendix).
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
    ``compiled``: the numba kernels (True; ``T`` then a view of batch-first storage), the PyTorch
    code (False) or as :func:`~synattn.structs.backend.use_numba` says (None).
    On the compiled path (numba, CPU; ``scan`` is ignored) the forward is the same
    forward-backward, and the backward computes the same vector-Jacobian product in its
    expectation form (a covariance, see :mod:`synattn.structs.chain._kernels`): in float64 with
    probabilities only, it needs no semifield and a third of the exponentials. The tests check
    the two backwards against each other, autograd's double backward and finite differences.
    """

    @staticmethod
    def forward(ctx, u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor,
                scan: bool | None = None, compiled: bool | None = None) -> torch.Tensor:
        ctx.compiled = use_numba(u0, T) if compiled is None else compiled
        if ctx.compiled:
            mu, alpha, beta, log_z = kernels("chain._kernels").marginals(u0.t(), _batch_first(T), mask)
            ctx.save_for_backward(u0, T, mask, alpha, beta, log_z)
            return mu
        with serial_if_small(_step_elements(T, scan), T.device):
            alpha, beta, sa, sb = normalised_forward_backward(u0, T, scan)
        mu = (alpha + beta).softmax(0).permute(2, 1, 0) * mask.unsqueeze(-1)  # [B, N, C]
        log_z = logsumexp(alpha[:, -1], 0) + sa[-1]  # [B]
        alpha, beta = alpha + sa, beta + sb  # (the backward works with the true log-vectors)
        ctx.save_for_backward(u0, T, mask, alpha, beta, log_z, mu)
        return mu

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if torch.is_grad_enabled():  # a third derivative was asked for: autograd throughout
            u0, T, mask = ctx.saved_tensors[:3]
            return (*_differentiable_marginals_vjp(u0, T, mask, g), None, None, None)
        if ctx.compiled:
            _, T, mask, alpha, beta, log_z = ctx.saved_tensors
            grad_u0, grad_T = kernels("chain._kernels_grad").marginals_backward(_batch_first(T), mask, alpha, beta,
                                                                log_z, g)
            return grad_u0.t(), grad_T.permute(2, 3, 1, 0), None, None, None  # [C, B], [C, C, N-1, B]
        _, T, mask, alpha, beta, log_z, mu = ctx.saved_tensors
        g = (g * mask.unsqueeze(-1)).permute(2, 1, 0)  # [C, N, B]
        lg, sg = signed_log(g)
        d_alpha = lg + beta - log_z  # direct adjoint of alpha, times exp(-alpha); sign sg
        d_beta = lg + alpha - log_z
        n = alpha.shape[1]

        # adjoint of alpha, right to left: a[i-1] = d_alpha[i-1] ⊕ T[:, :, i-1] ⊗ a[i]
        a_logs, a_signs = [d_alpha[:, -1]], [sg[:, -1]]
        for i in range(n - 1, 0, -1):
            terms = torch.cat((T[:, :, i - 1] + a_logs[-1], d_alpha[:, i - 1, None]), 1)  # [C, C+1, B]
            signs = torch.cat((a_signs[-1].expand_as(T[:, :, i - 1]), sg[:, i - 1, None]), 1)
            log_abs, sign = signed_logsumexp(terms, signs, 1)  # [C, B]
            a_logs.append(log_abs)
            a_signs.append(sign)
        a_l, a_s = torch.stack(a_logs[::-1], 1), torch.stack(a_signs[::-1], 1)  # [C, N, B]

        # adjoint of beta, left to right: b[i] = d_beta[i] ⊕ b[i-1] ⊗ T[:, :, i-1]
        b_logs, b_signs = [d_beta[:, 0]], [sg[:, 0]]
        for i in range(1, n):
            terms = torch.cat((T[:, :, i - 1] + b_logs[-1].unsqueeze(1), d_beta[None, :, i]), 0)  # [C+1, C, B]
            signs = torch.cat((b_signs[-1].unsqueeze(1).expand_as(T[:, :, i - 1]), sg[None, :, i]), 0)
            log_abs, sign = signed_logsumexp(terms, signs, 0)  # [C, B]
            b_logs.append(log_abs)
            b_signs.append(sign)
        b_l, b_s = torch.stack(b_logs, 1), torch.stack(b_signs, 1)  # [C, N, B]

        lA, sA = signed_log(-(g * mu.permute(2, 1, 0)).sum((0, 1)))  # [B]
        # gradient of the transfer matrices: three signed terms, ⊕ then signexp
        base = alpha[:, None, :-1] + T  # [C, C, N-1, B]: alpha[p, i-1] ⊗ T[p, c, i-1]
        t1 = base + a_l[None, :, 1:]
        t2 = T + b_l[:, None, :-1] + beta[None, :, 1:]
        t3 = base + beta[None, :, 1:] - log_z + lA
        term_signs = (a_s[None, :, 1:].expand_as(T), b_s[:, None, :-1].expand_as(T), sA.expand_as(T))
        grad_T = signed_exp(*signed_logsumexp(torch.stack((t1, t2, t3)), torch.stack(term_signs), 0))
        # gradient of u0: alpha[:, 0] = u0
        l0, s0 = signed_logsumexp(
            torch.stack((a_l[:, 0] + alpha[:, 0], lA + alpha[:, 0] + beta[:, 0] - log_z)),
            torch.stack((a_s[:, 0], sA.expand_as(a_s[:, 0]))), 0)
        return signed_exp(l0, s0), grad_T, None, None, None


def _differentiable_marginals_vjp(u0: torch.Tensor, T: torch.Tensor, mask: torch.Tensor,
                                  g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
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
        ctx.save_for_backward(u0, T, mask)
        return kernels("chain._kernels").log_partition(u0.t(), _batch_first(T), mask)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        u0, T, mask = ctx.saved_tensors
        if torch.is_grad_enabled():
            node0, xi = pair_marginals(u0, T)
            return node0 * grad, xi * grad, None
        node0, xi = kernels("chain._kernels_grad").edge_marginals(u0.t(), _batch_first(T), mask, grad,
                                                  pad_diagonal=True)
        return node0.t(), xi.permute(2, 3, 1, 0), None  # [C, B], [C, C, N-1, B]


class FactoredChainLogPartition(torch.autograd.Function):
    """:class:`ChainLogPartition` for potentials ``unary [B, N, C]`` and ``edge [B, N-1, C, C]``
    whose ``edge`` is one transition matrix per chain broadcast over the positions (stride 0 on
    dim 1): the compiled forward reads ``unary`` and ``edge[:, 0]``, and the ``[B, N-1, C, C]``
    transfer matrices are formed only in the backward, which is :class:`ChainLogPartition`'s
    (edge marginals, or differentiable PyTorch operations under ``create_graph``) carried over
    ``T = edge + unary[:, 1:, None, :]`` (0 past each length, where the identity padding does not
    depend on the potentials).
    """

    @staticmethod
    def forward(ctx, unary: torch.Tensor, edge: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(unary, edge, mask)
        return kernels("chain._kernels").log_partition_factored(unary, edge[:, 0], mask)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        unary, edge, mask = ctx.saved_tensors
        u0, T = transfer_matrices(unary, edge, mask, batch_innermost=False)
        if torch.is_grad_enabled():
            node0, xi = pair_marginals(u0, T)  # [C, B], [C, C, N-1, B]
            node0, xi = node0.t() * grad[:, None], _batch_first(xi) * (grad[:, None] * mask[:, 1:])[..., None, None]
        else:
            node0, xi = kernels("chain._kernels_grad").edge_marginals(u0.t(), _batch_first(T), mask, grad,
                                                                      pad_diagonal=False)
        return torch.cat((node0.unsqueeze(1), xi.sum(-2)), 1), xi, None


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
    if batch_innermost:
        T = torch.where(mask[:, 1:, None, None], T, eye)
    else:  # (the CPU: overwriting the padded positions only is 2-4x faster than a where)
        T[~mask[:, 1:]] = eye
    T = T.permute(2, 3, 1, 0)  # [C, C, n-1, B]
    return unary[:, 0].t(), T.contiguous() if batch_innermost else T
