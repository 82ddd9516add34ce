"""An autoregressive sequence model as a distribution over sequences: torch-struct's
``Autoregressive`` (greedy and beam search, ancestral sampling, ``log_prob``).

The model is any callable ``model(tokens, state) -> (logits, state)`` (torch-struct's
``AutoregressiveModel`` protocol): ``tokens [b, t]`` (long) are the inputs, ``state`` a tuple of
tensors ``[b, ...]`` (everything the model conditions on: an encoder's output, an RNN's hidden
state), ``logits [b, t, C]`` the scores of the next token after each input. A sequence ``y_1..y_N``
is scored by feeding ``start_class, y_1, ..., y_{N-1}``; with ``normalize=True`` (default) the
logits are log-softmaxed, so that ``log p(y) = Σ_t log softmax(logits_t)[y_t]``.

- ``log_prob(tokens)``: one teacher-forced call over the whole sequence;
- ``greedy()``: the best next token at each step (``beam_search(1)``);
- ``beam_search(K)``: the ``K`` best sequences that beam search keeps (exact once ``K >= C^{N-1}``,
  as every prefix then stays on the beam), best first; ``kbest(k)``/``topk(k)`` are its names in
  the other classes' API;
- ``sample(count, generator)``: exact ancestral samples;
- ``sample_without_replacement(count, generator)``: ``count`` distinct sequences drawn without
  replacement, exactly, by stochastic beam search (the Gumbel-top-k trick over sequences; Kool,
  van Hoof and Welling 2019);
- ``greedy_tempmax(alpha)``: greedy decoding relaxed by a softmax at inverse temperature
  ``alpha`` whose outputs are differentiable (differentiable scheduled sampling; Goyal, Dyer and
  Berg-Kirkpatrick 2017), torch-struct's method of that name.

Sequences are token indices ``[..., B, N]`` (torch-struct uses one-hot ``[..., B, N, C]``:
``log_prob(..., one_hot=True)`` takes those). Fixed length ``N`` (torch-struct's ``end_class``
is unused there too).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from synattn.limits import check_memory

from ..arguments import count as whole_count
from ..backend import kernels, use_numba
from ..distribution import _gumbel_argmax, _gumbel_noise, check_count

State = tuple[torch.Tensor, ...]

PENDING_BYTES = 1 << 22
"""Greedy decoding's batched path normalises the raw logits of its steps at the end, or sooner
once their storage (what the model's logits keep alive) reaches this many bytes: the memory it
holds beyond the step-by-step decode's is bounded (4 MiB)."""

_BATCHED = (torch.float32, torch.float64)  # the dtypes whose batched log-softmax is checked bit for bit


class Autoregressive:
    """Sequences of an autoregressive model (see the module docstring).

    Args:
        model: ``(tokens [b, t], state) -> (logits [b, t, C], state)``.
        initial_state: tuple of ``[B, ...]`` tensors, the batch's conditioning.
        n_classes: ``C``, the vocabulary size.
        n_length: ``N``, the sequence length.
        normalize: log-softmax the logits (False: they are log-probabilities or scores already).
        start_class: the token fed before the first one.

    Example:
        >>> emb = torch.randn(5, 5)
        >>> def model(tokens, state):
        ...     return emb[tokens] + state[0].unsqueeze(1), state
        >>> dist = Autoregressive(model, (torch.randn(2, 5),), n_classes=5, n_length=3)
        >>> scores, seqs = dist.beam_search(4)
        >>> seqs.shape, torch.allclose(dist.log_prob(seqs[:, 0]).double(), scores[:, 0])  # (scores: float64)
        (torch.Size([2, 4, 3]), True)
    """

    def __init__(self, model: Callable[[torch.Tensor, State], tuple[torch.Tensor, State]],
                 initial_state: State, n_classes: int, n_length: int, normalize: bool = True,
                 start_class: int = 0):
        if not isinstance(initial_state, tuple) or not initial_state or not all(
                isinstance(s, torch.Tensor) for s in initial_state):
            raise ValueError("Autoregressive: initial_state must be a non-empty tuple of tensors [B, ...]")
        self.model, self.state = model, initial_state
        self.n_classes = whole_count(n_classes, "Autoregressive: n_classes")
        self.n_length = whole_count(n_length, "Autoregressive: n_length")
        if not 0 <= int(start_class) < self.n_classes:
            raise ValueError(f"Autoregressive: start_class must be in 0..{self.n_classes - 1}, got {start_class}")
        self.start_class, self.normalize = int(start_class), bool(normalize)
        self.batch = initial_state[0].shape[0]
        self.device = initial_state[0].device

    def _logits(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """The model's raw logits ``[b, t, C]`` after ``tokens [b, t]`` (or token distributions
        ``[b, t, C]``), their shapes checked, and its next state."""
        logits, state = self.model(tokens, state)
        self._check(tokens, logits, state)
        return logits, state

    def _check(self, tokens: torch.Tensor, logits: torch.Tensor, state: State) -> None:
        """Raises unless the model returned logits ``[b, t, C]`` after ``tokens [b, t, ...]`` and a
        state of tensors ``[b, ...]``."""
        b, t = tokens.shape[:2]
        if logits.shape != (b, t, self.n_classes):
            raise ValueError(f"Autoregressive: the model must return logits [{b}, {t}, "
                             f"{self.n_classes}], got {tuple(logits.shape)}")
        if any(s.shape[0] != b for s in state):
            raise ValueError(f"Autoregressive: the model must return a state of tensors [{b}, ...]")

    def _call(self, tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        logits, state = self._logits(tokens, state)
        return (logits.log_softmax(-1) if self.normalize else logits), state

    def _repeat(self, k: int) -> State:
        """The initial state repeated ``k`` times per batch element, ``[B * k, ...]`` (b-major)."""
        return tuple(s.repeat_interleave(k, 0) for s in self.state)

    def log_prob(self, tokens: torch.Tensor, one_hot: bool = False) -> torch.Tensor:
        """``[..., B]`` ``log p(tokens)`` of sequences ``[..., B, N]`` (``one_hot``: ``[..., B, N,
        C]``, torch-struct's layout); differentiable through the model."""
        tokens = torch.as_tensor(tokens, device=self.device)
        if one_hot:
            tokens = tokens.argmax(-1)
        if tokens.shape[-2:] != (self.batch, self.n_length) or tokens.is_floating_point():
            raise ValueError(f"Autoregressive.log_prob: tokens must be integers [..., {self.batch}, "
                             f"{self.n_length}], got {tokens.dtype} {tuple(tokens.shape)}")
        if bool(((tokens < 0) | (tokens >= self.n_classes)).any()):
            raise ValueError(f"Autoregressive.log_prob: tokens must be in 0..{self.n_classes - 1}")
        lead = tokens.shape[:-2]
        S = math.prod(lead)
        flat = tokens.reshape(S, self.batch, self.n_length).transpose(0, 1).reshape(-1, self.n_length)
        inputs = torch.cat((torch.full_like(flat[:, :1], self.start_class), flat[:, :-1]), 1)
        logp, _ = self._call(inputs, self._repeat(S))  # [B*S, N, C]
        out = logp.gather(-1, flat.unsqueeze(-1)).squeeze(-1).sum(-1)  # [B*S]
        return out.view(self.batch, S).transpose(0, 1).reshape(*lead, self.batch)

    @torch.no_grad()
    def beam_search(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` sequences left on the beam: ``scores [B, k]`` (float64, their ``log p``, ``-inf``
        where fewer than ``k`` sequences exist) and tokens ``[B, k, N]`` (``-1`` for missing
        ones), best first. Exact (the ``k`` best sequences) once ``k >= C^(N-1)``."""
        scores, _, tokens = self._search(whole_count(k, "Autoregressive.beam_search: k"))
        return scores, tokens

    @torch.no_grad()
    def sample_without_replacement(self, count: int,
                                   generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, N]`` ``count`` distinct sequences per batch element drawn without
        replacement (``-1`` rows past the number of sequences of nonzero probability), exactly:
        the ``count`` largest of the Gumbel-perturbed ``log p(y) + G_y`` over all sequences, found
        by stochastic beam search (Kool et al. 2019): a prefix's key is the largest perturbed
        score of its continuations, drawn top-down as a Gumbel truncated at its parent's key, so
        the ``count`` best prefixes of each length hold the ``count`` best sequences' prefixes.
        In the order of their keys: the first is an ancestral sample, the first ``j`` a sample of
        ``j`` without replacement. torch-struct's ``sample_without_replacement`` perturbs each
        step's logits independently and keeps a beam, which is not this distribution.

        Args:
            count: how many sequences per batch element (``sample_shape[0]`` in torch-struct).
            generator: the random generator (default: torch's global one).
        """
        if isinstance(count, torch.Size) and len(count) == 1:
            count = count[0]  # torch-struct's sample_shape
        _, _, tokens = self._search(check_count(count), stochastic=True, generator=generator,
                                    option="Autoregressive.sample_without_replacement: count")
        return tokens.transpose(0, 1)

    def _check_beam(self, k: int, option: str) -> None:
        """Refuse a beam of ``k`` whose tensors would not fit in memory (before the model runs):
        the ``[B, k, N]`` results, and per prefix on the beam (at most ``min(k, C^(N-1))``) its
        state, ``C`` float64 scores to rank and ``N`` back pointers; the time grows alike."""
        C, N = self.n_classes, self.n_length
        width = k if (N - 1) * math.log(C) >= math.log(k) else C ** (N - 1)
        state = sum(math.prod(s.shape[1:]) * s.element_size() for s in self.state)
        need = self.batch * (k * (N + 2) * 8 + width * (4 * C * 8 + 2 * N * 8 + state))
        check_memory(option, k, need, f"a beam of {k} over {self.batch} x {N} tokens of {C} classes")

    def _search(self, k: int, stochastic: bool = False, generator: torch.Generator | None = None,
                option: str = "Autoregressive.beam_search: k"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Beam search over ``k`` prefixes ranked by ``log p`` or (``stochastic``) by their
        Gumbel keys (stochastic beam search): ``log p [B, k]`` (float64),
        keys ``[B, k]`` and tokens ``[B, k, N]`` (``-1`` where ``-inf``), best key first."""
        B, C = self.batch, self.n_classes
        self._check_beam(k, option)
        if k == 1 and not stochastic:
            scores, tokens = self._greedy()
            return scores.unsqueeze(1), scores.unsqueeze(1), tokens.unsqueeze(1)
        # One live prefix (the start) per batch element: the model runs on the live prefixes only,
        # ``width`` per element (fewer than k while C^t < k), never on padding.
        state, width = self.state, 1
        scores = torch.zeros(B, 1, dtype=torch.float64, device=self.device)
        keys = scores  # a prefix's key: log p, or log p + its Gumbel (the root's is 0)
        tokens = torch.full((B, 1), self.start_class, dtype=torch.long, device=self.device)
        rows = torch.arange(B, device=self.device).unsqueeze(1)  # the first row of each element
        beams, chosen = [], []
        for t in range(self.n_length):
            logp, state = self._call(tokens, state)  # [B * width, 1, C]
            logp, kept = logp.view(B, width, C), min(k, width * C)
            if stochastic:
                total = scores.unsqueeze(-1) + logp  # [B, width, C], float64
                ranked = _truncated_gumbel(total, keys, generator)
                best, beam, token = _best_children(torch.zeros_like(scores), ranked, kept)
                scores = total.view(B, width * C).gather(1, beam * C + token)
            else:
                best, beam, token = _best_children(scores, logp, kept)  # [B, kept]
                scores = best
            if t < self.n_length - 1:  # (the last state is not needed)
                keep = (rows + beam).view(-1)
                state = tuple(s.index_select(0, keep) for s in state)
            if kept != width:
                rows = torch.arange(B, device=self.device).unsqueeze(1) * kept
            keys, tokens, width = best, token.view(-1, 1), kept
            beams.append(beam)
            chosen.append(token)
        at = torch.arange(width, device=self.device).expand(B, width)
        out = []
        for t in range(self.n_length - 1, -1, -1):  # back pointers
            out.append(chosen[t].gather(1, at))
            at = beams[t].gather(1, at)
        seqs = torch.stack(out[::-1], -1).masked_fill((keys == -float("inf")).unsqueeze(-1), -1)
        if width < k:  # fewer sequences than k: padding
            pad = k - width
            scores = torch.cat((scores, scores.new_full((B, pad), -float("inf"))), 1)
            keys = torch.cat((keys, keys.new_full((B, pad), -float("inf"))), 1)
            seqs = torch.cat((seqs, seqs.new_full((B, pad, self.n_length), -1)), 1)
        return scores, keys, seqs

    def _greedy(self, batched: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding: ``scores [B]`` (float64, the chosen tokens' ``log p`` summed in step
        order, as the beam sums them) and tokens ``[B, N]`` (``-1`` rows where the score is
        ``-inf``), each token the first maximum of its step's ``log p``.

        One prefix per batch element, so the model is handed back its own state (no beam to
        reorder) and there are no back pointers. ``batched``: on CPU with float32/float64 logits
        (any logits when ``normalize=False``) each step takes one ``argmax`` of the raw logits,
        whose order the log-softmax keeps (it subtracts one number from a row), and the
        log-softmax and the chosen values come from one pass over the steps' logits at the end
        (or whenever they hold :data:`PENDING_BYTES`), its rows bit for bit the per-step ones.
        Where a row's largest logit exceeds an earlier one by less than about half an ulp of
        ``log Z``, the subtraction rounds the two into a tie whose first maximum is the earlier
        token: the pass checks that the first maxima of its ``log p`` are the chosen tokens,
        and where one is not the decode runs again from the start step by step (log-softmax and
        ``max`` each step; the model is called again). Other dtypes and devices, and logits that
        change dtype midway, take the step-by-step path (from there on).
        """
        B, N = self.batch, self.n_length
        state = self.state
        tokens = torch.full((B, 1), self.start_class, dtype=torch.long, device=self.device)
        chosen: list[torch.Tensor] = []  # [B, 1] tokens
        pending: list[torch.Tensor] = []  # raw logits [B, 1, C] of the batched steps not settled
        values: list[torch.Tensor] = []  # log p [B, 1] of the steps taken one by one
        scores: torch.Tensor | None = None  # [B] float64 sums of the settled steps
        held, dtype = 0, None  # the pending logits' bytes, the logits' dtype so far
        model, shape = self.model, (B, 1, self.n_classes)
        for t in range(N):
            logits, state = model(tokens, state)  # [B, 1, C]
            if logits.shape != shape or logits.dtype is not dtype or [
                    s for s in state if s.shape[0] != B]:  # the first step, or a change
                self._check(tokens, logits, state)  # (raises)
                if batched and self.normalize and (dtype is not None or logits.dtype not in _BATCHED
                                                   or logits.device.type != "cpu"):
                    # not batchable (from the first step, or the dtype changed): step by step
                    if pending:
                        scores = self._settle(pending, torch.cat(chosen[t - len(pending):], 1), 0,
                                              scores, last=False)
                        if scores is None:
                            return self._greedy(batched=False)
                    batched = False
                dtype = logits.dtype
            if batched:
                tokens = logits.argmax(-1)  # [B, 1], the first maximum (as max(-1))
                pending.append(logits)
                chosen.append(tokens)
                held += logits.untyped_storage().nbytes()
                if held >= PENDING_BYTES and t < N - 1:
                    scores = self._settle(pending, torch.cat(chosen[t + 1 - len(pending):], 1), 0,
                                          scores, last=False)
                    if scores is None:
                        return self._greedy(batched=False)
                    held = 0
            else:
                best, tokens = (logits.log_softmax(-1) if self.normalize else logits).max(-1)
                values.append(best)  # [B, 1]
                chosen.append(tokens)
        seqs = torch.cat(chosen, 1)  # [B, N]
        if pending:  # batched to the end: the last pass also marks the impossible rows
            scores = self._settle(pending, seqs, N - len(pending), scores, last=True)
            if scores is None:
                return self._greedy(batched=False)
            return scores, seqs
        # float64 sums in step order (a scan): the beam's scores + logp, step by step
        steps = torch.cat(values if scores is None else [scores.unsqueeze(1)] + values, 1)
        scores = steps.cumsum(1, dtype=torch.float64).select(1, -1)
        return scores, seqs.masked_fill((scores == -float("inf")).unsqueeze(-1), -1)

    def _settle(self, pending: list[torch.Tensor], tokens: torch.Tensor, start: int,
                scores: torch.Tensor | None, last: bool) -> torch.Tensor | None:
        """The float64 sums ``[B]`` after ``scores`` (None: from the first step) of the ``log p``
        of the tokens chosen at ``s`` batched steps (``tokens [B, n]``, theirs at columns
        ``start..start+s-1``; with ``last`` the rows scored ``-inf`` are set to ``-1`` in place)
        from the steps' raw logits ``pending`` (``s`` of ``[B, 1, C]``; emptied), one log-softmax
        over all; in step order. None where a token is not the first maximum of its ``log p``
        (a near-tie that the subtraction of ``log Z`` rounded into a tie with an earlier token).
        A compiled pass on CPU (:func:`~synattn.structs.sequence._beam_kernels.greedy_settle`),
        else ``max`` (the values and first maxima at once) and ``cumsum``."""
        logp = torch.cat(pending, 1)  # [B, s, C]
        pending.clear()
        if self.normalize:
            logp = logp.log_softmax(-1)
        if use_numba(logp):
            return kernels("sequence._beam_kernels").greedy_settle(logp, tokens, start, scores, last)
        mine = tokens[:, start:start + logp.shape[1]]
        if self.normalize:
            best, first = logp.max(-1)  # [B, s]
            if not torch.equal(first, mine):
                return None
        else:
            best = logp.gather(-1, mine.unsqueeze(-1)).squeeze(-1)
        steps = best if scores is None else torch.cat((scores.unsqueeze(1), best.double()), 1)
        scores = steps.cumsum(1, dtype=torch.float64).select(1, -1)
        if last:
            tokens.masked_fill_((scores == -float("inf")).unsqueeze(-1), -1)
        return scores

    @torch.no_grad()
    def greedy(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``scores [B]`` and tokens ``[B, N]`` of greedy decoding (``beam_search(1)``)."""
        return self._greedy()

    def greedy_tempmax(self, alpha: float, gumbel: bool = False,
                       generator: torch.Generator | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Greedy decoding relaxed for differentiation (torch-struct's ``greedy_tempmax``;
        differentiable scheduled sampling, Goyal, Dyer and Berg-Kirkpatrick 2017): at each step
        the score ``s_t = max_c (s_{t-1} + logits_t[c])`` takes the best token, but the model is
        fed ``softmax(alpha * (s_{t-1} + logits_t))`` ``[B, 1, C]``, a distribution over tokens
        (the first input is the one-hot ``start_class``), so the model must accept float inputs
        ``[b, t, C]`` (e.g. ``inputs @ embedding.weight``). ``alpha`` is the inverse temperature
        (large: the hard greedy decode).

        Args:
            alpha: inverse temperature of the relaxed argmax.
            gumbel: add standard Gumbel noise to each step's logits before normalising, as
                torch-struct 0.5 always does here (it passes ``alpha`` as its ``gumbel`` flag);
                False (default) keeps the decode deterministic.
            generator: the noise's random generator (default: torch's global one).

        Returns:
            ``path [B, N, C]``: the gradient of the final score with respect to each step's
            scores ``s_{t-1} + logits_t`` (the chosen tokens' one-hots plus what flows through
            the soft inputs), ``score [B]`` and the (normalised) ``logits [B, N, C]``; all three
            differentiable (with respect to the model and the initial state).
        """
        B, C = self.batch, self.n_classes
        first = self.state[0]
        dtype = first.dtype if first.is_floating_point() else torch.get_default_dtype()
        inputs = torch.nn.functional.one_hot(
            torch.full((B, 1), self.start_class, device=self.device), C).to(dtype)
        state, score = self.state, torch.zeros(B, dtype=dtype, device=self.device)
        steps, all_logits = [], []
        with torch.enable_grad():
            for _ in range(self.n_length):
                logits, state = self._logits(inputs, state)
                logits = logits[:, -1]
                if gumbel:
                    logits = logits + _gumbel_noise(logits.shape, generator, logits.device).to(logits.dtype)
                if self.normalize:
                    logits = logits.log_softmax(-1)
                step = score.unsqueeze(-1) + logits  # [B, C]
                if not step.requires_grad:
                    step.requires_grad_()
                steps.append(step)
                all_logits.append(logits)
                score = step.amax(-1)
                inputs = (alpha * step).softmax(-1).unsqueeze(1)
            path = torch.autograd.grad(score.sum(), steps, create_graph=True)
        return torch.stack(path, 1), score, torch.stack(all_logits, 1)

    def kbest(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`beam_search` under the other classes' name (exact only for ``k >= C^(N-1)``)."""
        return self.beam_search(k)

    def topk(self, k: int) -> torch.Tensor:
        """``[k, B, N]`` the beam's sequences with ``k`` first (torch-struct's ``beam_topk``
        layout, token indices instead of one-hot)."""
        return self.beam_search(k)[1].transpose(0, 1)

    @property
    def argmax(self) -> torch.Tensor:
        """``[B, N]`` the greedy sequence (torch-struct's ``greedy_max``; not the exact mode)."""
        return self.greedy()[1]

    @torch.no_grad()
    def sample(self, count: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[count, B, N]`` exact ancestral samples, token by token."""
        count = check_count(count)
        state = self._repeat(count)
        tokens = torch.full((self.batch * count, 1), self.start_class, dtype=torch.long,
                            device=self.device)
        out = []
        for _ in range(self.n_length):
            logp, state = self._call(tokens, state)
            tokens = _gumbel_argmax(logp[:, -1].double(), generator).view(-1, 1)
            out.append(tokens)
        return torch.cat(out, 1).view(self.batch, count, self.n_length).transpose(0, 1)


def _best_children(scores: torch.Tensor, logp: torch.Tensor, k: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` best of ``scores [B, W] (float64) + logp [B, W, C]``, best first: their values
    ``[B, k]`` (float64), prefixes ``w`` and tokens ``c`` (``[B, k]``). A compiled pass on CPU
    (:mod:`~synattn.structs.sequence._beam_kernels`), else a stable descending sort of the
    flattened sums (``max`` for ``k = 1``, which is as fast as the compiled pass's call); on
    both paths exact ties keep the smaller flat index first (``topk`` orders them arbitrarily)."""
    if k > 1 and use_numba(logp):
        return kernels("sequence._beam_kernels").best_children(scores, logp, k)
    B, W, C = logp.shape
    total = (scores.unsqueeze(-1) + logp).view(B, W * C)
    if k == 1:
        best, index = total.max(-1, keepdim=True)
    else:
        best, index = total.sort(dim=-1, descending=True, stable=True)
        best, index = best[:, :k].contiguous(), index[:, :k].contiguous()
    if W == 1:
        return best, torch.zeros_like(index), index
    return best, index.div(C, rounding_mode="floor"), index % C


def _truncated_gumbel(total: torch.Tensor, parent: torch.Tensor,
                      generator: torch.Generator | None) -> torch.Tensor:
    """``[B, k, C]`` keys of the children of ``k`` prefixes (Kool et al. 2019, appendix B): each
    child's ``G ~ Gumbel(total)`` (``total``: its ``log p``), then all children of a prefix
    conditioned on their maximum being the parent's key ``parent [B, k]``,
    ``-log(exp(-parent) - exp(-Z) + exp(-G))`` with ``Z = max G``, written stably. ``-inf`` for
    children of probability 0."""
    g = total + _gumbel_noise(total.shape, generator, total.device)
    z = g.amax(-1, keepdim=True)
    x = g - z  # <= 0; log(1 - exp(x)) with log1p or expm1 by range
    log1mexp = torch.where(x > -0.6931, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))
    v = parent.unsqueeze(-1) - g + log1mexp
    keys = parent.unsqueeze(-1) - v.clamp_min(0) - torch.log1p(torch.exp(-v.abs()))
    return torch.where(total > -float("inf"), keys, torch.full_like(keys, -float("inf")))
