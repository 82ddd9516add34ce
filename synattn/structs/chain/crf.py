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

Node marginals use :class:`ChainMarginals`, a custom autograd Function whose backward is
"backpropagating through forward-backward" in the signed log-space semifield (Kim et al. 2017,
§3.3 and appendix; Li and Eisner 2009). With ``C = 2`` this is the
segmentation attention of docs/methods.md §5.

On CPU tensors with numba installed (see :mod:`synattn.structs.backend`) everything runs in
compiled kernels (:mod:`synattn.structs.chain._kernels`: one loop per chain, chains over threads)
inside the same autograd Functions, and these then take the transfer matrices batch-first in
memory (``T`` is a ``[C, C, N-1, B]`` view of ``[B, N-1, C, C]`` storage); ``log Z`` of a chain
built from ``unary`` and ``transition`` reads the two directly, the transfer matrices being
formed only for its backward (:class:`~synattn.structs.chain.dp.FactoredChainLogPartition`), and
so does its Viterbi (:mod:`synattn.structs.chain._viterbi_kernels`).
Otherwise (CUDA, or no numba) two equivalent PyTorch schedules compute the forward and backward
vectors: a sequential scan (one step per position) and, for small label sets (``C <= 4``), a
parallel Hillis–Steele prefix scan over transfer matrices in ``O(log N)`` steps. All give the
same numbers up to rounding.
"""

from __future__ import annotations

import functools
from functools import cached_property

import torch

from .. import reference, registry
from ..arguments import flag, length_tensor, score_tensor
from ..backend import kernels, serial_if_small, use_numba, use_triton
from ..constants import NEG
from ..distribution import Decoding, ExactCRF, check_count
from ..scores import check_scores, float_dtype, fp32_inside, impossible_as_inf, lengths_mask, mask_impossible
from .dp import (
    PROMOTE_ABOVE,
    ChainLogPartition,
    ChainMarginals,
    FactoredChainLogPartition,
    _batch_first,
    _step_elements,
    chain_log_partition,
    forward_backward,
    pair_marginals,
    transfer_matrices,
    viterbi,
)

__all__ = ["ChainLogPartition", "ChainMarginals", "LinearChainCRF", "chain_log_partition",
           "forward_backward", "transfer_matrices"]


# ---------------------------------------------------------------------------------------------
# The distribution.
# ---------------------------------------------------------------------------------------------

class LinearChainCRF(ExactCRF, Decoding):
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
        start, end: ``[C]`` or ``[batch_size, C]`` scores of the first label and of the label at
            each chain's last position (supar's start/end transitions, ``trans[C, :C]`` and
            ``trans[:C, C]``); folded into ``unary`` (:attr:`unary` includes them).

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
                 scan: bool | None = None, start: torch.Tensor | None = None,
                 end: torch.Tensor | None = None):
        if (log_potentials is None) == (unary is None):
            raise ValueError("give either log_potentials [B, n-1, C, C] or unary [B, n, C] "
                             "(with transition [C, C])")
        scan = flag(scan, "scan", "LinearChainCRF", optional=True)
        raw = start is None and end is None  # (then masks are applied only where there are some)
        trans = None
        if log_potentials is not None:
            score_tensor(log_potentials, "log_potentials", "LinearChainCRF")
            if log_potentials.dim() != 4 or log_potentials.shape[-1] != log_potentials.shape[-2]:
                raise ValueError(f"log_potentials must be [B, n-1, C, C], got {tuple(log_potentials.shape)}")
            dtype = float_dtype(log_potentials)
            raw = raw and log_potentials.dtype == dtype
            edge = log_potentials if raw else mask_impossible(log_potentials.to(dtype), log_potentials.dtype)
            batch, n, C = edge.shape[0], edge.shape[1] + 1, edge.shape[-1]
            unary = edge.new_zeros(batch, n, C)
        else:
            assert unary is not None  # (exactly one of the two is given: checked above)
            if score_tensor(unary, "unary", "LinearChainCRF").dim() != 3:
                raise ValueError(f"unary must be [B, n, C], got {tuple(unary.shape)}")
            batch, n, C = unary.shape
            if transition is None:
                transition = unary.new_zeros(C, C)
            score_tensor(transition, "transition", "LinearChainCRF")
            if transition.shape[-2:] != (C, C) or transition.dim() not in (2, 3):
                raise ValueError(f"transition must be [C, C] or [B, C, C] with C={C}, "
                                 f"got {tuple(transition.shape)}")
            dtype = float_dtype(unary)
            raw = raw and unary.dtype == transition.dtype == dtype
            if not raw:
                unary = mask_impossible(unary.to(dtype), unary.dtype)
                transition = mask_impossible(transition.to(dtype), transition.dtype)
            trans = transition if transition.dim() == 3 else transition.unsqueeze(0)
            edge = trans.unsqueeze(1).expand(batch, n - 1, C, C)
        if C < 1:  # (the compiled kernels would index an empty label set)
            raise ValueError(f"LinearChainCRF: the number of labels C must be >= 1, got {C}")
        if lengths is None:
            lengths = torch.full((batch,), n, dtype=torch.long, device=unary.device)
        lengths = length_tensor(lengths, unary.device)
        if lengths.shape != (batch,) or bool((lengths < 1).any()) or bool((lengths > n).any()):
            raise ValueError(f"lengths must be [B] with values in 1..{n}, got {lengths.tolist()}")
        self.mask = lengths_mask(lengths, n)  # [B, n]
        if start is not None or end is not None:
            unary = _with_start_end(unary, lengths, start, end)
        self.unary, self.edge, self.lengths, self.scan = unary, edge, lengths, scan
        self.masked = check_scores([(unary, self.mask.unsqueeze(-1)),
                                    (edge, self.mask[:, 1:, None, None])], 2 * n,
                                   "unary/log_potentials/transition")
        """Whether some label or transition is masked (``<= NEG``): only then can a chain have no
        valid labelling."""
        if raw and self.masked:  # (scores as given so far, checked alike: now their masks as NEG)
            self.unary = mask_impossible(unary)
            self.edge = (mask_impossible(edge) if trans is None
                         else mask_impossible(trans).unsqueeze(1).expand(batch, n - 1, C, C))

    @classmethod
    def hmm(cls, transition: torch.Tensor, emission: torch.Tensor, init: torch.Tensor,
            observations: torch.Tensor, lengths: torch.Tensor | None = None) -> LinearChainCRF:
        """The posterior over hidden states of a hidden Markov model (Rabiner 1989) given
        ``observations``, as a chain CRF: ``log_partition`` is ``log p(observations)`` when the
        arguments are normalised log-probabilities, ``marginals`` the smoothed state posteriors.

        Args:
            transition: ``[C, C]`` ``log p(z_{i+1} = c | z_i = p)`` at ``[p, c]`` (from → to;
                torch-struct's ``LinearChainCRF.hmm`` takes the transpose, ``[c, p]``).
            emission: ``[V, C]`` ``log p(x_i = v | z_i = c)``.
            init: ``[C]`` ``log p(z_0 = c)``.
            observations: ``[batch_size, n]`` integers in ``0..V-1`` (any value past a length).
            lengths: as for the constructor.
        """
        emission = score_tensor(emission, "emission", "LinearChainCRF.hmm")
        observations = torch.as_tensor(observations, device=emission.device)
        if observations.dim() != 2 or observations.is_floating_point() or emission.dim() != 2:
            raise ValueError(f"LinearChainCRF.hmm: observations must be integers [B, n] and "
                             f"emission [V, C], got {tuple(observations.shape)} "
                             f"{observations.dtype} and {tuple(emission.shape)}")
        V, n = emission.shape[0], observations.shape[1]
        valid = (lengths_mask(length_tensor(lengths, emission.device), n)
                 if lengths is not None else torch.ones_like(observations, dtype=torch.bool))
        bad = valid & ((observations < 0) | (observations >= V))
        if bool(bad.any()):
            b, i = (int(j) for j in bad.nonzero()[0])
            raise ValueError(f"LinearChainCRF.hmm: observations[{b}, {i}] = "
                             f"{int(observations[b, i])} is outside 0..{V - 1} (the rows of emission)")
        unary = emission[torch.where(valid, observations, 0).long()]  # [B, n, C]
        return cls(unary=unary, transition=transition, lengths=lengths, start=init)

    def _valid(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, ...]`` (work dtype) in the potentials' dtype, zero for chains without a valid
        labelling."""
        return self._feasible_only(x.to(self.unary.dtype))

    @cached_property
    @fp32_inside
    def _potentials(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``u0 [C, B]`` and identity-padded transfer matrices ``T [C, C, n-1, B]`` for
        :attr:`edge_marginals` (:func:`_prepared`)."""
        return _prepared(self.unary, self.edge, self.mask, use_numba(self.unary, self.edge))

    def _log_partition(self) -> torch.Tensor:
        log_z = registry.log_partition("linear_chain", self.unary, self.edge, self.lengths, self.scan)
        return log_z.to(self.unary.dtype)

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[batch_size, n, C]`` node marginals ``p(y_i = c)``; differentiable (signed log
        backward). All 0 for a chain whose masks leave no labelling."""
        return self._valid(registry.marginals("linear_chain", self.unary, self.edge, self.lengths,
                                              self.scan))

    @cached_property
    @fp32_inside
    def edge_marginals(self) -> torch.Tensor:
        """``[batch_size, n-1, C, C]`` pair marginals ``p(y_i = p, y_{i+1} = c)``, zero past lengths.

        Equal to ``d log_partition / d log_potentials``; differentiable (with autograd through
        the PyTorch path when gradients are needed, else by a compiled kernel on CPU).
        """
        if use_triton(self.unary, self.edge):  # (Triton: the adjoint kernel's, backward on dual numbers)
            return self._valid(kernels("triton_kernels.chain").Marginals.apply(self.unary, self.edge,
                                                                               self.lengths)[1])
        u0, T = self._potentials
        if use_numba(u0, T) and not (torch.is_grad_enabled() and T.requires_grad):
            _, xi = kernels("chain._kernels_grad").edge_marginals(u0.t(), _batch_first(T), self.mask,
                                                  self.mask.new_ones(T.shape[-1], dtype=T.dtype),
                                                  pad_diagonal=False)
            return self._valid(xi)
        xi = pair_marginals(u0, T, self.scan)[1]  # [C, C, n-1, B]
        return self._valid(xi.permute(3, 2, 0, 1) * self.mask[:, 1:, None, None])

    @cached_property
    @fp32_inside
    def _best(self) -> tuple[torch.Tensor, torch.Tensor]:
        compiled = use_numba(self.unary, self.edge)
        with torch.no_grad():
            if use_triton(self.unary, self.edge):
                return kernels("triton_kernels.chain").viterbi(self.unary, self.edge, self.lengths)
            trans = _transition(self.edge.detach()) if compiled else None
            if trans is not None:  # (one transition matrix per chain: no transfer matrices formed)
                return kernels("chain._viterbi_kernels").viterbi_factored(self.unary, trans, self.mask)
            u0, T = transfer_matrices(self.unary.detach(), self.edge.detach(), self.mask,
                                      batch_innermost=not compiled)
            if compiled:
                return kernels("chain._kernels").viterbi(u0.t(), _batch_first(T), self.mask)
            return viterbi(u0, T)

    def _decoded(self, best: torch.Tensor) -> torch.Tensor:
        """The Viterbi labels ``[batch_size, n]`` with ``-1`` past each length."""
        return best.masked_fill(~self.mask, -1)

    @property
    def argmax(self) -> torch.Tensor:
        """``[batch_size, n]`` the best labelling (first best on ties), ``-1`` past each length,
        all ``-1`` where masks leave none (only possible when some score is masked)."""
        return self._decoded(self._best[1]) if not self.masked else super().argmax

    # --- constraints, sampling, k-best (the helpers live in decoding.py) -----------------------

    def constrain(self, labels: torch.Tensor | None = None,
                  allowed: torch.Tensor | None = None) -> LinearChainCRF:
        """The same CRF restricted to the labellings consistent with a partial annotation.

        Args:
            labels: ``[batch_size, n]`` known labels, ``-1`` where free.
            allowed: ``[batch_size, n, C]`` bool, False for labels to exclude at a position.

        Returns:
            A :class:`LinearChainCRF` over the consistent labellings (differentiable with respect
            to the original potentials; ``log_partition - constrain(...).log_partition`` is the
            partial-annotation loss).
        """
        from .decoding import constrained_unary

        return self._with_unary(constrained_unary(self.unary, labels, allowed))

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, batch_size, n]`` exact samples (forward filtering, backward sampling);
        ``-1`` padding, all ``-1`` where no labelling exists. Not differentiable."""
        check_count(count, 8 * self.lengths.numel() * self._num_positions() * (1 + self._num_choices()))
        from .decoding import ffbs

        return ffbs(self, count, generator)

    def _with_unary(self, unary: torch.Tensor) -> LinearChainCRF:
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

    def _semiring_program(self) -> tuple[str, list[torch.Tensor], tuple]:
        """``(program, potentials, extra)`` for :mod:`synattn.structs.semirings.programs`: the name
        of its generic program, the potentials ``[B, ...]`` a semiring converts, the other arguments."""
        return "chain", [self.unary, self.edge], (self.lengths,)

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor) -> LinearChainCRF:
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
        """``[batch_size]`` score of given labellings ``[batch_size, n]`` (entries past lengths ignored).

        Raises:
            ValueError: ``labels`` not an integer tensor ``[batch_size, n]``, or a label outside
                ``0..C-1`` within a sentence's length.
        """
        labels = self._check_labels(labels)
        labels = labels.clamp_min(0).masked_fill(~self.mask, 0)
        node = self.unary.gather(2, labels.unsqueeze(-1)).squeeze(-1)  # [B, n]
        C = self.edge.shape[-1]
        pair = self.edge.flatten(2).gather(2, (labels[:, :-1] * C + labels[:, 1:]).unsqueeze(-1))
        pair = pair.squeeze(-1)  # [B, n-1]
        zero = node.new_zeros(())
        total = (torch.where(self.mask, node, zero).sum(1)
                 + torch.where(self.mask[:, 1:], pair, zero).sum(1))
        return impossible_as_inf(total)

    def _check_labels(self, labels: torch.Tensor) -> torch.Tensor:
        batch, n, C = self.unary.shape
        labels = torch.as_tensor(labels, device=self.unary.device)
        if labels.shape != (batch, n) or labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"LinearChainCRF: labels must be an integer tensor [{batch}, {n}], got "
                             f"{labels.dtype} {tuple(labels.shape)}")
        bad = self.mask & ((labels < 0) | (labels >= C))
        if bool(bad.any()):
            b, i = (int(j) for j in bad.nonzero()[0])
            raise ValueError(f"LinearChainCRF: labels[{b}, {i}] = {int(labels[b, i])} is outside "
                             f"0..{C - 1} (the labels of position {i} of sentence {b})")
        return labels.long()


def _with_start_end(unary: torch.Tensor, lengths: torch.Tensor, start: torch.Tensor | None,
                    end: torch.Tensor | None) -> torch.Tensor:
    """``unary [B, n, C]`` with ``start`` added at position 0 and ``end`` at each chain's last
    position (each ``[C]`` or ``[B, C]``, masks allowed)."""
    batch, n, C = unary.shape
    last = torch.arange(n, device=unary.device) == (lengths - 1).unsqueeze(1)  # [B, n]
    first = torch.arange(n, device=unary.device) == 0
    for name, x, where in (("start", start, first.expand(batch, n)), ("end", end, last)):
        if x is None:
            continue
        score_tensor(x, name, "LinearChainCRF")
        if x.shape not in ((C,), (batch, C)):
            raise ValueError(f"LinearChainCRF: {name} must be [C] or [B, C] with C={C}, "
                             f"got {tuple(x.shape)}")
        x = mask_impossible(x.to(unary.dtype), x.dtype).expand(batch, C)
        unary = torch.where(where.unsqueeze(-1), mask_impossible(unary + x.unsqueeze(1)), unary)
    return unary


def _transition(edge: torch.Tensor) -> torch.Tensor | None:
    """``[B, C, C]``: the one transition matrix per chain of ``edge [B, n-1, C, C]`` when it is
    broadcast over the positions (stride 0) or there is at most one position, else None."""
    if edge.shape[1] > 1 and edge.stride(1) != 0:
        return None
    return edge[:, 0] if edge.shape[1] else edge.new_zeros(edge.shape[0], *edge.shape[2:])


def _prepared(unary: torch.Tensor, edge: torch.Tensor, mask: torch.Tensor,
              compiled: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``u0``, ``T`` (:func:`transfer_matrices`) in the layout of the compiled kernels or of the
    PyTorch code; on the latter, float64 for float32 potentials above :data:`PROMOTE_ABOVE` in
    magnitude."""
    if not compiled and unary.dtype == torch.float32:
        top = max((float(torch.where(x > NEG, x.detach().abs(), 0.0).max())
                   for x in (unary, edge) if x.numel()), default=0.0)
        if top > PROMOTE_ABOVE:
            unary, edge = unary.double(), edge.double()
    return transfer_matrices(unary, edge, mask, batch_innermost=not compiled)


# ---------------------------------------------------------------------------------------------
# The accelerations of the reference forward algorithm
# (:func:`synattn.structs.reference.linear_chain_log_partition`): signature
# ``(unary [B, n, C], edge [B, n-1, C, C], lengths [B], scan=None)``; ``scan`` picks the
# schedule of the PyTorch code and is ignored by the others.
# ---------------------------------------------------------------------------------------------

def _numba_log_partition(unary, edge, lengths, scan=None):
    mask = lengths_mask(lengths, unary.shape[1])
    if edge.shape[1] > 1 and edge.stride(1) == 0:  # one transition matrix per chain: not expanded
        return FactoredChainLogPartition.apply(unary, edge, mask)
    return ChainLogPartition.apply(*_prepared(unary, edge, mask, True), mask)


def _numba_marginals(unary, edge, lengths, scan=None):
    mask = lengths_mask(lengths, unary.shape[1])
    return ChainMarginals.apply(*_prepared(unary, edge, mask, True), mask, scan, True)


def _torch_log_partition(unary, edge, lengths, scan=None):
    u0, T = _prepared(unary, edge, lengths_mask(lengths, unary.shape[1]), False)
    with serial_if_small(_step_elements(T, scan), T.device):
        return chain_log_partition(u0, T, scan=scan)


def _torch_marginals(unary, edge, lengths, scan=None):
    mask = lengths_mask(lengths, unary.shape[1])
    return ChainMarginals.apply(*_prepared(unary, edge, mask, False), mask, scan, False)


def _reference_log_partition(unary, edge, lengths, scan=None):
    return reference.linear_chain_log_partition(unary, edge, lengths)


registry.set_reference("linear_chain", _reference_log_partition,
                       functools.partial(reference.marginals_by_autograd, _reference_log_partition))
registry.register("linear_chain", registry.Implementation(
    "numba", _numba_log_partition, _numba_marginals, applies=registry.numba_applies))
registry.register("linear_chain", registry.Implementation(
    "torch", _torch_log_partition, _torch_marginals))
# Triton (CUDA; :mod:`synattn.structs.triton_kernels.chain`, imported on first use) before PyTorch.
registry.register("linear_chain", registry.Implementation(
    "triton", lambda *args: kernels("triton_kernels.chain").registry_log_partition(*args),
    lambda *args: kernels("triton_kernels.chain").registry_marginals(*args),
    applies=registry.triton_applies), before="torch")
