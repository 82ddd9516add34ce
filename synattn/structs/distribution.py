"""What every structured distribution derives from ``log_partition`` and its marginals.

A CRF over structures ``y`` with ``score(y) = <θ, φ(y)>`` (``φ(y)`` the 0/1 indicators of the
parts of ``y``: arcs, labels, label pairs, spans) is an exponential family: ``log Z(θ)`` is its
log-partition and the marginals ``μ = E[φ(y)] = ∇ log Z`` its mean parameters (Wainwright and
Jordan 2008, §3). Hence, with no further dynamic program,

    log p(y)        = score(y) - log Z
    H(p)            = log Z_p - <θ_p, μ_p>
    H(p, q)         = log Z_q - <θ_q, μ_p>        (cross-entropy, for the same structures)
    KL(p || q)      = H(p, q) - H(p)

(the same identities as torch-struct's ``StructDistribution``; Li and Eisner 2009 compute the
entropy with an expectation semiring instead). All are differentiable through the marginals'
backward (the Hessian of ``log Z``), so their derivatives are exact to the order the marginals
support.

A class mixes in :class:`StructDistribution` and provides ``log_partition [B]``,
``score(structure) [B]`` and :meth:`StructDistribution._parts`; one whose ``log Z`` and best
structure come from one exact pass each mixes in :class:`ExactCRF`, which derives
``log_partition``, ``feasible``, ``max`` and ``argmax`` from them.

Conventions: masked parts (scores ``<= NEG``, e.g. ``-inf``) have ``θ = NEG`` and marginal 0;
they are left out of the inner products (``NEG · 0`` would still be 0, but their gradient would
not). For a sentence without a valid structure (``log Z = -inf``) ``log_prob`` is ``-inf`` and
``entropy``, ``cross_entropy`` and ``kl`` are 0; ``cross_entropy`` and ``kl`` are ``+inf``
where ``p`` puts mass on a part that ``q`` masks (a marginal above 64 machine epsilons, so that
rounding does not count), or ``q`` has no structure at all. Entropies
and divergences are clamped at 0 (they can come out at ``-1e-16``-ish by rounding).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

from synattn.limits import check_memory

from .arguments import count as whole_count
from .constants import NEG
from .kbest import lawler
from .scores import fp32_inside, impossible_as_inf


def _inner(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``Σ θ μ`` per batch element over ``(θ [B, ...], μ [B, ...])`` pairs, masked parts left out."""
    total = torch.zeros(())
    for theta, mu in parts:
        theta = torch.where(theta > NEG, theta, theta.new_zeros(()))
        total = total + (theta * mu).flatten(1).sum(1)
    return total


class PeerNames:
    """Mixin: torch-struct's and supar's names for members every CRF has, so that code written
    for them runs: ``partition`` (``log_partition``), ``mode`` (``argmax``), ``kmax(k)`` (the
    ``k`` best scores ``[k, B]``, torch-struct's layout) and ``topk(k)`` (the ``k`` best
    structures ``[k, B, ...]`` in synattn's structure layout, not torch-struct's parts)."""

    if TYPE_CHECKING:  # what every CRF provides (for the type checker only)
        @property
        def log_partition(self) -> torch.Tensor: ...

        @property
        def argmax(self) -> Any: ...  # a tensor, or a tuple of them (SentCFG)

        @property
        def entropy(self) -> torch.Tensor: ...

        def kbest(self, k: int) -> tuple[torch.Tensor, Any]: ...

    @property
    def partition(self) -> torch.Tensor:
        """``[B]`` ``log Z``: :attr:`log_partition` under torch-struct's name."""
        return self.log_partition

    @property
    def perplexity(self) -> torch.Tensor:
        """``[B]`` ``exp(entropy)``: the number of equally likely structures with the same
        entropy (supar's ``perplexity``, ``torch.distributions``' ``exp(entropy())``); 1 for a
        sentence without a structure (entropy 0). Differentiable where ``entropy`` is."""
        return self.entropy.exp()

    @property
    def mode(self) -> torch.Tensor:
        """The best structure: ``argmax`` under ``torch.distributions``' name."""
        return self.argmax

    def kmax(self, k: int) -> torch.Tensor:
        """``[k, B]`` scores of the ``k`` best structures (``kbest(k)[0]`` transposed)."""
        return self.kbest(k)[0].transpose(0, 1)

    def topk(self, k: int) -> Any:
        """``[k, B, ...]`` the ``k`` best structures (``kbest(k)[1]`` with ``k`` first; each
        tensor of a structure given as several, such as :class:`~synattn.structs.SentCFG`'s
        counts)."""
        structures = self.kbest(k)[1]
        if isinstance(structures, tuple):
            return tuple(s.transpose(0, 1) for s in structures)
        return structures.transpose(0, 1)

    # --- semirings (synattn.structs.semirings.programs) ----------------------------------------

    def run(self, semiring, other=None, *, compiled: bool = True) -> torch.Tensor:
        """The value of ``semiring``'s sum over all structures (``[B]``; ``[k, B]`` for k-max):
        :func:`synattn.structs.semirings.programs.run`."""
        from .semirings.programs import run
        return run(self, semiring, other, compiled=compiled)

    def semiring_marginals(self, semiring, other=None, *, compiled: bool = True) -> torch.Tensor:
        """The gradient of :meth:`run`'s value, in the layout of ``marginals``:
        :func:`synattn.structs.semirings.programs.marginals`."""
        from .semirings.programs import marginals
        return marginals(self, semiring, other, compiled=compiled)

    @property
    def count(self) -> torch.Tensor:
        """``[B]`` float64: the number of structures that avoid every masked part (torch-struct's
        ``count``): :func:`synattn.structs.semirings.programs.count`."""
        from .semirings.programs import count
        return count(self)

    def gumbel_crf(self, temperature: float = 1.0) -> torch.Tensor:
        """A sample's 0/1 parts (layout of ``marginals``) whose gradient is the straight-through
        Gumbel-softmax at ``temperature`` (Fu et al. 2020; torch-struct's ``gumbel_crf``): the
        marginals under :func:`~synattn.structs.semirings.sampling.GumbelCRFSemiring`."""
        from .semirings.programs import marginals
        from .semirings.sampling import GumbelCRFSemiring
        return marginals(self, GumbelCRFSemiring(temperature), create_graph=True)


class LabelledByShape:
    """Mixin of the classes whose scores may carry a trailing label dimension (dependency arcs
    ``[B, n+1, n+1, R]``, spans ``[B, N, N, NT]``): 4-d scores make the instance one of the
    class's labelled version, which :meth:`_labelled_version` names (a subclass of the class)."""

    def __new__(cls, scores=None, *args, **kwargs):
        if isinstance(scores, torch.Tensor) and scores.dim() == 4 and not hasattr(cls, "_base"):
            cls = cls._labelled_version()
        return super().__new__(cls)

    @classmethod
    def _labelled_version(cls) -> type:
        """The labelled subclass of ``cls`` (labelled ones carry ``_base``, the unlabelled class)."""
        raise NotImplementedError


class StructDistribution(PeerNames):
    """Mixin: ``log_prob``, ``entropy``, ``cross_entropy`` and ``kl`` from exponential-family
    identities (see the module docstring)."""

    lengths: torch.Tensor

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(θ, μ)`` pairs ``[B, ...]``: every part's log-potential (0 where no structure can
        use it, :data:`~synattn.structs.constants.NEG` where masked) and its marginal, so that
        ``score(y) = Σ θ φ(y)`` and ``μ = E[φ(y)]``."""
        raise NotImplementedError

    def score(self, structure: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, structure: torch.Tensor) -> torch.Tensor:
        """``[B]`` ``log p(structure)``; ``-inf`` for a structure with a masked part, or where
        there is no valid structure. Differentiable (its gradient is ``φ(y) - μ``)."""
        score, log_z = self.score(structure), self.log_partition
        out = score - torch.where(log_z > -float("inf"), log_z, log_z.new_zeros(()))
        return torch.where((score > -float("inf")) & (log_z > -float("inf")), out,
                           torch.full_like(out, -float("inf")))

    @property
    def entropy(self) -> torch.Tensor:
        """``[B]`` entropy ``H(p) = log Z - <θ, μ>`` in nats; 0 without a valid structure."""
        log_z = self.log_partition
        ok = log_z > -float("inf")
        h = torch.where(ok, log_z, log_z.new_zeros(())) - _inner(self._parts())
        return torch.where(ok, h.clamp_min(0.0), h.new_zeros(()))

    def cross_entropy(self, other: StructDistribution) -> torch.Tensor:
        """``[B]`` cross-entropy ``H(p, q) = -E_p[log q(y)] = log Z_q - <θ_q, μ_p>`` with ``p =
        self``, ``q = other`` (the same class and shapes)."""
        self._check_other(other)
        log_zq = other.log_partition
        mine = self._parts()
        theirs = other._parts()
        inner = _inner([(tq, mp) for (tq, _), (_, mp) in zip(theirs, mine)])
        ce = torch.where(log_zq > -float("inf"), log_zq, log_zq.new_zeros(())) - inner
        # p's mass on parts that q masks (or no structure under q): q(y) = 0 for p-likely y
        lost = log_zq == -float("inf")
        for (tq, _), (_, mp) in zip(theirs, mine):
            lost = lost | ((tq <= NEG) & (mp > 64 * torch.finfo(mp.dtype).eps)).flatten(1).any(1)
        ce = torch.where(lost, torch.full_like(ce, float("inf")), ce)
        return torch.where(self.log_partition > -float("inf"), ce, ce.new_zeros(()))

    def kl(self, other: StructDistribution) -> torch.Tensor:
        """``[B]`` ``KL(p || q) = H(p, q) - H(p)`` with ``p = self``, ``q = other``."""
        d = self.cross_entropy(other) - self.entropy
        return torch.where(torch.isinf(d), d, d.clamp_min(0.0))

    def _check_other(self, other: StructDistribution) -> None:
        if type(other) is not type(self):
            raise TypeError(f"{type(self).__name__}: cross_entropy/kl need another "
                            f"{type(self).__name__}, got {type(other).__name__}")
        for (a, _), (b, _) in zip(self._parts(), other._parts()):
            if a.shape != b.shape:
                raise ValueError(f"{type(self).__name__}: cross_entropy/kl need the same shapes, "
                                 f"got {tuple(a.shape)} and {tuple(b.shape)}")
        if getattr(self, "multiroot", None) != getattr(other, "multiroot", None):
            raise ValueError(f"{type(self).__name__}: cross_entropy/kl need the same multiroot")
        if not torch.equal(self.lengths, other.lengths):
            raise ValueError(f"{type(self).__name__}: cross_entropy/kl need the same lengths")


class ExactCRF(StructDistribution):
    """Mixin: what a CRF derives from its two exact passes (as torch-struct's distributions derive
    every quantity from one semiring sum): ``log_partition``, ``feasible``, ``max`` and ``argmax``.

    The class gives ``masked`` (whether some usable part is masked: only then can a batch
    element have no structure), ``_log_partition()`` (``[B]`` ``log Z`` as its dynamic program
    returns it, at most :data:`~synattn.structs.constants.IMPOSSIBLE` where masks leave no
    structure), ``_best`` (the max-semiring pass: the best score ``[B]`` and the best structure
    in the pass's own form) and ``_decoded`` (that form as the structure ``[B, n]``).
    """

    masked: bool

    if TYPE_CHECKING:  # (a cached_property of the class)
        @property
        def _best(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def _log_partition(self) -> torch.Tensor:
        raise NotImplementedError

    def _decoded(self, best: torch.Tensor) -> torch.Tensor:
        """The best structure ``[B, n]`` from the second member of ``_best`` (default: itself)."""
        return best

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[B]`` log-sum of the scores of all structures; differentiable. ``-inf`` (with a zero
        gradient) where masks leave no structure."""
        log_z = self._log_partition()
        if not self.masked:
            return log_z
        return impossible_as_inf(log_z)

    @property
    def feasible(self) -> torch.Tensor:
        """``[B]`` bool: some structure avoids every masked part."""
        return self.log_partition.detach() > -float("inf")

    def _feasible_only(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, ...]`` with the batch elements that have no structure set to 0."""
        if not self.masked:
            return x
        return torch.where(self.feasible.view(-1, *[1] * (x.dim() - 1)), x, x.new_zeros(()))

    @property
    def max(self) -> torch.Tensor:
        """``[B]`` score of the best structure (not differentiable); ``-inf`` if masks leave none."""
        return impossible_as_inf(self._best[0])

    @property
    def argmax(self) -> torch.Tensor:
        """``[B, n]`` the best structure (first best on ties), ``-1`` padding, and all ``-1``
        where masks leave no structure."""
        none = (self.max == -float("inf")).unsqueeze(-1)
        return self._decoded(self._best[1]).masked_fill(none, -1)


class Decoding:
    """Mixin: exact sampling and k-best decoding for structures that are one choice per position
    (the head of each word, the label of each position), from two hooks of the class:

    - ``_restricted(index [M], allowed [M, n, V]) -> CRF``: the CRF of batch elements ``index``
      with every disallowed choice masked to ``-inf`` (``V`` choices per position);
    - ``_choice_marginals(crf, i) -> [M, V]``: the marginal distribution of position ``i``'s choice;
    - ``_num_positions()`` (``n``) and ``_num_choices()`` (``V``).

    The CRF must also give ``lengths``, ``max``, ``argmax`` and ``log_partition``. A class may
    override ``sample`` with a faster exact sampler (the chain, Eisner and Matrix-Tree do).
    """

    lengths: torch.Tensor

    if TYPE_CHECKING:  # what the CRF provides (for the type checker only)
        @property
        def log_partition(self) -> torch.Tensor: ...

        @property
        def max(self) -> torch.Tensor: ...

        @property
        def argmax(self) -> Any: ...

    def _restricted(self, index: torch.Tensor, allowed: torch.Tensor):
        raise NotImplementedError

    @staticmethod
    def _choice_marginals(crf, i: int) -> torch.Tensor:
        raise NotImplementedError

    def _num_choices(self) -> int:
        raise NotImplementedError

    def _num_positions(self) -> int:
        raise NotImplementedError

    def _to_choices(self, structure: torch.Tensor) -> torch.Tensor:
        """``[M, n]`` choice indices ``0..V-1`` of structures (``-1`` past lengths); the identity
        where a structure is its choices (heads, labels)."""
        return structure

    def _from_choices(self, choices: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`_to_choices`."""
        return choices

    def _sequential_sample(self, count: int, generator: torch.Generator | None) -> torch.Tensor:
        """``[count, B, n]`` exact samples by conditioning: position ``i``'s choice is drawn from
        its marginal given the choices of positions ``< i`` (chain rule), each conditional
        computed as the marginals of the CRF with those choices fixed (the others masked)."""
        batch, n = self.lengths.shape[0], self._num_positions()
        index = torch.arange(batch, device=self.lengths.device).repeat(count)  # [count * B]
        out = torch.full((len(index), n), -1, dtype=torch.long, device=index.device)
        out = self._continue_sample(index, out, torch.zeros_like(index), generator)
        feasible = self.log_partition.detach()[index] > -float("inf")
        return out.masked_fill(~feasible.unsqueeze(-1), -1).view(count, batch, n)

    def _continue_sample(self, index: torch.Tensor, out: torch.Tensor, start: torch.Tensor,
                         generator: torch.Generator | None) -> torch.Tensor:
        """``out [M, n]`` completed by conditioning (see :meth:`_sequential_sample`): row ``m``
        is a sample of batch element ``index[m]`` whose choices at positions ``< start[m]`` are
        given (drawn from the exact conditionals by the caller) and the rest are drawn here."""
        n, V = self._num_positions(), self._num_choices()
        lengths = self.lengths[index]
        pos = torch.arange(n, device=index.device)
        given = (pos < start.unsqueeze(1)) & (out >= 0)  # [M, n]
        fixed = torch.nn.functional.one_hot(out.clamp_min(0), V).bool()  # [M, n, V]
        allowed = torch.where(given.unsqueeze(-1), fixed, torch.ones_like(fixed))
        with torch.no_grad():
            for i in range(int(start.min()) if len(start) else n, n):
                crf = self._restricted(index, allowed)
                probs = self._choice_marginals(crf, i).double().clamp_min(0.0)  # [M, V]
                choice = _gumbel_argmax(probs.log(), generator)
                draw = i >= start
                active = draw & (i < lengths) & (probs.sum(-1) > 0)
                out[:, i] = torch.where(active, choice, torch.where(draw, -1, out[:, i]))
                pick = torch.nn.functional.one_hot(choice, V).bool()
                allowed[:, i] = torch.where(active.unsqueeze(-1), pick, allowed[:, i])
        return out

    def kbest(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best structures of each batch element, exactly, best first.

        Lawler's (1972) partition scheme over constrained argmaxes
        (:func:`~synattn.structs.kbest.lawler`): after the ``j``-th best structure ``y`` (found
        under constraints), the rest of its subspace splits into one subproblem per free
        position ``i``: positions before ``i`` keep ``y``'s choices, ``i`` must differ from
        ``y``'s. Each subproblem's best is a masked argmax of the same dynamic program (Viterbi,
        Eisner, Chu-Liu-Edmonds), so the list is exact; ties are broken by the argmax's own
        order. Cost: ``k`` batched argmax calls, each over up to ``n`` sub-problems per batch
        element.

        Returns:
            ``scores [B, k]`` (``-inf`` where fewer than ``k`` structures exist) and structures
            ``[B, k, n]`` (``-1`` padding, also for missing ones); when every batch element has
            fewer than ``k`` structures, only as many columns as the largest list (``k``
            beyond the space costs nothing).
        """
        batch, n = self.lengths.shape[0], self._num_positions()
        V = self._num_choices()
        device = self.lengths.device
        lengths = self.lengths.tolist()
        pos = torch.arange(n)

        def solve(sents: torch.Tensor, constraints) -> tuple[list[float], torch.Tensor]:
            crf = self._restricted(sents.to(device), constraints[0].to(device))
            return crf.max.detach().double().cpu().tolist(), crf._to_choices(crf.argmax).cpu()

        def split(b: int, y: torch.Tensor, constraint):
            allowed, first = constraint
            # Lawler: sub-problem i keeps y at first..i-1 and differs from it at i
            at = torch.arange(int(first), lengths[b])  # [m]
            keep = (pos >= first) & (pos < at.unsqueeze(1))  # [m, n]
            onehot = torch.nn.functional.one_hot(y.clamp_min(0), V).bool()  # [n, V]
            subs = torch.where(keep.unsqueeze(-1), onehot, allowed)  # [m, n, V]
            subs[torch.arange(len(at)), at, y[at]] = False
            return subs, at

        initial = (torch.ones(batch, n, V, dtype=torch.bool), torch.zeros(batch, dtype=torch.long))
        scores, structures = lawler(k, initial, solve, split, torch.full((n,), -1))
        return scores.to(device), self._from_choices(structures).to(device)


def _gumbel_noise(shape: torch.Size | tuple[int, ...], generator: torch.Generator | None,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """``shape`` float64 draws from the standard Gumbel distribution (finite: ``u >= 1e-300``)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    return -torch.log(-torch.log(u.clamp_min(1e-300)))


def _gumbel_argmax(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row from ``softmax(logits)`` (rows of ``-inf`` give 0) by the Gumbel-max trick."""
    return (logits + _gumbel_noise(logits.shape, generator, logits.device)).max(-1).indices  # (= argmax)


def check_count(count: int, per_sample: int = 0) -> int:
    """``count`` of ``sample(count)`` if it is a whole number >= 1 whose samples fit in memory
    (``per_sample``: a lower bound of the bytes one sample of the whole batch takes while it is
    drawn), else ValueError naming ``sample: count``."""
    count = whole_count(count, "sample: count")
    check_memory("sample: count", count, count * per_sample, f"{count} samples")
    return count
