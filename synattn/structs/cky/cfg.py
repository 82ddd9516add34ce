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
largest entry (a sum whose every term underflows, below ``1e-300`` of that product of maxima,
counts as ``1e-300``). Marginals (expected counts of each term, rule and root) are the gradient
of ``log Z`` by autograd (as in torch-struct); the Viterbi parse is the gradient of the
max-semiring recursion, each maximum taken by ``torch.max`` so that ties route to one parse.
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..arguments import score_tensor
from ..constants import IMPOSSIBLE, NEG
from ..distribution import StructDistribution
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
        lengths = torch.as_tensor(lengths, device=terms.device).long()
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

    # --- inside -----------------------------------------------------------------------------------

    def _inside(self, terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor,
                viterbi: bool) -> torch.Tensor:
        """``[B]`` ``log Z`` (or the best parse's score, ``viterbi``).

        For each width the children are first combined over the split points, per pair of
        symbol kinds (nonterminal or preterminal on each side: ``P[b, i, Y, Z]``), then
        contracted with that block of the rules (a log-space matrix product)."""
        batch, N, _ = terms.shape
        NT = self.NT
        blocks = {(0, 0): rules[:, :, :NT, :NT], (0, 1): rules[:, :, :NT, NT:],
                  (1, 0): rules[:, :, NT:, :NT], (1, 1): rules[:, :, NT:, NT:]}
        blocks = {k: v.flatten(2).transpose(1, 2).unsqueeze(1) for k, v in blocks.items()}  # [B, 1, K, NT]

        def pairs(left, right):  # [B, n, Sy], [B, n, Sz] -> [B, n, Sy*Sz]
            return (left[..., :, None] + right[..., None, :]).flatten(2)

        def reduce(x, dim):
            return x.max(dim).values if viterbi else torch.logsumexp(x, dim)

        def contract(p, w):  # [B, n, K] with [B, 1, K, NT] -> [B, n, NT]
            if viterbi:
                return (p.unsqueeze(-1) + w).max(-2).values
            mp = p.amax(-1, keepdim=True).clamp_min(NEG).detach()
            mw = w.amax(-2, keepdim=True).clamp_min(NEG).detach()
            prod = torch.matmul((p - mp).exp().unsqueeze(-2), (w - mw).exp()).squeeze(-2)
            return prod.clamp_min(1e-300).log() + mp + mw.squeeze(-2)

        beta: dict[int, torch.Tensor] = {}  # width -> [B, N-w+1, NT]
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
                    p = (prod.clamp_min(1e-300).log() + m).flatten(2)  # [B, n, NT*NT]
                out.append(contract(p, blocks[(0, 0)]))
            beta[w] = reduce(torch.stack(out, -1), -1).clamp_min(NEG)
            top.append(beta[w][:, 0])  # [B, NT]: the span from word 0
        whole = torch.stack(top, 1)[torch.arange(batch, device=terms.device), self.lengths - 2]
        return reduce(whole + roots, -1)

    @staticmethod
    def _finite(x: torch.Tensor) -> torch.Tensor:
        return impossible_as_inf(x)

    @cached_property
    @fp32_inside
    def log_partition(self) -> torch.Tensor:
        """``[B]`` log-sum of all parses' scores (the sentence's log-likelihood for normalised
        parameters); differentiable."""
        return self._finite(self._inside(self.terms, self.rules, self.roots, False))

    def _gradient(self, viterbi: bool, create_graph: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        parts = (self.terms, self.rules, self.roots)
        with torch.enable_grad():
            terms, rules, roots = (p if p.requires_grad else p.detach().requires_grad_() for p in parts)
            value = self._inside(terms, rules, roots, viterbi)
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
            best = self._inside(self.terms, self.rules, self.roots, True)
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
        """``[B]`` score of parses given as counts ``(terms, rules, roots)``; ``-inf`` for one
        with a masked part."""
        if len(parts) != 3:
            raise ValueError("SentCFG: a parse is (terms, rules, roots) counts")
        total = torch.zeros((), dtype=self.terms.dtype, device=self.terms.device)
        for theta, count in zip((self.terms, self.rules, self.roots), parts):
            count = torch.as_tensor(count, device=theta.device)
            if count.shape != theta.shape:
                raise ValueError(f"SentCFG: parse counts must be {tuple(theta.shape)}, got "
                                 f"{tuple(count.shape)}")
            total = total + (count.to(theta.dtype) * theta).flatten(1).sum(1)
        return self._finite(total)
