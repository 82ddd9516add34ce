"""SentCFG (torch-struct's simple PCFG) against enumeration of every parse and torch-struct."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from synattn.structs import SentCFG
from synattn.structs.cky.cfg import parse_counts


def parses(terms, rules, i: int, j: int, sym: int, NT: int):
    """Every parse of words ``i..j`` rooted in ``sym`` as ``(score, term, rule counts, labelled
    spans [N, N, S])``."""
    N, S = terms.shape[0], rules.shape[-1]
    if i == j:
        if sym < NT:
            return []
        t = torch.zeros_like(terms)
        t[i, sym - NT] = 1
        spans = terms.new_zeros(N, N, S)
        spans[i, i, sym] = 1
        return [(terms[i, sym - NT], t, torch.zeros_like(rules), spans)]
    if sym >= NT:
        return []
    out = []
    S = rules.shape[-1]
    for k in range(i, j):
        for y in range(S):
            for z in range(S):
                for sl, tl, rl, pl in parses(terms, rules, i, k, y, NT):
                    for sr, tr, rr, pr in parses(terms, rules, k + 1, j, z, NT):
                        r = rl + rr
                        r[sym, y, z] += 1
                        spans = pl + pr
                        spans[i, j, sym] = 1
                        out.append((rules[sym, y, z] + sl + sr, tl + tr, r, spans))
    return out


def brute(terms, rules, roots, n):
    NT = roots.shape[0]
    all_ = [(roots[x] + s, t, r, x, p) for x in range(NT) for s, t, r, p in parses(terms, rules, 0, n - 1, x, NT)]
    scores = torch.stack([a[0] for a in all_])
    log_z = scores.logsumexp(0)
    p = (scores - log_z).exp()
    mt = sum(q * a[1] for q, a in zip(p, all_))
    mr = sum(q * a[2] for q, a in zip(p, all_))
    mroot = torch.zeros_like(roots)
    for q, a in zip(p, all_):
        mroot[a[3]] += q
    return log_z, (mt, mr, mroot), scores


def labelled_parses(terms, rules, roots, n):
    """Every parse of ``n`` words: ``scores [P]`` and labelled spans ``[P, N, N, S]``."""
    NT = roots.shape[0]
    every = [(roots[x] + s, p) for x in range(NT) for s, _, _, p in parses(terms, rules, 0, n - 1, x, NT)]
    return torch.stack([e[0] for e in every]), torch.stack([e[1] for e in every])


def index_of(spans, every):
    """``[M]`` the index in ``every [P, ...]`` of each of ``spans [M, ...]`` (-1 if none)."""
    same = (spans.unsqueeze(1) == every.unsqueeze(0)).flatten(2).all(-1)  # [M, P]
    return torch.where(same.any(1), same.double().argmax(1), -1)


def rand(B, N, T, NT, seed):
    gen = torch.Generator().manual_seed(seed)
    S = NT + T
    return (torch.randn(B, N, T, generator=gen, dtype=torch.float64),
            torch.randn(B, NT, S, S, generator=gen, dtype=torch.float64),
            torch.randn(B, NT, generator=gen, dtype=torch.float64))


@settings(max_examples=6, deadline=None)
@given(lengths=st.lists(st.integers(2, 4), min_size=1, max_size=2), T=st.integers(1, 2),
       NT=st.integers(1, 2), seed=st.integers(0, 99))
def test_matches_enumeration_of_parses(lengths, T, NT, seed):
    terms, rules, roots = rand(len(lengths), max(lengths), T, NT, seed)
    cfg = SentCFG(terms, rules, roots, torch.tensor(lengths))
    for b, n in enumerate(lengths):
        log_z, (mt, mr, mroot), scores = brute(terms[b], rules[b], roots[b], n)
        assert torch.allclose(cfg.log_partition[b], log_z)
        assert torch.allclose(cfg.marginals[0][b], mt, atol=1e-9)
        assert torch.allclose(cfg.marginals[1][b], mr, atol=1e-9)
        assert torch.allclose(cfg.marginals[2][b], mroot, atol=1e-9)
        assert torch.allclose(cfg.max[b], scores.max())
        best = cfg.argmax
        assert torch.allclose(cfg.score(best)[b], scores.max())
        assert best[1][b].sum() == n - 1 and best[0][b].sum() == n and best[2][b].sum() == 1
        p = (scores - log_z).exp()
        assert torch.allclose(cfg.entropy[b], -(p * p.log()).sum(), atol=1e-9)
        assert torch.allclose(cfg.log_prob(best)[b], scores.max() - log_z)


def test_ties_give_one_parse_masks_and_errors():
    terms, rules, roots = (torch.zeros(1, 4, 2), torch.zeros(1, 2, 4, 4), torch.zeros(1, 2))
    best = SentCFG(terms, rules, roots).argmax  # every parse ties: still one parse's counts
    assert best[1].sum() == 3 and set(best[1].unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}
    roots = torch.full((1, 2), -float("inf"))
    none = SentCFG(terms, rules, roots)
    assert none.log_partition.item() == -float("inf") and none.argmax[1].sum() == 0
    with pytest.raises(ValueError, match="lengths must be"):
        SentCFG(torch.zeros(1, 4, 2), rules, torch.zeros(1, 2), torch.tensor([1]))
    with pytest.raises(ValueError, match="rules"):
        SentCFG(torch.zeros(1, 4, 2), torch.zeros(1, 2, 3, 3), torch.zeros(1, 2))


def test_matches_torch_struct():
    torch_struct = pytest.importorskip("torch_struct")
    terms, rules, roots = rand(3, 6, 3, 4, 0)
    lengths = torch.tensor([6, 4, 2])
    peer = torch_struct.SentCFG((terms, rules, roots), lengths)
    cfg = SentCFG(terms, rules, roots, lengths)
    assert torch.allclose(cfg.log_partition, peer.partition.detach())
    theirs = peer.marginals
    for ours, other in zip(cfg.marginals, theirs[:3]):
        assert torch.allclose(ours, other.detach(), atol=1e-8)
    best = peer.argmax
    for ours, other in zip(cfg.argmax, best[:3]):
        assert torch.allclose(ours, other.detach())


@settings(max_examples=5, deadline=None)
@given(lengths=st.lists(st.integers(2, 3), min_size=1, max_size=2), T=st.integers(1, 2),
       NT=st.integers(1, 2), seed=st.integers(0, 99))
def test_samples_follow_the_enumerated_parse_probabilities(lengths, T, NT, seed):
    terms, rules, roots = rand(len(lengths), max(lengths), T, NT, seed)
    rules[:, 0, 0, -1] = -float("inf")  # a masked rule (X → X P) is never sampled
    cfg = SentCFG(terms, rules, roots, torch.tensor(lengths))
    count = 3000
    spans = cfg.sample_spans(count, generator=torch.Generator().manual_seed(seed))
    counts = cfg.sample(count, generator=torch.Generator().manual_seed(seed))
    for got, expect in zip(counts, parse_counts(spans, cfg.lengths, NT)):
        assert torch.equal(got, expect)  # the counts of the same draws
    for b, n in enumerate(lengths):
        scores, every = labelled_parses(terms[b], rules[b], roots[b], n)
        found = index_of(spans[:, b], every)
        assert (found >= 0).all()  # every draw is a parse
        freq = torch.bincount(found, minlength=len(scores)).double() / count
        p = (scores - scores.logsumexp(0)).exp()
        assert ((freq - p).abs() <= 4.5 * (p * (1 - p) / count).sqrt() + 1e-3).all(), (freq, p)
        torch.testing.assert_close(cfg.score(counts)[:, b], scores[found])
        torch.testing.assert_close(cfg.log_prob(counts)[:, b], scores[found] - scores.logsumexp(0))


@settings(max_examples=6, deadline=None)
@given(lengths=st.lists(st.integers(2, 4), min_size=1, max_size=2), T=st.integers(1, 2),
       NT=st.integers(1, 2), k=st.integers(1, 12), seed=st.integers(0, 99))
def test_kbest_is_the_sorted_enumeration_of_parses(lengths, T, NT, k, seed):
    terms, rules, roots = rand(len(lengths), max(lengths), T, NT, seed)
    terms[0, 0, T - 1] = -float("inf") if T > 1 else terms[0, 0, 0]  # masks: a term and a root
    roots[-1, NT - 1] = -float("inf") if NT > 1 else roots[-1, 0]
    cfg = SentCFG(terms, rules, roots, torch.tensor(lengths))
    best, spans = cfg.kbest_spans(k)
    got, (t, r, x) = cfg.kbest(k)
    assert torch.equal(got, best)
    for b, n in enumerate(lengths):
        scores, every = labelled_parses(terms[b], rules[b], roots[b], n)
        expect = scores.sort(descending=True).values
        expect = expect[expect > -float("inf")][:k]
        m = len(expect)
        torch.testing.assert_close(best[b, :m], expect)  # ties may come in either order
        assert (best[b, m:] == -float("inf")).all() and (spans[b, m:] == 0).all()
        found = index_of(spans[b, :m], every)
        assert (found >= 0).all() and len(set(found.tolist())) == m  # distinct parses
        torch.testing.assert_close(scores[found], expect)
        if not m:
            continue
        one = SentCFG(terms[b:b + 1].expand(m, -1, -1), rules[b:b + 1].expand(m, -1, -1, -1),
                      roots[b:b + 1].expand(m, -1), torch.tensor([n] * m))
        torch.testing.assert_close(one.score((t[b, :m], r[b, :m], x[b, :m])), expect)
    assert torch.equal(cfg.kmax(k), best.transpose(0, 1))
    assert all(torch.equal(a, c.transpose(0, 1)) for a, c in zip(cfg.topk(k), (t, r, x)))
    assert torch.equal(cfg.kbest(1)[0][:, 0], cfg.max)


def test_no_parse_gives_empty_samples_and_lists():
    terms, rules, roots = rand(2, 3, 2, 2, 0)
    roots[1] = -float("inf")
    cfg = SentCFG(terms, rules, roots)
    draws = cfg.sample(4)
    assert all((d[:, 1] == 0).all() for d in draws) and (draws[2][:, 0].sum(-1) == 1).all()
    scores, (t, r, x) = cfg.kbest(3)
    assert (scores[1] == -float("inf")).all() and (r[1] == 0).all() and (scores[0] > -float("inf")).all()
    with pytest.raises(ValueError, match="count"):
        cfg.sample(0)
    with pytest.raises(ValueError, match=r"parse counts must be \[\.\.\., 2, 3, 2\]"):
        cfg.score((torch.zeros(3, 2), r[:, 0], x[:, 0]))


def test_kbest_matches_torch_struct_kmax():
    torch_struct = pytest.importorskip("torch_struct")
    terms, rules, roots = rand(3, 5, 2, 3, 1)
    lengths = torch.tensor([5, 4, 2])
    peer = torch_struct.SentCFG((terms, rules, roots), lengths)
    cfg = SentCFG(terms, rules, roots, lengths)
    torch.testing.assert_close(cfg.kmax(6), peer.kmax(6).detach())


def test_sample_count_and_k_are_bounded_by_memory():
    cfg = SentCFG(*rand(2, 5, 2, 2, 0))
    with pytest.raises(ValueError, match=r"sample: count=1000000000 is too large: 1000000000 samples"):
        cfg.sample(10 ** 9)
    with pytest.raises(ValueError, match=r"kbest: k=1000000000000000 is too large"):
        cfg.kbest(10 ** 15)
    assert cfg.sample(3)[0].shape == (3, 2, 5, 2)


def masked_inputs(dtype=torch.float64):
    """Random scores with masked terms, rules (one rule row of a block, one whole row) and roots,
    ragged lengths and one sentence without any parse."""
    terms, rules, roots = rand(4, 7, 3, 3, 5)
    terms[0, 2, 1] = -float("inf")
    rules[1, 0, :3, :3] = -float("inf")  # X=0 never has two nonterminal children
    rules[2, 2] = -1e9  # nor X=2 anything
    roots[2, 1] = -float("inf")
    roots[3] = -float("inf")  # no parse at all
    return terms.to(dtype), rules.to(dtype), roots.to(dtype), torch.tensor([7, 5, 6, 2])


@pytest.fixture
def compiled():
    """The compiled kernels, whatever the environment asks (``use_backend`` blocks nest)."""
    from synattn.structs.backend import use_backend

    with use_backend("numba"):
        yield


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_compiled_kernels_match_the_torch_path(dtype, compiled):
    from synattn.structs.backend import kernels, use_backend

    terms, rules, roots, lengths = masked_inputs(dtype)
    with use_backend("torch"):
        ref = SentCFG(terms, rules, roots, lengths)
        log_z, mus = ref.log_partition, ref.marginals
    cfg = SentCFG(terms, rules, roots, lengths)
    assert cfg._compiled
    tol = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-5}
    torch.testing.assert_close(cfg.log_partition, log_z, **tol)
    assert cfg.log_partition[3] == -float("inf")
    for ours, theirs in zip(cfg.marginals, mus):
        assert ours.dtype == dtype
        torch.testing.assert_close(ours, theirs, **tol)
    assert all((m[3] == 0).all() for m in cfg.marginals)
    assert cfg.marginals[1][1, 0, :3, :3].abs().max() == 0 and cfg.marginals[2][2, 1] == 0
    z = kernels("cky._cfg_kernels").log_partition(cfg.terms, cfg.rules, cfg.roots, lengths)
    torch.testing.assert_close(cfg._finite(z), log_z, **tol)


def test_compiled_backward_is_exact_to_second_order(compiled):
    """gradcheck of the kernels' backward (their outside pass) and of the marginals' backward
    (the PyTorch recursion's double backward), masks and an impossible sentence included."""
    from synattn.structs.backend import use_backend

    terms, rules, roots, lengths = masked_inputs()

    def log_z_of_free(parts, lengths):
        """``log Z`` as a function of the unmasked entries (gradcheck perturbs only those) and
        those entries, leaf tensors."""
        masks = [x <= -1e9 for x in parts]

        def log_z(*xs):
            full = [x.masked_fill(m, -float("inf")) for x, m in zip(xs, masks)]
            return SentCFG(*full, lengths).log_partition.clamp_min(-100)
        return log_z, [x.masked_fill(m, 0.0).requires_grad_() for x, m in zip(parts, masks)]

    log_z, free = log_z_of_free((terms, rules, roots), lengths)
    torch.autograd.gradcheck(log_z, free)
    # second order on sentences 1 and 2 (a masked block of a rule row, a masked row and root)
    torch.autograd.gradgradcheck(*log_z_of_free((terms[1:3, :6], rules[1:3], roots[1:3]), lengths[1:3]))
    parts = [x.clone().requires_grad_() for x in (terms, rules, roots)]
    cfg = SentCFG(*parts, lengths)
    assert cfg._compiled and all(m.requires_grad for m in cfg.marginals)
    directions = [torch.randn_like(m) for m in cfg.marginals]
    ours = torch.autograd.grad(cfg.marginals, parts, directions)
    with use_backend("torch"):
        theirs = torch.autograd.grad(SentCFG(*parts, lengths).marginals, parts, directions)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_compiled_kbest_matches_the_torch_path_without_autograd(monkeypatch):
    """On CPU each k-best sub-problem is a compiled Viterbi parse with back pointers (the same
    lists as the PyTorch path's masked max-semiring gradients, masks and a sentence without a
    parse included), and no autograd runs."""
    from synattn.structs.backend import use_backend

    terms, rules, roots, lengths = masked_inputs()
    with use_backend("torch"):
        ref_scores, ref_spans = SentCFG(terms, rules, roots, lengths).kbest_spans(6)

    def no_autograd(*args, **kwargs):
        raise AssertionError("autograd ran")
    monkeypatch.setattr(torch.autograd, "grad", no_autograd)
    monkeypatch.setattr(torch.Tensor, "backward", no_autograd)
    for dtype in (torch.float64, torch.float32):
        cfg = SentCFG(terms.to(dtype), rules.to(dtype), roots.to(dtype), lengths)
        scores, spans = cfg.kbest_spans(5)
        tol = {} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-5}
        torch.testing.assert_close(scores, ref_scores[:, :5], **tol)
        near = (ref_scores[:, 1:] - ref_scores[:, :-1]).abs() < 1e-6  # ties: in either order
        tied = (F.pad(near, (0, 1)) | F.pad(near, (1, 0)))[:, :5]
        assert spans.dtype == dtype and torch.equal(spans[~tied].double(), ref_spans[:, :5][~tied])
        counts = parse_counts(spans.transpose(0, 1), lengths, 3)
        torch.testing.assert_close(cfg.score(counts).T[:3].double(), scores[:3].double(), **tol)
    assert (scores[3] == -float("inf")).all() and (spans[3] == 0).all() and tied.any()
