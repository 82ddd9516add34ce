"""Autoregressive greedy decoding: the batched path (an argmax of the raw logits each step, one
log-softmax over the steps at the end) gives bit for bit what the step-by-step decode gives
(log-softmax and ``max`` each step, float64 sums in step order), near-ties, other dtypes,
dtype changes and several passes included."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from synattn.structs import Autoregressive
from synattn.structs.backend import use_backend
from synattn.structs.sequence import autoregressive as module

C, B = 12, 3


@pytest.fixture(autouse=True, params=["auto", "torch"])
def backend(request):
    """Every test on the compiled pass (CPU, numba) and on the PyTorch operations."""
    if request.param == "auto":
        pytest.importorskip("numba")
    with use_backend(request.param):
        yield request.param


class TableModel:
    """Logits read from a table ``[N, C, B, C]`` by step, previous token and batch row (the state
    carries the step and the row, so beams may reorder it); counts its calls."""

    def __init__(self, table: torch.Tensor, dtypes=None):
        self.table, self.dtypes, self.calls = table, dtypes, 0

    def __call__(self, tokens, state):
        self.calls += 1
        step, row = state
        logits = self.table[step, tokens[:, 0], row].unsqueeze(1)  # [b, 1, C]
        if self.dtypes is not None:
            logits = logits.to(self.dtypes[int(step[0])])
        return logits, (step + 1, row)


def initial(b: int = B) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(b, dtype=torch.long), torch.arange(b)


def near_tie(row: torch.Tensor, first: int, second: int) -> None:
    """Makes ``row[second]`` the raw maximum and ``row[first]`` (earlier) the float just below
    it: the log-softmax (``x - max - log Z`` with ``log Z`` about 2) rounds the two into a tie,
    whose first maximum is ``first``."""
    row[second] = 1.0
    row[first] = torch.nextafter(torch.tensor(1.0, dtype=row.dtype), torch.tensor(0.0, dtype=row.dtype))


def table(n: int, seed: int, ties=(), dtype=torch.float32) -> torch.Tensor:
    """``[n, C, B, C]`` logits in [0.5, 0.8) (``log Z`` about 2 with a maximum of 1); each
    ``(step, first, second)`` of ``ties`` puts a near-tie in every row of that step."""
    gen = torch.Generator().manual_seed(seed)
    out = (0.5 + 0.3 * torch.rand(n, C, B, C, generator=gen, dtype=torch.float64)).to(dtype)
    for step, first, second in ties:
        for prev in range(C):
            for b in range(B):
                near_tie(out[step, prev, b], first, second)
    return out


def stepwise(model, n: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The step-by-step decode: log-softmax and max each step, float64 sums in step order."""
    state, tokens = initial(), torch.zeros(B, 1, dtype=torch.long)
    bests, chosen = [], []
    for _ in range(n):
        logits, state = model(tokens, state)
        best, tokens = (logits.log_softmax(-1) if normalize else logits).max(-1)
        bests.append(best)
        chosen.append(tokens)
    scores = torch.cat(bests, 1).double().cumsum(1)[:, -1]
    seqs = torch.cat(chosen, 1)
    return scores, seqs.masked_fill((scores == -float("inf")).unsqueeze(-1), -1)


def decode(model, n: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    return Autoregressive(model, initial(), C, n, normalize=normalize).greedy()


def test_the_near_tie_rounds_into_a_tie():
    """The test's premise: the raw argmax is the later token, the log-softmax's the earlier."""
    logits = table(1, 0, ties=[(0, 2, 7)])[0, 0]  # [B, C]
    assert (logits.argmax(-1) == 7).all() and (logits.log_softmax(-1).argmax(-1) == 2).all()


STEP = B * C * 4  # the bytes of one step's float32 logits


@pytest.mark.parametrize("pending", [None, 2 * STEP, STEP])  # one pass, every 2 steps, every step
def test_greedy_is_the_stepwise_decode_bit_for_bit(pending, monkeypatch):
    if pending is not None:
        monkeypatch.setattr(module, "PENDING_BYTES", pending)
    for ties in ([], [(1, 0, 5)], [(4, 3, 11)], [(0, 1, 2), (3, 6, 9)]):
        logits = table(5, 1, ties=ties)
        model = TableModel(logits)
        scores, seqs = decode(model, 5)
        expect = stepwise(TableModel(logits), 5)
        assert torch.equal(scores, expect[0]) and torch.equal(seqs, expect[1])
        if not ties:  # no second run of the model where nothing had to be checked again
            assert model.calls == 5
        for step, first, _ in ties:  # the earlier of the tied tokens, as max(-1) of log p picks
            assert (seqs[:, step] == first).all()


def test_a_near_tie_picks_the_beams_token(backend):
    """One step: the beam step ranks the tied earlier token first too, on both backends (the
    PyTorch step sorts stably: ``topk`` ordered exact ties arbitrarily)."""
    logits = table(1, 2, ties=[(0, 4, 10)])
    dist = Autoregressive(TableModel(logits), initial(), C, 1)
    scores, tokens = dist.beam_search(3)
    greedy_scores, greedy = dist.greedy()
    assert torch.equal(greedy, tokens[:, 0]) and (greedy[:, 0] == 4).all()
    assert torch.equal(greedy_scores, scores[:, 0])


@pytest.mark.parametrize("built, dtypes", [
    (torch.float64, [torch.float64] * 4),  # (near-ties of float64)
    (torch.float32, [torch.bfloat16] * 4),  # not batched: log-softmax and max each step
    (torch.float32, [torch.float32, torch.float32, torch.float64, torch.float64]),  # then stepwise
    (torch.float32, [torch.float16, torch.float32, torch.float32, torch.float32]),
])
def test_other_and_changing_dtypes(built, dtypes):
    logits = table(4, 3, ties=[(1, 0, 3), (2, 5, 6)], dtype=built)
    scores, seqs = decode(TableModel(logits, dtypes), 4)
    expect = stepwise(TableModel(logits, dtypes), 4)
    assert torch.equal(scores, expect[0]) and torch.equal(seqs, expect[1])
    assert scores.dtype == torch.float64


def test_unnormalised_and_impossible_rows():
    """normalize=False: the raw logits are the scores (no log-softmax to round); a row with no
    possible token scores -inf and is marked -1 (normalised, its log-softmax is NaN: as step by
    step)."""
    logits = table(3, 4)
    logits[1, :, 0] = -float("inf")  # batch row 0: nothing possible at step 1
    for normalize in (False, True):
        scores, seqs = decode(TableModel(logits), 3, normalize)
        expect = stepwise(TableModel(logits), 3, normalize)
        assert torch.equal(seqs, expect[1]) and torch.equal(scores[1:], expect[0][1:])
        if normalize:
            assert scores[0].isnan() and expect[0][0].isnan()
        else:
            assert scores[0] == -float("inf") and (seqs[0] == -1).all()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 16), n=st.integers(1, 5), pending=st.sampled_from([None, STEP, 3 * STEP]),
       ties=st.lists(st.tuples(st.integers(0, 4), st.integers(0, C - 2), st.integers(1, C - 1)),
                     max_size=3))
def test_greedy_matches_the_stepwise_decode(seed, n, pending, ties):
    ties = [(s, first, max(first + 1, second)) for s, first, second in ties if s < n]
    logits = table(n, seed, ties=ties)
    original = module.PENDING_BYTES
    if pending is not None:
        module.PENDING_BYTES = pending
    try:
        scores, seqs = decode(TableModel(logits), n)
    finally:
        module.PENDING_BYTES = original
    expect = stepwise(TableModel(logits), n)
    assert torch.equal(scores, expect[0]) and torch.equal(seqs, expect[1])


def test_pending_logits_are_bounded_by_the_storage_they_keep(monkeypatch):
    """Logits that are views of a larger tensor (a model's last position) keep all of it alive:
    the batched path counts that storage against PENDING_BYTES, so it normalises sooner."""
    logits = table(6, 5, ties=[(3, 2, 9)])
    inner = TableModel(logits)

    def model(tokens, state):
        last, state = inner(tokens, state)
        return torch.cat((last.expand(-1, 7, -1), last), 1)[:, -1:], state  # a view of [b, 8, C]

    sizes = []
    settle = Autoregressive._settle

    def counted(self, pending, *args, **kwargs):
        sizes.append(len(pending))
        return settle(self, pending, *args, **kwargs)

    monkeypatch.setattr(Autoregressive, "_settle", counted)
    monkeypatch.setattr(module, "PENDING_BYTES", 2 * 8 * STEP)
    scores, seqs = decode(model, 6)
    assert sizes == [2, 2]  # the second pass finds the near-tie of step 3: then step by step
    expect = stepwise(TableModel(logits), 6)
    assert torch.equal(scores, expect[0]) and torch.equal(seqs, expect[1])
