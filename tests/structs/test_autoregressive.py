"""Autoregressive (torch-struct's beam search / sampling wrapper) against every sequence of a
tiny vocabulary and length."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.structs import Autoregressive

C, N, B = 3, 3, 2


class TinyRNN(torch.nn.Module):
    """A GRU over token embeddings whose hidden state is the model's state."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.cell = torch.nn.Embedding(C, 4), torch.nn.GRUCell(4, 4)
        self.out = torch.nn.Linear(4, C)
        for p in self.parameters():
            p.data.mul_(3).double()
        self.double()

    def forward(self, tokens, state):
        h, logits = state[0], []
        for t in range(tokens.shape[1]):
            h = self.cell(self.emb(tokens[:, t]), h)
            logits.append(self.out(h))
        return torch.stack(logits, 1), (h,)


def make():
    init = (torch.randn(B, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1)),)
    return Autoregressive(TinyRNN(), init, n_classes=C, n_length=N)


def all_sequences() -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(C), repeat=N)))  # [C^N, N]


def test_log_prob_normalises_and_beam_search_is_exact_with_a_wide_beam():
    dist = make()
    seqs = all_sequences()
    lp = dist.log_prob(seqs.unsqueeze(1).expand(-1, B, -1))  # [C^N, B]
    assert torch.allclose(lp.logsumexp(0), torch.zeros(B, dtype=torch.float64), atol=1e-9)
    k = C ** (N - 1)
    scores, tokens = dist.beam_search(k)
    exact = lp.sort(0, descending=True)
    assert torch.allclose(scores, exact.values[:k].T.to(scores.dtype), atol=1e-6)
    for b in range(B):
        assert torch.equal(tokens[b], seqs[exact.indices[:k, b]])
    # a beam wider than the space: every sequence once, in order, then padding
    scores, tokens = dist.beam_search(C ** N + 2)
    assert torch.allclose(scores[:, :C ** N], exact.values.T.to(scores.dtype), atol=1e-6)
    assert (scores[:, C ** N:] == -float("inf")).all() and (tokens[:, C ** N:] == -1).all()
    assert {tuple(s) for s in tokens[0, :C ** N].tolist()} == {tuple(s) for s in seqs.tolist()}
    # every sequence on the beam is scored by its true log-probability, best first
    narrow, seq = dist.beam_search(2)
    assert torch.allclose(narrow[:, 0], dist.log_prob(seq[:, 0]).to(narrow.dtype), atol=1e-6)
    assert (narrow[:, 0] >= narrow[:, 1]).all()
    assert torch.equal(dist.topk(2), seq.transpose(0, 1))
    # one-hot values (torch-struct's layout) give the same log_prob
    assert torch.allclose(dist.log_prob(torch.nn.functional.one_hot(seq[:, 0], C), one_hot=True),
                          dist.log_prob(seq[:, 0]))


def test_greedy_takes_the_best_next_token_each_step():
    dist = make()
    score, greedy = dist.greedy()
    seqs = all_sequences()
    for b in range(B):
        prefix = []
        for t in range(N):
            cands = [tuple(prefix) + (c,) + (0,) * (N - t - 1) for c in range(C)]
            # the log-probability of a prefix: the sum over its continuations
            lp = dist.log_prob(seqs.unsqueeze(1).expand(-1, B, -1))[:, b]
            pre = torch.stack([lp[(seqs[:, :t + 1] == torch.tensor(c[:t + 1])).all(1)].logsumexp(0)
                               for c in cands])
            prefix.append(int(pre.argmax()))
        assert greedy[b].tolist() == prefix
    assert torch.allclose(score, dist.log_prob(greedy).to(score.dtype), atol=1e-6)


def test_samples_follow_the_sequence_distribution():
    dist = make()
    draws = dist.sample(4000, generator=torch.Generator().manual_seed(0))  # [4000, B, N]
    assert draws.shape == (4000, B, N)
    seqs = all_sequences()
    lp = dist.log_prob(seqs.unsqueeze(1).expand(-1, B, -1))
    freq = (draws.unsqueeze(1) == seqs.view(1, -1, 1, N)).all(-1).double().mean(0)  # [C^N, B]
    assert torch.allclose(freq, lp.exp(), atol=0.03)


def test_log_prob_is_differentiable_and_errors():
    dist = make()
    lp = dist.log_prob(torch.zeros(B, N, dtype=torch.long))
    lp.sum().backward()
    assert dist.model.out.weight.grad is not None
    with pytest.raises(ValueError, match="tokens must be"):
        dist.log_prob(torch.zeros(B, N + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="logits"):
        Autoregressive(lambda t, s: (torch.zeros(t.shape[0], t.shape[1], C + 1), s),
                       (torch.zeros(B, 1),), C, N).greedy()


def test_matches_torch_struct_on_its_model_protocol():
    torch_struct = pytest.importorskip("torch_struct")
    dist = make()
    peer = torch_struct.Autoregressive(dist.model, dist.state, C, N)
    seq = dist.sample(3, generator=torch.Generator().manual_seed(2))
    one_hot = torch.nn.functional.one_hot(seq, C)
    assert torch.allclose(dist.log_prob(seq), peer.log_prob(one_hot).detach())
    path, score, _ = peer.greedy_max()  # one-hot [B, N, C], [B]
    ours_score, ours = dist.greedy()
    assert torch.equal(ours, path.argmax(-1)) and torch.allclose(ours_score.double(), score.detach())


def batch_of(dist: Autoregressive, copies: int) -> Autoregressive:
    """The same model with its batch repeated ``copies`` times (independent draws in one call)."""
    state = tuple(s.repeat(copies, *([1] * (s.dim() - 1))) for s in dist.state)
    return Autoregressive(dist.model, state, C, N, normalize=dist.normalize)


def test_sampling_without_replacement_has_the_exact_inclusion_probabilities():
    """Two draws without replacement: the first is a sample of p, and y is among the two with
    probability p(y) + sum_{x != y} p(x) p(y) / (1 - p(x)) (Plackett-Luce); the two differ."""
    dist = make()
    seqs = all_sequences()
    p = dist.log_prob(seqs.unsqueeze(1).expand(-1, B, -1)).exp()  # [C^N, B]
    pair = p.unsqueeze(1) * p.unsqueeze(0) / (1 - p.unsqueeze(1))  # [x, y, B]: x then y
    inclusion = p + pair.sum(0) - pair.diagonal(0, 0, 1).T
    draws = batch_of(dist, 3000).sample_without_replacement(2, generator=torch.Generator().manual_seed(0))
    draws = draws.view(2, 3000, B, N)
    hit = (draws.unsqueeze(2) == seqs.view(1, 1, -1, 1, N)).all(-1).double()  # [2, R, C^N, B]
    assert (hit.sum(2) == 1).all() and not (draws[0] == draws[1]).all(-1).any()  # distinct
    assert torch.allclose(hit[0].mean(0), p, atol=0.03)
    assert torch.allclose(hit.sum(0).mean(0), inclusion, atol=0.03)


def test_sampling_without_replacement_lists_the_support_once():
    """count past the support: every sequence of nonzero probability once, then -1 rows; a
    token masked by the model (-inf logits) never appears."""
    base = make()

    def masked(tokens, state):
        logits, state = base.model(tokens, state)
        return logits.masked_fill(torch.arange(C) == 2, -float("inf")), state

    dist = Autoregressive(masked, base.state, C, N)
    draws = dist.sample_without_replacement(2 ** N + 2, generator=torch.Generator().manual_seed(1))
    assert draws.shape == (2 ** N + 2, B, N)
    for b in range(B):
        listed = {tuple(s) for s in draws[:2 ** N, b].tolist()}
        assert listed == set(itertools.product(range(2), repeat=N))
        assert (draws[2 ** N:, b] == -1).all()
    with pytest.raises(ValueError, match="count"):
        dist.sample_without_replacement(0)


class SoftRNN(TinyRNN):
    """TinyRNN that also reads token distributions ``[b, t, C]`` (greedy_tempmax's inputs)."""

    def forward(self, tokens, state):
        h, logits = state[0], []
        for t in range(tokens.shape[1]):
            x = self.emb(tokens[:, t]) if not tokens.is_floating_point() else tokens[:, t] @ self.emb.weight
            h = self.cell(x, h)
            logits.append(self.out(h))
        return torch.stack(logits, 1), (h,)


@pytest.mark.parametrize("gumbel", [False, True])
def test_greedy_tempmax_matches_torch_struct(gumbel, monkeypatch):
    """The same relaxed greedy decode as torch-struct's greedy_tempmax, fed the same Gumbel
    noise (torch-struct always adds it; zero noise stands for gumbel=False)."""
    torch_struct = pytest.importorskip("torch_struct")
    from synattn.structs.sequence import autoregressive
    init = (torch.randn(B, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1)),)
    dist = Autoregressive(SoftRNN(), init, C, N)
    gen = torch.Generator().manual_seed(3)
    noise = [torch.randn(B, C, dtype=torch.float64, generator=gen) if gumbel else torch.zeros(B, C)
             for _ in range(N)]
    ours_noise, peer_noise = iter(noise), iter(noise)
    monkeypatch.setattr(autoregressive, "_gumbel_noise", lambda shape, g, d: next(ours_noise))
    monkeypatch.setattr(torch.distributions.Gumbel, "sample",
                        lambda self, shape: next(peer_noise).view(shape))
    path, score, logits = dist.greedy_tempmax(2.0, gumbel=gumbel)
    peer = torch_struct.Autoregressive(dist.model, init, C, N).greedy_tempmax(2.0)
    for ours, theirs in zip((path, score, logits), peer):
        assert torch.allclose(ours, theirs.to(ours.dtype), atol=1e-10)
    # the hard decode is greedy()'s when there is no noise and the temperature is near 0
    if not gumbel:
        sharp_path, sharp_score, _ = dist.greedy_tempmax(1e4)
        hard_score, hard = dist.greedy()
        assert torch.equal(sharp_path.argmax(-1), hard) and torch.allclose(sharp_score, hard_score)


def test_greedy_tempmax_is_differentiable():
    """gradcheck of all three outputs with respect to the initial state (no noise)."""
    model = SoftRNN()

    def run(h):
        return Autoregressive(model, (h,), C, N).greedy_tempmax(1.5)

    h = torch.randn(B, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4),
                    requires_grad=True)
    assert torch.autograd.gradcheck(run, (h,))


def test_compiled_beam_step_matches_topk():
    """The compiled step (CPU) gives torch.topk's k best children: the same values, the same
    children where values differ, ties (integer scores) in flat order, -inf children last."""
    pytest.importorskip("numba")
    from synattn.structs.sequence._beam_kernels import best_children
    gen = torch.Generator().manual_seed(5)
    for W, Cn, k, tied in ((1, 7, 3, False), (4, 5, 20, False), (3, 6, 18, True), (4, 5, 7, True)):
        scores = torch.randn(3, W, dtype=torch.float64, generator=gen)
        logp = torch.randn(3, W, Cn, generator=gen)
        if tied:
            scores, logp = scores.round(), logp.round()
            logp[0, 0, :2] = -float("inf")
        best, beam, token = best_children(scores, logp, k)
        total = (scores.unsqueeze(-1) + logp).view(3, -1)
        values, index = total.topk(k, -1)
        assert torch.equal(best, values)
        assert torch.equal(total.gather(1, beam * Cn + token), best)
        flat = beam * Cn + token
        assert all(len(set(row)) == k for row in flat.tolist())  # distinct children
        if not tied:
            assert torch.equal(flat, index)
        else:  # ties keep the smaller flat index first
            same = best[:, 1:] == best[:, :-1]
            assert (flat[:, 1:][same] > flat[:, :-1][same]).all()


def test_compiled_and_torch_paths_agree():
    """Beam search and sampling without replacement give the same results on either backend."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend
    dist = make()
    with use_backend("torch"):
        scores, tokens = dist.beam_search(5)
        draws = dist.sample_without_replacement(4, generator=torch.Generator().manual_seed(6))
    assert torch.equal(dist.beam_search(5)[0], scores) and torch.equal(dist.beam_search(5)[1], tokens)
    assert torch.equal(dist.sample_without_replacement(4, generator=torch.Generator().manual_seed(6)), draws)


def test_greedy_keeps_the_state_in_place_and_scores_as_the_beam():
    """Greedy decoding (beam_search(1)) hands the model back its own state each step (no beam to
    reorder: the old path index-selected it every step), sums the float64 scores in step order
    as the beam does, and marks a batch element whose every continuation is impossible (-inf, -1)."""
    dist = make()
    returned, handed = [], []

    def model(tokens, state):
        handed.append(state[0])
        logits, state = dist.model(tokens, state)
        logits = logits.clone()
        logits[1, :, 1:] = -float("inf")  # element 1: only token 0 is possible
        if len(handed) == N:
            logits[0] = -float("inf")  # element 0: nothing at the last step
        returned.append(state[0])
        return logits, state

    greedy = Autoregressive(model, dist.state, C, N, normalize=False)
    scores, tokens = greedy.beam_search(1)
    assert all(a is b for a, b in zip(handed[1:], returned[:-1])) and len(handed) == N
    assert scores[0, 0] == -float("inf") and (tokens[0] == -1).all()
    assert (tokens[1, 0] == 0).all()
    logits, _ = dist.model(torch.zeros(B, N, dtype=torch.long), dist.state)
    expect = torch.zeros((), dtype=torch.float64)
    for t in range(N):  # element 1's token-0 path, scored step by step in float64
        expect = expect + logits[1, t, 0].double()
    assert scores[1, 0] == expect
    handed.clear()
    assert torch.equal(greedy.greedy()[1], tokens[:, 0])
    handed.clear()
    assert torch.equal(greedy.argmax, tokens[:, 0])
