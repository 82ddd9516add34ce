"""Semi-Markov (segmental) CRF: labelled segmentations with segments of ``1..K-1`` positions
(Sarawagi and Cohen 2004), with torch-struct's ``SemiMarkovCRF`` semantics.

A sequence of ``n`` positions has a label at position 0 of its own; positions ``1..n-1`` are split
into contiguous segments of ``1..K-1`` positions, each with a label. A structure scores

    score(y) = Σ_segments edge[s, k, p, c]

for a segment covering ``s+1..s+k`` labelled ``c`` whose predecessor (the previous segment, or
position 0) is labelled ``p``. **Layout: ``log_potentials[b, s, k, p, c]``, ``[B, n-1, K, C, C]``,
from → to like** :class:`~synattn.structs.LinearChainCRF` (torch-struct's is ``[b, s, k, c, p]``:
:func:`~synattn.structs.convert.semi_markov_to_torch_struct`); ``k = 0`` is unused (it may hold
anything). With ``K = 2`` every segment has one position and the CRF is the linear chain whose
edge potentials are ``log_potentials[:, :, 1]``.

Structures are ``labels [B, n]`` as torch-struct's compact form: the label of position 0 and of
the last position of every segment, ``-1`` inside segments and past each length.

``log Z`` runs the forward recursion over segment ends
(:func:`synattn.structs.reference.semi_markov_log_partition`); the marginals are its gradient
(forward-backward in the compiled kernels of :mod:`synattn.structs.chain._semimarkov_kernels`, a
forward and an outside kernel in :mod:`synattn.structs.triton_kernels.semimarkov` for CUDA tensors,
autograd of the vectorised recursion on the PyTorch path). The max semiring with back-pointers gives the
best structure, forward filtering and backward sampling exact samples, Lawler's scheme the k best.
"""

from __future__ import annotations

import functools
from functools import cached_property

import torch

from .. import reference, registry
from ..arguments import length_tensor, score_tensor
from ..backend import kernels, use_triton
from ..constants import IMPOSSIBLE, NEG
from ..distribution import Decoding, ExactCRF, _gumbel_argmax, check_count
from ..scores import check_scores, float_dtype, fp32_inside, lengths_mask, mask_impossible
from ..semirings.log_max import logsumexp

__all__ = ["SemiMarkovCRF", "check_segment_scores", "segment_parts"]


def usable_segments(lengths: torch.Tensor, n: int, K: int) -> torch.Tensor:
    """``[B, n-1, K]`` bool: segment ``(s, k)`` lies within the sequence (``1 <= k``,
    ``s + k <= length - 1``)."""
    s = torch.arange(max(n - 1, 0), device=lengths.device).view(1, -1, 1)
    k = torch.arange(K, device=lengths.device).view(1, 1, -1)
    return (k >= 1) & (s + k <= lengths.view(-1, 1, 1) - 1)


def check_segment_scores(log_potentials: torch.Tensor, lengths: torch.Tensor | None = None,
                         what: str = "SemiMarkovCRF") -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The checked potentials of a :class:`SemiMarkovCRF`: ``(edge, lengths, masked)``.

    ``edge`` is ``log_potentials`` in float32/float64 with masks (``<= -1e9``, ``-inf``) and the
    segments no structure can use set to :data:`NEG`; ``masked`` says whether a usable segment
    is masked. ValueError for a wrong type or shape, ``K < 2``, ``C < 1``, lengths outside
    ``1..n``, NaN among the usable scores or scores beyond the supported range.
    """
    score_tensor(log_potentials, "log_potentials", what)
    if log_potentials.dim() != 5 or log_potentials.shape[-1] != log_potentials.shape[-2]:
        raise ValueError(f"{what}: log_potentials must be [B, n-1, K, C, C], got "
                         f"{tuple(log_potentials.shape)}")
    batch, m, K, C, _ = log_potentials.shape
    if K < 2 or C < 1:
        raise ValueError(f"{what}: log_potentials [B, n-1, K, C, C] needs K >= 2 (segments of "
                         f"1..K-1 positions) and C >= 1 labels, got K={K}, C={C}")
    n = m + 1
    if lengths is None:
        lengths = torch.full((batch,), n, dtype=torch.long, device=log_potentials.device)
    lengths = length_tensor(lengths, log_potentials.device)
    if lengths.shape != (batch,) or bool((lengths < 1).any()) \
            or bool((lengths > n).any()):
        raise ValueError(f"{what}: lengths must be [B] whole numbers in 1..{n}, got "
                         f"{lengths.tolist()}")
    lengths = lengths.long()
    edge = mask_impossible(log_potentials.to(float_dtype(log_potentials)), log_potentials.dtype)
    usable = usable_segments(lengths, n, K)[..., None, None]
    masked = check_scores([(edge, usable)], max(m, 1), f"{what}: log_potentials")
    return torch.where(usable, edge, torch.full_like(edge, NEG)), lengths, masked


def segment_parts(labels: torch.Tensor, lengths: torch.Tensor, K: int, C: int,
                  dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(parts [B, n-1, K, C, C], valid [B])``: the 0/1 segment indicators of compact labellings
    ``labels [B, n]`` (torch-struct's ``to_parts`` in synattn's layout), and whether each is a
    structure (position 0 and the last position labelled, no segment longer than ``K-1``)."""
    batch, n = labels.shape
    pos = torch.arange(n, device=labels.device)
    inside = pos < lengths[:, None]
    ends = (labels >= 0) & inside
    last = torch.where(ends, pos, -1).cummax(1).values  # [B, n]: last labelled position <= t
    prev = torch.cat((torch.full_like(last[:, :1], -1), last[:, :-1]), 1)  # < t
    width = pos - prev
    seg = ends & (pos >= 1)  # a segment ends at t
    ok = ends[:, 0] & ends.gather(1, (lengths - 1)[:, None]).squeeze(1)
    ok = ok & ~(seg & (width >= K)).any(1)
    parts = torch.zeros(batch, max(n - 1, 0), K, C, C, dtype=dtype, device=labels.device)
    b, t = (seg & (width < K)).nonzero(as_tuple=True)
    s = prev[b, t]
    parts[b, s, t - s, labels[b, s], labels[b, t]] = 1.0
    return parts, ok


# ---------------------------------------------------------------------------------------------
# The PyTorch path: the forward recursion, vectorised over the batch, the widths and the labels.
# ---------------------------------------------------------------------------------------------

def by_end(edge: torch.Tensor) -> torch.Tensor:
    """``[B, n, K, C, C]``: ``E[b, t, k] = edge[b, t-k, k]`` (the segment of ``k`` positions
    ending at ``t``), :data:`NEG` where there is none (``k = 0`` or ``t < k``)."""
    B, m, K, C, _ = edge.shape
    t = torch.arange(m + 1, device=edge.device).view(-1, 1)
    k = torch.arange(K, device=edge.device).view(1, -1)
    start = t - k
    ok = (k >= 1) & (start >= 0) & (start < m)
    if m == 0:
        return edge.new_full((B, 1, K, C, C), NEG)
    E = edge[:, start.clamp(0, m - 1), k.expand_as(start)]  # [B, n, K, C, C]
    return torch.where(ok.view(1, m + 1, K, 1, 1), E, torch.full_like(E, NEG))


def forward(edge: torch.Tensor, init: torch.Tensor | None = None,
            reduce=logsumexp) -> torch.Tensor:
    """``alpha [B, n, C]`` of the forward recursion under ``reduce`` (``logsumexp`` or a max)
    over the flattened ``(k, p)`` of each step, from position 0's scores ``init [B, C]``
    (default 0); differentiable."""
    E = by_end(edge)  # [B, n, K, C, C]
    B, n, K, C, _ = E.shape
    pad = E.new_full((B, C), NEG)
    init = E.new_zeros(B, C) if init is None else init
    alphas = [pad] * (K - 1) + [init]  # alpha_{-K+1..-1} impossible, alpha_0 = init
    for t in range(1, n):
        # window[k] = alpha_{t-k} for k = 0..K-1 (k = 0 is a placeholder: E[:, t, 0] is NEG)
        window = torch.stack([pad] + alphas[-1:-K:-1], 1)  # [B, K, C]
        terms = (window.unsqueeze(-1) + E[:, t]).flatten(1, 2)  # [B, K*C, C]
        alphas.append(reduce(terms, 1))
    return torch.stack(alphas[K - 1:], 1)


PROMOTE_FROM = 256
"""Float32 scores of chains of this many positions or more run in float64 on the PyTorch path:
the forward vectors reach ``n × |score|``, where float32 rounds every step at
``ulp(n × |score|)`` (at 2,000 positions ``log Z`` was off by 7e-7 of itself and the marginals
by 1e-3, at 20,000 by 4e-2)."""


def _torch_log_partition(edge: torch.Tensor, lengths: torch.Tensor,
                         init: torch.Tensor | None = None) -> torch.Tensor:
    if edge.dtype == torch.float32 and edge.shape[1] + 1 >= PROMOTE_FROM:
        return _torch_log_partition(edge.double(), lengths, None if init is None else init.double()).float()
    alpha = forward(edge, init)
    last = alpha.gather(1, (lengths - 1).view(-1, 1, 1).expand(-1, 1, alpha.shape[-1]))
    log_z = torch.logsumexp(last[:, 0], -1)
    return log_z + 0.0 * edge.sum((1, 2, 3, 4)) if edge.shape[1] == 0 else log_z  # (n = 1)


class SemiMarkovLogPartition(torch.autograd.Function):
    """``log Z [B]`` by the compiled forward recursion; its backward is the compiled
    forward-backward (the segment marginals), or under ``create_graph`` the differentiable
    PyTorch recursion's gradient."""

    @staticmethod
    def forward(ctx, edge: torch.Tensor, lengths: torch.Tensor, init: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(edge, lengths, init)
        return kernels("chain._semimarkov_kernels").log_partition(edge, lengths, init)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        edge, lengths, init = ctx.saved_tensors
        if torch.is_grad_enabled():
            mu = reference.marginals_by_autograd(_torch_log_partition, edge, lengths, init)
            return mu * grad.view(-1, 1, 1, 1, 1), None, None
        return kernels("chain._semimarkov_kernels").marginals(edge, lengths, init, grad), None, None


def _numba_log_partition(edge, lengths, init=None):
    init = edge.new_zeros(edge.shape[0], edge.shape[-1]) if init is None else init.detach()
    return SemiMarkovLogPartition.apply(edge, lengths, init)


registry.register("semi_markov", registry.Implementation(
    "numba", _numba_log_partition,
    functools.partial(reference.marginals_by_autograd, _numba_log_partition),
    applies=registry.numba_applies))
registry.register("semi_markov", registry.Implementation(
    "torch", _torch_log_partition,
    functools.partial(reference.marginals_by_autograd, _torch_log_partition)))
# Triton (CUDA; :mod:`synattn.structs.triton_kernels.semimarkov`, imported on first use) before PyTorch.
registry.register("semi_markov", registry.Implementation(
    "triton", lambda *args: kernels("triton_kernels.semimarkov").registry_log_partition(*args),
    lambda *args: kernels("triton_kernels.semimarkov").registry_marginals(*args),
    applies=registry.triton_applies), before="torch")


# ---------------------------------------------------------------------------------------------
# The distribution.
# ---------------------------------------------------------------------------------------------

class SemiMarkovCRF(ExactCRF, Decoding):
    """A batch of semi-Markov CRFs with per-sequence lengths (see the module docstring).

    Args:
        log_potentials: ``[B, n-1, K, C, C]``; ``log_potentials[b, s, k, p, c]`` scores a segment
            covering positions ``s+1..s+k`` (``1 <= k <= K-1``) labelled ``c`` after a
            predecessor labelled ``p``. Masks: any value ``<= -1e9`` (``-inf``).
        lengths: ``[B]`` positions per sequence in ``1..n``; default all ``n``.

    Example:
        >>> crf = SemiMarkovCRF(torch.randn(2, 5, 3, 2, 2), torch.tensor([6, 4]))
        >>> crf.argmax.shape, crf.marginals.shape
        (torch.Size([2, 6]), torch.Size([2, 5, 3, 2, 2]))

    Members as the other CRFs: ``log_partition`` (alias ``partition``), ``marginals`` (segment
    marginals, the layout of ``log_potentials``), ``max``, ``argmax``, ``score``, ``log_prob``,
    ``entropy``, ``cross_entropy``, ``kl``, ``sample``, ``kbest`` (``topk``, ``kmax``), ``feasible``.
    """

    def __init__(self, log_potentials: torch.Tensor, lengths: torch.Tensor | None = None):
        self.edge, self.lengths, self.masked = check_segment_scores(log_potentials, lengths)
        _, m, self.K, self.C, _ = self.edge.shape
        self.mask = lengths_mask(self.lengths, m + 1)  # [B, n]
        self.init: torch.Tensor | None = None
        """``[B, C]`` scores of position 0's label (None: 0); :data:`NEG` for labels excluded by
        k-best's restrictions."""

    def _log_partition(self) -> torch.Tensor:
        return registry.log_partition("semi_markov", self.edge, self.lengths, self.init).to(self.edge.dtype)

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[B, n-1, K, C, C]`` segment marginals ``p(segment (s, k) labelled c after p)``,
        differentiable; 0 for segments past a length and where no structure exists."""
        return self._feasible_only(registry.marginals("semi_markov", self.edge, self.lengths,
                                                      self.init).to(self.edge.dtype))

    @cached_property
    def _best(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Best score ``[B]`` and compact labels ``[B, n]`` (back-pointers over ``(k, p)``)."""
        with torch.no_grad():
            if use_triton(self.edge):
                return kernels("triton_kernels.semimarkov").best(self.edge, self.lengths, self.init)
            edge = self.edge.detach().double()
            init = None if self.init is None else self.init.double()
            alpha = forward(edge, init, reduce=lambda x, dim: x.amax(dim))  # [B, n, C]
            best = alpha.gather(1, (self.lengths - 1).view(-1, 1, 1).expand(-1, 1, self.C))[:, 0]
            score, last = best.max(-1)
            return score.to(self.edge.dtype), self._backtrack(edge, alpha, last[None])[0]

    def _backtrack(self, edge: torch.Tensor, alpha: torch.Tensor, label: torch.Tensor,
                   generator: torch.Generator | None = None, sample: bool = False) -> torch.Tensor:
        """``[S, B, n]`` compact labels: from label ``label [S, B]`` at each last position,
        right to left, the best (or, with ``sample``, a drawn) ``(k, p)`` of each segment."""
        E = by_end(edge)  # [B, n, K, C, C]
        B, n, K, C, _ = E.shape
        S = label.shape[0]
        # W[b, t, k, p, c] = alpha[b, t-k, p] + E[b, t, k, p, c]
        t, k = torch.arange(n).view(-1, 1), torch.arange(K).view(1, -1)
        prev = alpha[:, (t - k).clamp_min(0)]  # [B, n, K, C]
        W = (prev.unsqueeze(-1) + E).permute(0, 1, 4, 2, 3).flatten(3)  # [B, n, C, K*C]
        out = torch.full((S, B, n + 1), -1, dtype=torch.long)  # (column n: a sink for done rows)
        rows = torch.arange(B).expand(S, B)
        at = (self.lengths - 1).cpu().expand(S, B).clone()
        c = label.clone()
        for _ in range(n):
            out[torch.arange(S).view(-1, 1), rows, torch.where(at >= 0, at, n)] = c
            active = at > 0
            if not bool(active.any()):
                break
            w = W[rows, at.clamp_min(0), c]  # [S, B, K*C]
            choice = _gumbel_argmax(w, generator) if sample else w.argmax(-1)
            step, p = choice // C, choice % C
            c = torch.where(active, p, c)
            at = torch.where(active, at - step, -1)
        return out[..., :n]

    def _decoded(self, best: torch.Tensor) -> torch.Tensor:
        """The compact labels ``[B, n]`` on the lengths' device."""
        return best.to(self.lengths.device)

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, n]`` exact samples (forward filtering, backward sampling: the last label
        from ``alpha`` at the last position, then each segment's ``(k, p)`` given its end and
        label), compact form; all ``-1`` where no structure exists. Not differentiable."""
        count = check_count(count, 8 * self.lengths.numel() * self.edge.shape[1] * self.edge.shape[-1])
        with torch.no_grad():
            edge = self.edge.detach().double().cpu()
            alpha = forward(edge, None if self.init is None else self.init.double().cpu())
            last = alpha[torch.arange(len(self.lengths)), (self.lengths - 1).cpu()]  # [B, C]
            label = _gumbel_argmax(last.expand(count, *last.shape), generator)
            out = self._backtrack(edge, alpha, label, generator, sample=True)
            none = ~self.feasible.cpu()
            return out.masked_fill(none.view(1, -1, 1), -1).to(self.lengths.device)

    def parts(self, labels: torch.Tensor) -> torch.Tensor:
        """``[B, n-1, K, C, C]`` 0/1 indicators of the segments of compact ``labels [B, n]``."""
        return segment_parts(self._check_labels(labels), self.lengths, self.K, self.C,
                             self.edge.dtype)[0]

    def score(self, labels: torch.Tensor) -> torch.Tensor:
        """``[B]`` score of compact labellings ``[B, n]``; ``-inf`` for one that is no structure
        of the CRF (position 0 or the last position unlabelled, a segment longer than ``K-1``)
        or uses a masked segment. ValueError for a label outside ``-1..C-1``."""
        parts, ok = segment_parts(self._check_labels(labels), self.lengths, self.K, self.C,
                                  self.edge.dtype)
        total = (torch.where(parts > 0, self.edge, self.edge.new_zeros(()))).flatten(1).sum(1)
        ok = ok & (total > IMPOSSIBLE)
        return torch.where(ok, total, torch.full_like(total, -float("inf")))

    def _check_labels(self, labels: torch.Tensor) -> torch.Tensor:
        labels = torch.as_tensor(labels, device=self.edge.device)
        if labels.shape != self.mask.shape or labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"SemiMarkovCRF: labels must be an integer tensor "
                             f"{list(self.mask.shape)}, got {labels.dtype} {tuple(labels.shape)}")
        bad = self.mask & ((labels < -1) | (labels >= self.C))
        if bool(bad.any()):
            b, i = (int(j) for j in bad.nonzero()[0])
            raise ValueError(f"SemiMarkovCRF: labels[{b}, {i}] = {int(labels[b, i])} is outside "
                             f"-1..{self.C - 1} (-1: inside a segment)")
        return labels.long()

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.edge, self.marginals)]

    # --- k-best (Decoding): one choice per position, a label or C for "inside a segment" ------

    def _num_positions(self) -> int:
        return self.mask.shape[1]

    def _num_choices(self) -> int:
        return self.C + 1

    def _to_choices(self, labels: torch.Tensor) -> torch.Tensor:
        return torch.where((labels < 0) & self.mask.to(labels.device), self.C, labels)

    def _from_choices(self, choices: torch.Tensor) -> torch.Tensor:
        return torch.where(choices == self.C, -1, choices)

    def _semiring_program(self) -> tuple[str, list[torch.Tensor], tuple]:
        """``(program, potentials, extra)`` for :mod:`synattn.structs.semirings.programs`: the name
        of its generic program, the potentials ``[B, ...]`` a semiring converts, the other arguments."""
        if self.init is not None:
            return "semi_markov_init", [self.edge, self.init], (self.lengths,)
        return "semi_markov", [self.edge], (self.lengths,)

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor) -> SemiMarkovCRF:
        """The CRF of sequences ``index`` restricted to the structures whose choices
        ``allowed [M, n, C+1]`` allows: a segment ending at ``t`` labelled ``c`` needs
        ``allowed[t, c]``, position 0's label ``p`` needs ``allowed[0, p]`` (:attr:`init`), every position
        strictly inside a segment needs ``allowed[t, C]``."""
        edge = self.edge.detach()[index]  # [M, n-1, K, C, C]
        M, m, K, C, _ = edge.shape
        s = torch.arange(m, device=edge.device).view(-1, 1)
        k = torch.arange(K, device=edge.device).view(1, -1)
        end = (s + k).clamp_max(m)  # [n-1, K]
        keep = allowed[:, end, :C].unsqueeze(3)  # [M, n-1, K, 1, C]: the segment's label
        blocked = (~allowed[:, :, C]).long().cumsum(1)  # [M, n]
        # positions s+1..s+k-1 strictly inside: blocked[s+k-1] - blocked[s] == 0
        inner = blocked[:, (s + k - 1).clamp(0, m)] - blocked[:, s.expand(m, K)]
        keep = keep & ((inner == 0) | (k == 0)).view(M, m, K, 1, 1)
        crf = SemiMarkovCRF.__new__(SemiMarkovCRF)
        crf.edge = torch.where(keep, edge, torch.full_like(edge, NEG))
        crf.lengths, crf.mask, crf.masked = self.lengths[index], self.mask[index], True
        crf.K, crf.C = self.K, self.C
        init = edge.new_zeros(M, C) if self.init is None else self.init[index]
        crf.init = torch.where(allowed[:, 0, :C], init, torch.full_like(init, NEG))
        return crf
