"""Monotonic alignment of two sequences: torch-struct's ``AlignmentCRF`` (Needleman-Wunsch /
dynamic time warping, or Smith-Waterman with ``local=True``).

``log_potentials[b, i, j, op]`` (``[B, N, M, 3]``, torch-struct's layout) scores entering cell
``(i, j)`` of the ``N × M`` grid by move ``op``: 0 from ``(i, j-1)`` (a step in the second
sequence only), 1 from ``(i-1, j-1)`` (a match), 2 from ``(i-1, j)`` (a step in the first
sequence only). An alignment is a monotone lattice path; its score is the sum of the entries of
the cells it visits, each by the move that entered it, the first cell counting as a match (op
1). As in torch-struct's enumeration (``Alignment.enumerate``):

- global (``local=False``): paths from ``(0, 0)`` to ``(n-1, m-1)``;
- local (``local=True``): paths that start at any cell (scored by its op 1) and end at any cell.

``max_gap``: only cells with ``|i - j| <= max_gap`` may be visited (a Sakoe-Chiba band; torch-struct
instead crops the offset range of the blocks its parallel scan merges, which depends on the
scan's blocks). ``lengths`` (``n``) and ``other_lengths`` (``m``) give each pair's lengths
(default ``N`` and ``M``; torch-struct has the first only).

The forward recursion runs over anti-diagonals ``d = i + j`` (one Python step each, vectorised
over the batch and the cells of a diagonal)::

    alpha(i, j) = ⊕( alpha(i, j-1) ⊗ s(i, j, 0), alpha(i-1, j-1) ⊗ s(i, j, 1),
                     alpha(i-1, j) ⊗ s(i, j, 2) [, s(i, j, 1) if local] )

``log Z = alpha(n-1, m-1)`` (global) or ``⊕_{i,j} alpha(i, j)`` (local); marginals (``[B, N, M,
3]``, the probability that the path enters ``(i, j)`` by ``op``) by autograd. ``argmax`` and
``sample`` trace a path back from its end through the max- or log-chart; ``kbest`` (global or
local) is Lawler's scheme over the path's start cell and moves (:func:`~synattn.structs.kbest.lawler`).
A path is returned as torch-struct's event, 0/1 parts ``[B, N, M, 3]``.
"""

from __future__ import annotations

from functools import cached_property

import torch

from synattn.limits import check_memory

from ..arguments import flag, length_tensor, score_tensor
from ..constants import IMPOSSIBLE, NEG
from ..distribution import StructDistribution, _gumbel_argmax, check_count
from ..kbest import lawler
from ..scores import check_scores, float_dtype, fp32_inside, impossible_as_inf, mask_impossible

RIGHT, MATCH, DOWN, END = 0, 1, 2, 3
"""Moves (``op``): ``(i, j-1) → (i, j)``, ``(i-1, j-1) → (i, j)``, ``(i-1, j) → (i, j)``; END
closes a move sequence (k-best)."""
STEP = {RIGHT: (0, 1), MATCH: (1, 1), DOWN: (1, 0)}
CHART_COPIES = 24
"""Chart-sized tensors ``[B, N+M-1, N]`` the forward pass and its autograd keep at once (the
bound of :func:`synattn.limits.check_memory`; measured: about 24 for the marginals)."""


def _lengths(x, default: int, batch: int, device, name: str) -> torch.Tensor:
    if x is None:
        return torch.full((batch,), default, dtype=torch.long, device=device)
    x = length_tensor(x, device, f"AlignmentCRF: {name}")
    if x.shape != (batch,) or bool((x < 1).any()) or bool((x > default).any()):
        raise ValueError(f"AlignmentCRF: {name} must be [B] with values in 1..{default}, got "
                         f"{x.tolist()}")
    return x


class AlignmentCRF(StructDistribution):
    """Monotonic alignments (see the module docstring).

    Args:
        log_potentials: ``[B, N, M, 3]`` scores of entering cell ``(i, j)`` by each move.
        lengths: ``[B]`` lengths ``n`` of the first sequences (``1..N``; default ``N``).
        other_lengths: ``[B]`` lengths ``m`` of the second (``1..M``; default ``M``).
        local: Smith-Waterman paths (start and end anywhere) instead of corner to corner.
        max_gap: if set, only cells with ``|i - j| <= max_gap`` are used.

    Example:
        >>> crf = AlignmentCRF(torch.randn(2, 4, 5, 3))
        >>> crf.log_partition.shape, crf.marginals.shape, crf.argmax.shape
        (torch.Size([2]), torch.Size([2, 4, 5, 3]), torch.Size([2, 4, 5, 3]))
    """

    def __init__(self, log_potentials: torch.Tensor, lengths: torch.Tensor | None = None,
                 other_lengths: torch.Tensor | None = None, local: bool = False,
                 max_gap: int | None = None):
        score_tensor(log_potentials, "log_potentials", "AlignmentCRF")
        if log_potentials.dim() != 4 or log_potentials.shape[-1] != 3:
            raise ValueError(f"AlignmentCRF: log_potentials must be [B, N, M, 3], got "
                             f"{tuple(log_potentials.shape)}")
        self.local = flag(local, "local", "AlignmentCRF")
        if max_gap is not None and (isinstance(max_gap, bool) or not isinstance(max_gap, int)
                                    or max_gap < 0):
            raise ValueError(f"AlignmentCRF: max_gap must be None or a whole number >= 0, got {max_gap!r}")
        self.max_gap = max_gap
        batch, N, M, _ = log_potentials.shape
        device = log_potentials.device
        self.lengths = _lengths(lengths, N, batch, device, "lengths")
        self.other_lengths = _lengths(other_lengths, M, batch, device, "other_lengths")
        # the anti-diagonal charts [B, N+M-1, N] of scores (3 moves), alpha and what autograd
        # keeps for the marginals: refused before anything is allocated (time grows alike)
        itemsize = torch.finfo(float_dtype(log_potentials)).bits // 8
        check_memory("AlignmentCRF: log_potentials [B, N, M, 3]", list(log_potentials.shape),
                     CHART_COPIES * batch * (N + M - 1) * N * itemsize,
                     f"the {batch} x {N + M - 1} x {N} anti-diagonal charts")
        s = mask_impossible(log_potentials.to(float_dtype(log_potentials)), log_potentials.dtype)
        usable = self._usable_cells(N, M).unsqueeze(-1)  # [B, N, M, 1]
        s = torch.where(usable, s, s.new_zeros(()))
        self.masked = check_scores([(s, usable)], N + M - 1, "log_potentials")
        self.log_potentials = torch.where(usable, s, torch.full_like(s, NEG))
        """``[B, N, M, 3]``: masked moves and cells outside the lengths or the band ``NEG``."""
        self._starts: torch.Tensor | None = None
        """``[B, N, M]`` bool or None: the cells a local path may start at (None: every one;
        set by :meth:`kbest` on its subproblems)."""
        self._ends: torch.Tensor | None = None
        """``[B, N, M]`` bool or None: the cells a path may end at (None: every one if local,
        ``(n-1, m-1)`` if global; set by :meth:`kbest` on its subproblems)."""

    def _usable_cells(self, N: int, M: int) -> torch.Tensor:
        """``[B, N, M]`` True for the cells within both lengths (and the band)."""
        i = torch.arange(N, device=self.lengths.device).view(1, N, 1)
        j = torch.arange(M, device=self.lengths.device).view(1, 1, M)
        ok = (i < self.lengths.view(-1, 1, 1)) & (j < self.other_lengths.view(-1, 1, 1))
        if self.max_gap is not None:
            ok = ok & ((i - j).abs() <= self.max_gap)
        return ok

    # --- the forward recursion -----------------------------------------------------------------

    def _skewed(self, s: torch.Tensor) -> torch.Tensor:
        """``[B, D, N, 3]`` with ``[b, d, i] = s[b, i, d - i]`` (``NEG`` off the grid), ``D = N+M-1``."""
        batch, N, M, _ = s.shape
        d = torch.arange(N + M - 1, device=s.device).view(-1, 1)
        i = torch.arange(N, device=s.device).view(1, -1)
        j = d - i  # [D, N]
        inside = (j >= 0) & (j < M)
        out = s[:, i.expand_as(j), j.clamp(0, M - 1)]  # [B, D, N, 3]
        return torch.where(inside.view(1, *inside.shape, 1), out, torch.full_like(out, NEG))

    def _offset(self, cells: torch.Tensor | None, s: torch.Tensor) -> torch.Tensor | None:
        """``[B, D, N]`` 0 on the allowed ``cells`` ``[B, N, M]`` and ``NEG`` elsewhere, skewed
        like the chart (None for None)."""
        if cells is None:
            return None
        x = torch.where(cells, s.new_zeros(()), s.new_full((), NEG)).unsqueeze(-1)
        return self._skewed(x.expand(*cells.shape, 3))[..., 0]

    def _chart(self, s: torch.Tensor, viterbi: bool) -> torch.Tensor:
        """``[B, D, N]`` ``alpha`` by anti-diagonal, ``alpha[b, d, i] = alpha(i, d - i)``."""
        E = self._skewed(s)
        start = self._offset(self._starts, s)
        batch, D, N, _ = E.shape
        neg = E.new_full((batch, N), NEG)

        def shift(x):  # index i-1
            return torch.cat((neg[:, :1], x[:, :-1]), 1)

        def reduce(terms):
            x = torch.stack(terms, -1)
            return x.amax(-1) if viterbi else torch.logsumexp(x, -1)

        first = torch.zeros_like(neg, dtype=torch.bool)
        first[:, 0] = True
        # one view per anti-diagonal: autograd stacks their gradients once (indexing E[:, d]
        # would add a gradient of E's full size per step: quadratic time in the backward)
        moves = E.unbind(1)  # D x [B, N, 3]
        alphas = [torch.where(first, moves[0][:, :, MATCH], neg)]  # the path's first cell: a match
        if start is not None:
            alphas[0] = alphas[0] + start[:, 0]
        prev2 = neg
        for d in range(1, D):
            prev = alphas[-1]
            e = moves[d]
            terms = [prev + e[:, :, RIGHT], shift(prev2) + e[:, :, MATCH], shift(prev) + e[:, :, DOWN]]
            if self.local:
                terms.append(e[:, :, MATCH] if start is None else e[:, :, MATCH] + start[:, d])
            alphas.append(reduce(terms).clamp_min(NEG))
            prev2 = prev
        return torch.stack(alphas, 1)

    def _total(self, chart: torch.Tensor, viterbi: bool) -> torch.Tensor:
        """``[B]`` ``log Z`` (or the best score) from the chart."""
        batch = chart.shape[0]
        if self.local or self._ends is not None:
            end = self._offset(self._ends, chart)
            flat = (chart if end is None else chart + end).flatten(1)
            return flat.amax(1) if viterbi else torch.logsumexp(flat, 1)
        rows = torch.arange(batch, device=chart.device)
        return chart[rows, self.lengths + self.other_lengths - 2, self.lengths - 1]

    @staticmethod
    def _finite(x: torch.Tensor) -> torch.Tensor:
        return impossible_as_inf(x)

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[B]`` log-sum of the scores of all alignments; differentiable (``-inf``, zero
        gradient, where masks leave none)."""
        return self._finite(self._total(self._chart(self.log_potentials, False), False))

    @cached_property
    @fp32_inside
    def marginals(self) -> torch.Tensor:
        """``[B, N, M, 3]`` probability that the path enters ``(i, j)`` by each move (by
        autograd of ``log Z``; differentiable)."""
        s = self.log_potentials
        with torch.enable_grad():
            x = s if s.requires_grad else s.detach().requires_grad_()
            log_z = self._total(self._chart(x, False), False)
            ok = log_z > IMPOSSIBLE
            (mu,) = torch.autograd.grad(torch.where(ok, log_z, log_z.new_zeros(())).sum(), x,
                                        create_graph=s.requires_grad)
        return torch.where(s > NEG, mu, mu.new_zeros(()))

    @property
    def feasible(self) -> torch.Tensor:
        """``[B]`` bool: some alignment avoids every mask."""
        return self.log_partition.detach() > -float("inf")

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.log_potentials, self.marginals)]

    def score(self, parts: torch.Tensor) -> torch.Tensor:
        """``[B]`` score of paths given as 0/1 parts ``[B, N, M, 3]``; ``-inf`` for one that uses
        a masked move or a cell outside the lengths or band."""
        parts = torch.as_tensor(parts, device=self.log_potentials.device)
        if parts.shape != self.log_potentials.shape:
            raise ValueError(f"AlignmentCRF: parts must be {tuple(self.log_potentials.shape)}, "
                             f"got {tuple(parts.shape)}")
        parts = parts.to(self.log_potentials.dtype)
        total = (parts * self.log_potentials).flatten(1).sum(1)
        return self._finite(total)

    # --- best path and samples -----------------------------------------------------------------

    @cached_property
    def _viterbi(self) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            s = self.log_potentials.detach()
            chart = self._chart(s, True)
            return self._total(chart, True), self._trace(s, chart, True, 1, None)[0]

    @property
    def max(self) -> torch.Tensor:
        """``[B]`` score of the best alignment (not differentiable); ``-inf`` if none."""
        return self._finite(self._viterbi[0])

    @property
    def argmax(self) -> torch.Tensor:
        """``[B, N, M, 3]`` 0/1 parts of the best alignment (all 0 where none exists)."""
        parts = self._viterbi[1]
        return parts * (self.max > -float("inf")).view(-1, 1, 1, 1)

    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, N, M, 3]`` exact samples (0/1 parts; all 0 where no alignment exists):
        the end cell, then each predecessor drawn backwards in proportion to its forward
        weight (forward filtering, backward sampling). Not differentiable."""
        check_count(count)
        with torch.no_grad():
            s = self.log_potentials.detach().double()
            chart = self._chart(s, False)
            parts = self._trace(s, chart, False, count, generator)
        return parts * self.feasible.view(1, -1, 1, 1, 1)

    def _trace(self, s: torch.Tensor, chart: torch.Tensor, viterbi: bool, count: int,
               generator: torch.Generator | None) -> torch.Tensor:
        """``[count, B, N, M, 3]`` paths traced back through ``chart`` (best or sampled)."""
        batch, N, M, _ = s.shape
        rows = torch.arange(batch, device=s.device).repeat(count)  # [R]
        R = len(rows)

        def choose(w):
            w = impossible_as_inf(w)
            return w.argmax(-1) if viterbi else _gumbel_argmax(w, generator)

        def alpha(i, j):  # [R] chart value at (i, j), -inf off the grid
            ok = (i >= 0) & (j >= 0)
            v = chart[rows, (i + j).clamp_min(0), i.clamp_min(0)]
            return torch.where(ok, v, torch.full_like(v, -float("inf")))

        if self.local or self._ends is not None:
            end = self._offset(self._ends, chart)
            flat = (chart if end is None else chart + end)[rows].view(R, -1)
            d, i = (x.view(-1) for x in torch.unravel_index(choose(flat), chart.shape[1:]))
            j = d - i
        else:
            i, j = self.lengths[rows] - 1, self.other_lengths[rows] - 1
        parts = s.new_zeros(R, N, M, 3)
        done = torch.zeros(R, dtype=torch.bool, device=s.device)
        for _ in range(N + M - 1):
            e = s[rows, i, j]  # [R, 3]
            first = (i == 0) & (j == 0) if not self.local else (
                torch.ones_like(i, dtype=torch.bool) if self._starts is None else self._starts[rows, i, j])
            start = torch.where(first, e[:, MATCH], torch.full_like(e[:, 0], -float("inf")))
            w = torch.stack((alpha(i, j - 1) + e[:, RIGHT], alpha(i - 1, j - 1) + e[:, MATCH],
                             alpha(i - 1, j) + e[:, DOWN], start), -1)
            op = choose(w)
            # (no move reaches this cell: a k-best subspace without a path stops here)
            done = done | ~(w > IMPOSSIBLE).any(-1)
            live = ~done
            parts[torch.arange(R, device=s.device)[live], i[live], j[live], torch.where(op == 3, MATCH, op)[live]] = 1
            done = done | (op == 3)
            di = torch.tensor([0, 1, 1, 0], device=s.device)[op]
            dj = torch.tensor([1, 1, 0, 0], device=s.device)[op]
            i, j = torch.where(done, i, i - di), torch.where(done, j, j - dj)
            if bool(done.all()):
                break
        return parts.view(count, batch, N, M, 3)

    # --- k-best -----------------------------------------------------------------------------

    def kbest(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best alignments (global or local), exactly, best first: ``scores [B, k]``
        (float64, ``-inf`` where fewer exist) and parts ``[B, k, N, M, 3]``.

        Lawler's (1972) scheme (:func:`~synattn.structs.kbest.lawler`) over a path written as
        its start cell, its moves and END (a global path's start is fixed at ``(0, 0)``): a
        subspace fixes a prefix and excludes some choices of the next item (a start cell, a move
        or END). It is expressed by masking the moves out of the prefix's cells and by the cells
        the path may start and end at; each subspace's best is this CRF's Viterbi path under
        those masks.
        """
        s = self.log_potentials.detach()
        batch, N, M, _ = s.shape
        T = N + M  # the start cell, at most N+M-2 moves, then END
        W = max(N * M, END + 1)  # the choices of an item: a start cell (i * M + j) or a move

        def masked(b: int, prefix: torch.Tensor, excluded: torch.Tensor):
            """Scores, start and end cells ``[N, M]`` of the subspace (None: global start)."""
            x, n, m = s[b].clone(), int(self.lengths[b]), int(self.other_lengths[b])
            ends = torch.zeros(N, M, dtype=torch.bool)
            if not self.local:
                ends[n - 1, m - 1] = True
            elif prefix[0] < 0:  # the start cell is the next choice
                return x, ~excluded[:N * M].view(N, M), ends | True
            else:
                ends |= True
            i, j = divmod(int(prefix[0]), M)
            starts = None
            if self.local:
                starts = torch.zeros(N, M, dtype=torch.bool)
                starts[i, j] = True
            for mv in [int(v) for v in prefix[1:] if v >= 0] + [None]:
                allowed = {mv} if mv is not None else {c for c in range(END + 1) if not excluded[c]}
                for op, (di, dj) in STEP.items():
                    if op not in allowed and i + di < N and j + dj < M:
                        x[i + di, j + dj, op] = NEG
                if END not in allowed:
                    ends[i, j] = False
                if mv is None or mv == END:
                    break
                i, j = i + STEP[mv][0], j + STEP[mv][1]
            return x, starts, ends

        def solve(sents, constraints):
            xs, starts, ends = zip(*(masked(b, p, e) for b, p, e in zip(sents.tolist(), *constraints)))
            sub = AlignmentCRF(torch.stack(xs), self.lengths[sents], self.other_lengths[sents],
                               local=self.local, max_gap=self.max_gap)
            if self.local:
                sub._starts = torch.stack(starts).to(s.device)
            sub._ends = torch.stack(ends).to(s.device)
            return sub.max.double().cpu().tolist(), self._to_moves(sub.argmax, sents).cpu()

        def split(b, y, constraint):
            prefix, excluded = constraint
            first = int((prefix >= 0).sum())
            last = int((y >= 0).sum()) - 1  # the position of END
            at = torch.arange(first, last + 1)
            subs_prefix = torch.where(torch.arange(T) < at.unsqueeze(1), y, -1)  # [m, T]
            subs_excluded = torch.nn.functional.one_hot(y[at], W).bool()
            subs_excluded[0] |= excluded  # the first keeps its parent's exclusions
            return subs_prefix, subs_excluded

        prefix = torch.full((batch, T), -1, dtype=torch.long)
        if not self.local:
            prefix[:, 0] = 0  # global paths start at (0, 0)
        initial = (prefix, torch.zeros(batch, W, dtype=torch.bool))
        scores, paths = lawler(k, initial, solve, split, torch.full((T,), -1, dtype=torch.long))
        return scores.to(s.device), self._from_moves(paths.to(s.device))

    def _to_moves(self, parts: torch.Tensor, sents: torch.Tensor) -> torch.Tensor:
        """``[R, N+M]`` paths ``[R, N, M, 3]`` as their start cell ``i * M + j``, their moves
        and END; all ``-1`` for an empty path."""
        R, N, M, _ = parts.shape
        out = torch.full((R, N + M), -1, dtype=torch.long)
        p = parts.detach().cpu()
        for r in range(R):
            cells = p[r].sum(-1).nonzero()
            if not len(cells):
                continue
            i, j = (int(v) for v in cells[(cells[:, 0] + cells[:, 1]).argmin()])  # the first cell
            out[r, 0] = i * M + j
            for t in range(1, N + M):
                for op, (di, dj) in STEP.items():
                    if i + di < N and j + dj < M and p[r, i + di, j + dj, op] > 0.5:
                        out[r, t], i, j = op, i + di, j + dj
                        break
                else:  # no move leaves the cell: the path ends here
                    out[r, t] = END
                    break
        return out

    def _from_moves(self, moves: torch.Tensor) -> torch.Tensor:
        """``[B, k, N, M, 3]`` parts of paths ``[B, k, N+M]`` written as :meth:`_to_moves` writes
        them (all 0 for ``-1`` rows)."""
        B, k, _ = moves.shape
        N, M = self.log_potentials.shape[1:3]
        parts = self.log_potentials.new_zeros(B, k, N, M, 3)
        for b in range(B):
            for r in range(k):
                if moves[b, r, 0] < 0:
                    continue
                i, j = divmod(int(moves[b, r, 0]), M)
                parts[b, r, i, j, MATCH] = 1
                for mv in moves[b, r, 1:].tolist():
                    if mv in (END, -1):
                        break
                    i, j = i + STEP[mv][0], j + STEP[mv][1]
                    parts[b, r, i, j, mv] = 1
        return parts
