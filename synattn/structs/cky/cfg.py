"""A simple probabilistic context-free grammar in Chomsky normal form: torch-struct's ``SentCFG``.

Parameterisation (torch-struct's): ``terms [B, N, T]`` (word ``i`` emitted by preterminal ``t``),
``rules [B, NT, NT+T, NT+T]`` (``X → Y Z``; symbols ``0..NT-1`` are nonterminals, ``NT..NT+T-1``
the preterminals) and ``roots [B, NT]``. A parse of ``n >= 2`` words is a binary tree whose
leaves are preterminals over the words, whose internal nodes (spans of two words or more) are
nonterminals, and whose root is scored by ``roots``; a child spanning one word is a preterminal,
a wider one a nonterminal. Its score is the sum of its terms, rules and root.

Inside recursion over span widths (``beta(i, j, X)`` for words ``i..j``, ``j > i``)::

    beta(i, j, X) = ⊕_{i <= k < j} ⊕_{Y, Z} rules[X, Y, Z] ⊗ in(i, k, Y) ⊗ in(k+1, j, Z)
    log Z = ⊕_X roots[X] ⊗ beta(0, n-1, X)

with ``in`` the preterminal scores ``terms`` for one-word spans and ``beta`` otherwise.
For each width the children are combined over the split points first, per kind of child pair,
then contracted with the rules by a matrix product of exponentials, each factor shifted by its
largest entry (a sum at most ``1e-300`` times that product of maxima, in float32 its smallest
normal number, is one of masked or underflowed terms only: it counts as impossible, ``NEG``).
Marginals (expected counts of each term, rule and root) are the gradient of ``log Z`` by
autograd (as in torch-struct); the Viterbi parse is the gradient of the max-semiring recursion,
each maximum taken by ``torch.max`` so that ties route to one parse.

On CPU tensors (:func:`~synattn.structs.backend.use_numba`) ``log Z`` and the marginals run
compiled kernels instead (:mod:`synattn.structs.cky._cfg_kernels`: the same recursion with the
terminals folded into the rules once per word, and its explicit outside pass), and each k-best
sub-problem is a compiled masked Viterbi parse with back pointers
(:mod:`synattn.structs.cky._cfg_viterbi_kernels`); the marginals' own backward (a second
derivative) is autograd's double backward of the PyTorch recursion.
"""

from __future__ import annotations

from functools import cached_property

import torch
import torch.nn.functional as F

from ..arguments import length_tensor, score_tensor
from ..backend import kernels, use_numba
from ..constants import IMPOSSIBLE, NEG, TINY
from ..distribution import StructDistribution, _gumbel_argmax, check_count
from ..scores import check_scores, float_dtype, fp32_inside, impossible_as_inf, mask_impossible


class SentCFG(StructDistribution):
    """Parses of a PCFG (see the module docstring).

    Args:
        terms: ``[B, N, T]`` log-scores of preterminal ``t`` over word ``i``.
        rules: ``[B, NT, NT+T, NT+T]`` log-scores of ``X → Y Z``.
        roots: ``[B, NT]`` log-scores of the root symbol.
        lengths: ``[B]`` words per sentence, ``2..N`` (default ``N``).

    ``marginals``, ``argmax`` and the parts ``score``/``log_prob`` take are triples ``(terms
    [B, N, T], rules [B, NT, NT+T, NT+T], roots [B, NT])`` (counts; torch-struct's parts).

    Example:
        >>> cfg = SentCFG(torch.randn(2, 5, 3), torch.randn(2, 4, 7, 7), torch.randn(2, 4))
        >>> cfg.log_partition.shape, cfg.argmax[1].sum(dim=(1, 2, 3))   # n - 1 rules per parse
        (torch.Size([2]), tensor([4., 4.]))
    """

    def __init__(self, terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor,
                 lengths: torch.Tensor | None = None):
        for name, x, dim in (("terms", terms, 3), ("rules", rules, 4), ("roots", roots, 2)):
            score_tensor(x, name, "SentCFG")
            if x.dim() != dim:
                raise ValueError(f"SentCFG: {name} must have {dim} dimensions, got {tuple(x.shape)}")
        batch, N, T = terms.shape
        NT = rules.shape[1]
        if rules.shape != (batch, NT, NT + T, NT + T) or roots.shape != (batch, NT) or NT < 1:
            raise ValueError(f"SentCFG: need terms [B, N, T], rules [B, NT, NT+T, NT+T] and roots "
                             f"[B, NT]; got {tuple(terms.shape)}, {tuple(rules.shape)}, "
                             f"{tuple(roots.shape)}")
        if N < 2:
            raise ValueError(f"SentCFG: a parse needs at least 2 words, got terms {tuple(terms.shape)}")
        if lengths is None:
            lengths = torch.full((batch,), N, dtype=torch.long, device=terms.device)
        lengths = length_tensor(lengths, terms.device)
        if lengths.shape != (batch,) or bool((lengths < 2).any()) or bool((lengths > N).any()):
            raise ValueError(f"SentCFG: lengths must be [B] with values in 2..{N} (a parse needs "
                             f"two words), got {lengths.tolist()}")
        self.lengths, self.NT, self.T = lengths, NT, T
        dtype = float_dtype(terms)
        parts = tuple(mask_impossible(x.to(dtype), x.dtype) for x in (terms, rules, roots))
        within = (torch.arange(N, device=terms.device) < lengths[:, None]).unsqueeze(-1)
        parts = (torch.where(within, parts[0], parts[0].new_zeros(())),) + parts[1:]
        self.masked = check_scores([(parts[0], within), (parts[1], None), (parts[2], None)],
                                   3 * N, "terms, rules, roots")
        self.terms, self.rules, self.roots = parts
        self._spans: torch.Tensor | None = None
        """``[B, N, N, NT]`` anchored scores added to ``beta(i, j, X)`` (0 or ``NEG``: the masks of
        the k-best sub-problems), or None."""

    # --- inside -----------------------------------------------------------------------------------

    def _inside(self, terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor,
                viterbi: bool, spans: torch.Tensor | None = None,
                chart: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
        """``[B]`` ``log Z`` (or the best parse's score, ``viterbi``).

        For each width the children are first combined over the split points, per pair of
        symbol kinds (nonterminal or preterminal on each side: ``P[b, i, Y, Z]``), then
        contracted with that block of the rules (a log-space matrix product). ``spans [B, N, N,
        NT]`` are added to ``beta(i, j, X)``; ``chart``, if given, receives ``beta``: width ``w
        >= 2`` → ``[B, N-w+1, NT]`` (``[b, i, X] = beta(i, i+w-1, X)``)."""
        batch, N, _ = terms.shape
        NT = self.NT
        blocks = {(0, 0): rules[:, :, :NT, :NT], (0, 1): rules[:, :, :NT, NT:],
                  (1, 0): rules[:, :, NT:, :NT], (1, 1): rules[:, :, NT:, NT:]}
        blocks = {k: v.flatten(2).transpose(1, 2).unsqueeze(1) for k, v in blocks.items()}  # [B, 1, K, NT]

        def pairs(left, right):  # [B, n, Sy], [B, n, Sz] -> [B, n, Sy*Sz]
            return (left[..., :, None] + right[..., None, :]).flatten(2)

        def reduce(x, dim):
            return x.max(dim).values if viterbi else torch.logsumexp(x, dim)

        tiny = max(TINY, torch.finfo(terms.dtype).tiny)

        def log_sum(prod):  # log of a scaled sum; at most `tiny`: impossible (no NaN gradient)
            return torch.where(prod > tiny, prod.clamp_min(tiny).log(), NEG)

        def contract(p, w):  # [B, n, K] with [B, 1, K, NT] -> [B, n, NT]
            if viterbi:
                return (p.unsqueeze(-1) + w).max(-2).values
            mp = p.amax(-1, keepdim=True).clamp_min(NEG).detach()
            mw = w.amax(-2, keepdim=True).clamp_min(NEG).detach()
            prod = torch.matmul((p - mp).exp().unsqueeze(-2), (w - mw).exp()).squeeze(-2)
            return log_sum(prod) + mp + mw.squeeze(-2)

        beta: dict[int, torch.Tensor] = {} if chart is None else chart  # width -> [B, N-w+1, NT]
        top = []
        for w in range(2, N + 1):
            n = N - w + 1
            out = []
            if w == 2:
                out.append(contract(pairs(terms[:, :n], terms[:, 1:1 + n]), blocks[(1, 1)]))
            else:  # a one-word child on the left or on the right
                out.append(contract(pairs(terms[:, :n], beta[w - 1][:, 1:1 + n]), blocks[(1, 0)]))
                out.append(contract(pairs(beta[w - 1][:, :n], terms[:, w - 1:w - 1 + n]), blocks[(0, 1)]))
            if w >= 4:  # both children nonterminals: combine over the split points first
                if viterbi:
                    p = torch.stack([pairs(beta[a][:, :n], beta[w - a][:, a:a + n])
                                     for a in range(2, w - 1)], -1).max(-1).values
                else:  # Σ_a exp(left_a[Y] + right_a[Z]): a matrix product over the splits
                    left = torch.stack([beta[a][:, :n] for a in range(2, w - 1)], 2)  # [B, n, A, NT]
                    right = torch.stack([beta[w - a][:, a:a + n] for a in range(2, w - 1)], 2)
                    ml, mr = left.amax(-1, keepdim=True).detach(), right.amax(-1, keepdim=True).detach()
                    m = (ml + mr).amax(-2, keepdim=True)  # [B, n, 1, 1]
                    scale = (ml + mr - m).exp()  # [B, n, A, 1]
                    prod = torch.matmul(((left - ml).exp() * scale).transpose(-1, -2), (right - mr).exp())
                    p = (log_sum(prod) + m).flatten(2)  # [B, n, NT*NT]
                out.append(contract(p, blocks[(0, 0)]))
            inside = reduce(torch.stack(out, -1), -1)
            if spans is not None:
                inside = inside + spans.diagonal(w - 1, 1, 2).transpose(1, 2)
            beta[w] = inside.clamp_min(NEG)
            top.append(beta[w][:, 0])  # [B, NT]: the span from word 0
        whole = torch.stack(top, 1)[torch.arange(batch, device=terms.device), self.lengths - 2]
        return reduce(whole + roots, -1)

    @staticmethod
    def _finite(x: torch.Tensor) -> torch.Tensor:
        return impossible_as_inf(x)

    @property
    def _compiled(self) -> bool:
        """Whether ``log Z`` and the marginals run the compiled kernels (CPU, no anchored spans)."""
        return self._spans is None and use_numba(self.terms)

    def _log_z(self, terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor) -> torch.Tensor:
        """``[B]`` ``log Z`` of the PyTorch recursion (the double backward of the kernels')."""
        return self._inside(terms, rules, roots, False)

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[B]`` log-sum of all parses' scores (the sentence's log-likelihood for normalised
        parameters); differentiable."""
        if self._compiled:
            return self._finite(_LogPartition.apply(self.terms, self.rules, self.roots, self.lengths,
                                                    self._log_z))
        return self._finite(self._inside(self.terms, self.rules, self.roots, False, self._spans))

    def _gradient(self, viterbi: bool, create_graph: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        parts = (self.terms, self.rules, self.roots)
        if not viterbi and self._compiled:
            g_terms, g_rules, g_roots = (torch.where(p > NEG, g, g.new_zeros(())) for p, g in
                                         zip(parts, _Marginals.apply(*parts, self.lengths, self._log_z)))
            return g_terms, g_rules, g_roots
        with torch.enable_grad():
            terms, rules, roots = (p if p.requires_grad else p.detach().requires_grad_() for p in parts)
            value = self._inside(terms, rules, roots, viterbi, self._spans)
            ok = value > IMPOSSIBLE
            grads = torch.autograd.grad(torch.where(ok, value, value.new_zeros(())).sum(), (terms, rules, roots),
                                        create_graph=create_graph)
        g_terms, g_rules, g_roots = (torch.where(p > NEG, g, g.new_zeros(())) for p, g in zip(parts, grads))
        return g_terms, g_rules, g_roots

    @cached_property
    @fp32_inside
    def marginals(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Expected counts ``(terms [B, N, T], rules [B, NT, S, S], roots [B, NT])`` (autograd
        of ``log Z``; differentiable)."""
        return self._gradient(False, any(p.requires_grad for p in (self.terms, self.rules, self.roots)))

    def _parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip((self.terms, self.rules, self.roots), self.marginals))

    @cached_property
    def _viterbi(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        with torch.no_grad():
            best = self._inside(self.terms, self.rules, self.roots, True, self._spans)
        return best, tuple(g.detach() for g in self._gradient(True, False))

    @property
    def max(self) -> torch.Tensor:
        """``[B]`` score of the best parse (not differentiable); ``-inf`` if masks leave none."""
        return self._finite(self._viterbi[0])

    @property
    def argmax(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best parse's counts ``(terms, rules, roots)`` (all 0 where no parse exists)."""
        ok = (self.max > -float("inf")).to(self.terms.dtype)
        terms, rules, roots = (p * ok.view(-1, *[1] * (p.dim() - 1)) for p in self._viterbi[1])
        return terms, rules, roots

    def score(self, parts) -> torch.Tensor:
        """``[..., B]`` score of parses given as counts ``(terms [..., B, N, T], rules [..., B, NT,
        S, S], roots [..., B, NT])`` (the layout of ``argmax``, with any leading dimensions, as
        ``sample`` gives); ``-inf`` for one with a masked part."""
        if len(parts) != 3:
            raise ValueError("SentCFG: a parse is (terms, rules, roots) counts")
        total = torch.zeros((), dtype=self.terms.dtype, device=self.terms.device)
        for theta, count in zip((self.terms, self.rules, self.roots), parts):
            count = torch.as_tensor(count, device=theta.device)
            if count.shape[max(count.dim() - theta.dim(), 0):] != theta.shape:
                raise ValueError(f"SentCFG: parse counts must be [..., {', '.join(map(str, theta.shape))}], "
                                 f"got {tuple(count.shape)}")
            total = total + (count.to(theta.dtype) * theta).flatten(-(theta.dim() - 1)).sum(-1)
        return self._finite(total)

    # --- parses as labelled spans: samples and k-best -------------------------------------------

    def _inside_chart(self) -> torch.Tensor:
        """``[B, N, N, S]`` inside scores of every (span, symbol), ``-inf`` where impossible:
        ``terms[i, t]`` at ``(i, i, NT+t)``, ``beta(i, j, X)`` at ``(i, j, X)`` for ``j > i``."""
        batch, N, _ = self.terms.shape
        NT = self.NT
        beta: dict[int, torch.Tensor] = {}
        self._inside(self.terms, self.rules, self.roots, False, self._spans, beta)
        chart = self.terms.new_full((batch, N, N, NT + self.T), NEG)
        chart.diagonal(0, 1, 2)[:, NT:] = self.terms.transpose(1, 2)
        for w, b in beta.items():
            chart.diagonal(w - 1, 1, 2)[:, :NT] = b.transpose(1, 2)
        return torch.where(chart > IMPOSSIBLE, chart, -float("inf"))

    def sample(self, count: int = 1, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``count`` exact samples as counts ``(terms [count, B, N, T], rules [count, B, NT, S,
        S], roots [count, B, NT])`` (all 0 where no parse exists; not differentiable): the counts
        of :meth:`sample_spans`."""
        return parse_counts(self.sample_spans(count, generator), self.lengths, self.NT)

    @fp32_inside
    def sample_spans(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, N, N, S]`` exact samples as labelled spans: 1 at ``(i, i, NT+t)`` for
        preterminal ``t`` over word ``i`` and at ``(i, j, X)`` for nonterminal ``X`` over words
        ``i..j`` (a parse is its labelled spans; its counts may be another parse's too).

        Top-down on the inside chart: the root ``X`` is drawn with probability ``∝ exp(roots[X]
        + beta(0, n-1, X))``, then each chosen ``(i, j, X)`` (widths in decreasing order) draws
        its split and children ``(k, Y, Z)`` with probability ``∝ exp(rules[X, Y, Z] + in(i, k,
        Y) + in(k+1, j, Z))`` (Gumbel-max, float64). All 0 where no parse exists.
        """
        batch, N, _ = self.terms.shape
        NT, S = self.NT, self.NT + self.T
        check_count(count, self.terms.element_size() * batch * N * S * (N + S))
        with torch.no_grad():
            inside = self._inside_chart()
            rules = torch.where(self.rules > IMPOSSIBLE, self.rules, -float("inf"))
            charts = self.terms.new_zeros(count, batch, N, N, S)
            b_all = torch.arange(batch, device=self.terms.device)
            root = self.roots + inside[b_all, 0, self.lengths - 1, :NT]  # [B, NT]
            x = _gumbel_argmax(root.expand(count, batch, NT), generator)  # [count, B]
            charts[:, b_all, 0, self.lengths - 1] = F.one_hot(x, S).to(charts.dtype)
            for w in range(N, 1, -1):
                c, b, x, i = charts.diagonal(w - 1, 2, 3)[:, :, :NT].nonzero(as_tuple=True)
                if not len(c):
                    continue
                j, split = i + w - 1, torch.arange(w - 1, device=i.device)
                left = inside[b[:, None], i[:, None], i[:, None] + split]  # [M, w-1, S]
                right = inside[b[:, None], i[:, None] + split + 1, j[:, None]]  # [M, w-1, S]
                logits = rules[b, x].unsqueeze(1) + left[..., :, None] + right[..., None, :]
                pick = _gumbel_argmax(logits.flatten(1), generator)  # [M]: (k - i, Y, Z)
                k, y, z = pick // (S * S) + i, pick // S % S, pick % S
                charts[c, b, i, k, y] = 1
                charts[c, b, k + 1, j, z] = 1
            dead = ~(self.log_partition.detach() > -float("inf"))
            return charts.masked_fill(dead.view(1, batch, 1, 1, 1), 0.0)

    @cached_property
    def _best_spans(self) -> torch.Tensor:
        """``[B, N, N, S]`` the Viterbi parse as labelled spans (see :meth:`sample_spans`): the
        gradient of the max-semiring inside pass with respect to the preterminals and to
        anchored nonterminal scores. All 0 where no parse exists."""
        batch, N, _ = self.terms.shape
        NT = self.NT
        with torch.enable_grad():
            terms = self.terms.detach().requires_grad_()
            spans = (self.terms.new_zeros(batch, N, N, NT) if self._spans is None
                     else self._spans.detach()).requires_grad_()
            value = self._inside(terms, self.rules.detach(), self.roots.detach(), True, spans)
            ok = value > IMPOSSIBLE
            g_terms, g_spans = torch.autograd.grad(torch.where(ok, value, value.new_zeros(())).sum(),
                                                   (terms, spans))
        chart = self.terms.new_zeros(batch, N, N, NT + self.T)
        chart[..., :NT] = g_spans
        chart.diagonal(0, 1, 2)[:, NT:] = g_terms.transpose(1, 2)
        return chart.round()

    def kbest(self, k: int) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The ``k`` best parses, exactly, best first: ``scores [B, k]`` (float64, ``-inf`` where
        fewer than ``k`` exist) and their counts ``(terms [B, k, N, T], rules [B, k, NT, S, S],
        roots [B, k, NT])`` (all 0 for the missing ones; fewer columns when every batch element
        has fewer than ``k`` parses). Lawler's scheme over the parses' labelled spans, each
        sub-problem a masked Viterbi parse (:func:`~synattn.structs.cky.kbest.labelled_kbest`);
        :meth:`kbest_spans` gives the parses as labelled spans."""
        scores, spans = self.kbest_spans(k)
        terms, rules, roots = parse_counts(spans.transpose(0, 1), self.lengths, self.NT)
        return scores, (terms.transpose(0, 1), rules.transpose(0, 1), roots.transpose(0, 1))

    def kbest_spans(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`kbest` with the parses as labelled spans ``[B, k, N, N, S]`` (see
        :meth:`sample_spans`)."""
        from .kbest import labelled_kbest

        batch, N, _ = self.terms.shape
        NT, device = self.NT, self.terms.device
        terms, rules, roots = (p.detach() for p in (self.terms, self.rules, self.roots))
        pos = torch.arange(N)
        symbol = torch.arange(NT + self.T) >= NT  # preterminals
        one_word = (pos[:, None] == pos[None, :]).unsqueeze(-1)
        usable = torch.where(one_word, symbol, ~symbol & (pos[:, None] < pos[None, :]).unsqueeze(-1))

        def solve(sents: torch.Tensor, allowed: torch.Tensor) -> tuple[list[float], torch.Tensor]:
            if use_numba(terms):  # compiled Viterbi with back pointers (no autograd)
                best, spans = kernels("cky._cfg_viterbi_kernels").viterbi(
                    terms[sents], rules[sents], roots[sents], self.lengths[sents], allowed)
                return best.tolist(), spans
            sents, allowed = sents.to(device), allowed.to(device)
            kept = allowed.diagonal(0, 1, 2)[:, NT:].transpose(1, 2)  # [M, N, T]
            sub = SentCFG(torch.where(kept, terms[sents], NEG), rules[sents], roots[sents],
                          self.lengths[sents])
            sub._spans = torch.where(allowed[..., :NT], 0.0, NEG).to(terms.dtype)
            return sub.max.double().cpu().tolist(), sub._best_spans.cpu()

        best, spans = labelled_kbest(k, self.lengths, usable.expand(batch, N, N, NT + self.T),
                                     solve, terms.dtype)
        return best.to(device), spans.to(device)


class _LogPartition(torch.autograd.Function):
    """``log Z`` by the compiled kernels; backward: their marginals (explicit outside pass), or
    :class:`_Marginals` when a second derivative is being built."""

    @staticmethod
    def forward(ctx, terms, rules, roots, lengths, log_z_fn):
        ctx.log_z_fn = log_z_fn
        if not any(ctx.needs_input_grad[:3]):
            return kernels("cky._cfg_kernels").log_partition(terms, rules, roots, lengths)
        log_z, *mus = kernels("cky._cfg_kernels").marginals(terms, rules, roots, lengths)
        ctx.save_for_backward(terms, rules, roots, lengths, *mus)
        return log_z

    @staticmethod
    def backward(ctx, g):
        terms, rules, roots, lengths, *mus = ctx.saved_tensors
        if torch.is_grad_enabled():
            mus = _Marginals.apply(terms, rules, roots, lengths, ctx.log_z_fn)
        return tuple(mu * g.view(-1, *[1] * (mu.dim() - 1)) for mu in mus) + (None, None)


class _Marginals(torch.autograd.Function):
    """Expected counts ``(terms, rules, roots)`` by the compiled inside-outside pass; their
    backward (the Hessian of ``log Z`` times the incoming gradients) by autograd's double
    backward of the PyTorch recursion ``log_z_fn``."""

    @staticmethod
    def forward(ctx, terms, rules, roots, lengths, log_z_fn):
        ctx.log_z_fn = log_z_fn
        ctx.save_for_backward(terms, rules, roots)
        return kernels("cky._cfg_kernels").marginals(terms, rules, roots, lengths)[1:]

    @staticmethod
    def backward(ctx, *grads):
        parts = ctx.saved_tensors
        graph = torch.is_grad_enabled()
        with torch.enable_grad():
            xs = [p if graph and p.requires_grad else p.detach().requires_grad_() for p in parts]
            value = ctx.log_z_fn(*xs)
            mus = torch.autograd.grad(torch.where(value > IMPOSSIBLE, value, value.new_zeros(())).sum(),
                                      xs, create_graph=True)
            hs = torch.autograd.grad(mus, xs, grads, create_graph=graph, allow_unused=True)
        return tuple(torch.zeros_like(p) if h is None else h for p, h in zip(parts, hs)) + (None, None)


def parse_counts(spans: torch.Tensor, lengths: torch.Tensor, NT: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Labelled spans ``[..., B, N, N, S]`` (see :meth:`SentCFG.sample_spans`) → counts ``(terms
    [..., B, N, T], rules [..., B, NT, S, S], roots [..., B, NT])``: each span ``(i, j)`` of two
    words or more applies ``X → Y Z`` with ``Y`` over its widest proper span starting at ``i``
    and ``Z`` over the rest."""
    *lead, batch, N, _, S = spans.shape
    flat = spans.reshape(-1, N, N, S)
    P = flat.shape[0]
    terms = flat.diagonal(0, 1, 2)[:, NT:].transpose(1, 2)
    n = lengths.to(spans.device).repeat(P // batch if batch else 0)
    roots = flat[torch.arange(P, device=spans.device), 0, n - 1, :NT]
    present, label = flat.sum(-1) > 0.5, flat.argmax(-1)  # [P, N, N]
    pos = torch.arange(N, device=spans.device)
    inner = present.unsqueeze(2) & (pos < pos[:, None])  # [P, i, j, k]: (i, k) present, k < j
    split = torch.where(inner, pos, -1).amax(-1)  # [P, N, N]: end of the left child
    p, i, j = (present & (pos[:, None] < pos)).nonzero(as_tuple=True)
    k = split[p, i, j]
    rules = spans.new_zeros(P, NT, S, S)
    rules.index_put_((p, label[p, i, j], label[p, i, k], label[p, k + 1, j]),
                     torch.ones_like(k, dtype=spans.dtype), accumulate=True)
    return (terms.reshape(*lead, batch, N, S - NT), rules.reshape(*lead, batch, NT, S, S),
            roots.reshape(*lead, batch, NT))
