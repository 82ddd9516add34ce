"""Constituency tree CRF (CKY) against brute-force enumeration of binary bracketings."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import TreeCRF
from synattn.structs.backend import numba_available, use_backend
from synattn.structs.cky.crf import chart_to_spans, spans_to_chart
from synattn.structs.cky.dp import check_span_scores
from synattn.structs.constants import IMPOSSIBLE
from tests.helpers.spans import bracketings, brute_force, random_batch, tree_scores

BACKENDS = ["torch", "numba"] if numba_available() else ["torch"]
INF = float("inf")


def catalan(m: int) -> int:
    return 1 if m == 0 else catalan(m - 1) * 2 * (2 * m - 1) // (m + 1)


def crf_on(backend: str, scores, lengths):
    with use_backend(backend):
        crf = TreeCRF(scores, lengths)
        return crf.log_partition, crf.marginals, crf.max, crf.argmax


batches = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "lengths": st.lists(st.integers(1, 6), min_size=1, max_size=3),
    "scale": st.sampled_from([0.1, 1.0, 3.0]),
})


def test_bracketing_count_is_catalan():
    assert [len(bracketings(0, n - 1)) for n in range(1, 8)] == [catalan(m) for m in range(7)]
    assert all(len(tree) == 2 * 6 - 1 for tree in bracketings(0, 5))


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=30, deadline=None)
@given(case=batches)
def test_matches_brute_force(backend, case):
    scores, lengths = random_batch(case["seed"], case["lengths"], case["scale"])
    log_z, marginals, best, argmax = crf_on(backend, scores, lengths)
    for b, n in enumerate(case["lengths"]):
        ref_z, ref_mu, ref_best, _ = brute_force(scores[b], n)
        torch.testing.assert_close(log_z[b], ref_z, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(marginals[b], ref_mu, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(best[b], ref_best, rtol=1e-12, atol=1e-12)
        trees = {tuple(sorted(t)) for t in bracketings(0, n - 1)}
        assert tuple(chart_to_spans(argmax[b:b + 1])[0]) in trees
        torch.testing.assert_close(TreeCRF(scores, lengths).score(argmax)[b], ref_best)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ignored_entries_do_not_matter(backend):
    scores, lengths = random_batch(0, [4, 2, 5, 1])
    dirty = scores.triu() + torch.full_like(scores, float("nan")).tril(-1)
    for b, n in enumerate(lengths.tolist()):
        dirty[b, n:] = INF
        dirty[b, :, n:] = float("nan")
    for clean, noisy in zip(crf_on(backend, scores, lengths), crf_on(backend, dirty, lengths)):
        torch.testing.assert_close(clean, noisy)
    assert crf_on(backend, dirty, lengths)[1][1, 2:].abs().sum() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_forbidden_spans_constrain_the_trees(backend):
    scores, lengths = random_batch(3, [5, 4])
    scores[0, 1, 3] = -INF  # forbid words 1..3 in sentence 0
    scores[0, 0, 1] = -1e12  # below NEG: forbidden too
    scores[1, 1, 2] = -INF
    log_z, marginals, best, argmax = crf_on(backend, scores, lengths)
    for b, n in enumerate(lengths.tolist()):
        allowed = [t for t in bracketings(0, n - 1) if all(scores[b, i, j] > -1e9 for i, j in t)]
        values = torch.stack([sum(scores[b, i, j] for i, j in t) for t in allowed])
        torch.testing.assert_close(log_z[b], torch.logsumexp(values, 0))
        torch.testing.assert_close(best[b], values.max())
    assert marginals[0, 1, 3] == 0 and marginals[0, 0, 1] == 0 and marginals[1, 1, 2] == 0
    assert argmax[0, 1, 3] == 0 and argmax[1, 1, 2] == 0
    x = scores.clone().requires_grad_()
    with use_backend(backend):
        (grad,) = torch.autograd.grad(TreeCRF(x, lengths).log_partition.sum(), x)
    assert torch.isfinite(grad).all() and grad[0, 1, 3] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_valid_tree_gives_minus_inf_and_zero_marginals(backend):
    scores, lengths = random_batch(4, [4, 3, 1])
    scores[0, 2, 2] = -INF  # a one-word span: in every tree
    scores[1, 0, 2] = -INF  # the whole sentence
    scores[2, 0, 0] = -INF  # the only span of a one-word sentence
    x = scores.clone().requires_grad_()
    with use_backend(backend):
        crf = TreeCRF(x, lengths)
        assert torch.isneginf(crf.log_partition).all() and torch.isneginf(crf.max).all()
        assert crf.marginals.abs().sum() == 0 and crf.argmax.abs().sum() == 0
        (g1,) = torch.autograd.grad(-crf.log_partition.sum(), x, retain_graph=True)
        assert not torch.isnan(torch.autograd.grad(crf.log_prob(crf.argmax).sum(), x,
                                                   retain_graph=True)[0]).any()
        (g2,) = torch.autograd.grad((crf.marginals * torch.randn_like(x)).sum(), x)
        assert (g1 == 0).all() and (g2 == 0).all()
        assert (crf.entropy == 0).all()
        assert crf.sample(3).abs().sum() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_float64(backend):
    scores, lengths = random_batch(5, [4, 2, 3])
    scores[0, 0, 2] = -INF
    x = scores.clone().requires_grad_()
    with use_backend(backend):
        torch.autograd.gradcheck(lambda s: TreeCRF(s, lengths).log_partition, (x,))
        torch.autograd.gradcheck(lambda s: TreeCRF(s, lengths).marginals, (x,))
        torch.autograd.gradgradcheck(lambda s: TreeCRF(s, lengths).log_partition, (x,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_marginals_backward_equals_autograd_of_brute_force(backend):
    scores, lengths = random_batch(6, [5])
    g = torch.randn(1, 5, 5, dtype=torch.float64)
    x = scores.clone().requires_grad_()
    with use_backend(backend):
        (ours,) = torch.autograd.grad((TreeCRF(x, lengths).marginals * g).sum(), x)
    y = scores[0].clone().requires_grad_()
    (mu,) = torch.autograd.grad(torch.logsumexp(tree_scores(y, 5), 0), y, create_graph=True)
    (ref,) = torch.autograd.grad((mu * g[0]).sum(), y)
    torch.testing.assert_close(ours[0].triu(), ref.triu())


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_equals_torch_path_on_ragged_batches(seed):
    scores, lengths = random_batch(seed, [12, 3, 9, 1, 12], scale=2.0)
    scores[0, 2:5, 6:9] = -INF
    for a, b in zip(crf_on("torch", scores, lengths), crf_on("numba", scores, lengths)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(scores)
    grads = []
    for backend in ("torch", "numba"):
        x = scores.clone().requires_grad_()
        with use_backend(backend):
            grads.append(torch.autograd.grad((TreeCRF(x, lengths).marginals * g).sum(), x)[0])
    torch.testing.assert_close(*grads, rtol=1e-9, atol=1e-10)


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_log_partition_equals_the_inside_outside_kernel(threads):
    # the inside-only kernel repeats the general kernel's operations: the same numbers, serial
    # (one thread or little work) or in parallel, -inf where no tree is allowed
    from synattn.structs.cky import _kernels

    torch.set_num_threads(threads)  # (the suite's fixture restores the thread count)
    scores, lengths = random_batch(3, [70, 1, 9, 70, 2, 40] * 10, scale=3.0)
    scores[:, 2:5, 6:9] = -INF  # (forbidden spans)
    scores[3::6, 5, 5] = -INF  # (a forbidden word: no tree)
    scores, lengths = check_span_scores(scores, lengths)
    for dtype in (torch.float64, torch.float32):
        x = scores.to(dtype)
        want = _kernels.marginals(x, lengths)[0]
        got = _kernels.log_partition(x, lengths)
        dead = want < IMPOSSIBLE
        assert got.dtype == dtype and dead.sum() == 10 and bool(dead[3::6].all())
        assert torch.equal(got, torch.where(dead, -INF, want))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_and_half_inputs(backend):
    scores, lengths = random_batch(7, [6, 4])
    ref = crf_on(backend, scores, lengths)
    for dtype in (torch.float32, torch.bfloat16):
        out = crf_on(backend, scores.to(dtype), lengths)
        assert out[1].dtype == torch.float32
        tol = 1e-5 if dtype == torch.float32 else 5e-2
        assert (out[1].double() - ref[1]).abs().max() < tol


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_scores_stay_finite(backend):
    scores, lengths = random_batch(8, [10, 7], scale=100.0, dtype=torch.float32)
    log_z, marginals, _, argmax = crf_on(backend, scores, lengths)
    assert torch.isfinite(log_z).all() and torch.isfinite(marginals).all()
    assert ((marginals - argmax).abs() < 1e-3).all()  # peaked on the best tree


@pytest.mark.parametrize("backend", BACKENDS)
def test_distribution_quantities_match_brute_force(backend):
    p_scores, lengths = random_batch(9, [5, 3])
    q_scores, _ = random_batch(10, [5, 3])
    with use_backend(backend):
        p, q = TreeCRF(p_scores, lengths), TreeCRF(q_scores, lengths)
        for b, n in enumerate(lengths.tolist()):
            _, _, _, prob_p = brute_force(p_scores[b], n)
            _, _, _, prob_q = brute_force(q_scores[b], n)
            torch.testing.assert_close(p.entropy[b], -(prob_p * prob_p.log()).sum())
            torch.testing.assert_close(p.cross_entropy(q)[b], -(prob_p * prob_q.log()).sum())
            torch.testing.assert_close(p.kl(q)[b], (prob_p * (prob_p / prob_q).log()).sum())
            charts = spans_to_chart([list(t) for t in bracketings(0, n - 1)], 5, torch.float64)
            full = torch.zeros(len(charts), 2, 5, 5, dtype=torch.float64)
            full[:, b] = charts
            torch.testing.assert_close(p.log_prob(full)[:, b].exp(), prob_p)
        assert p.kl(p).abs().max() < 1e-12


@pytest.mark.parametrize("backend", BACKENDS)
def test_samples_follow_the_distribution(backend):
    scores, lengths = random_batch(11, [4, 2])
    _, _, _, prob = brute_force(scores[0], 4)
    gen = torch.Generator().manual_seed(0)
    with use_backend(backend):
        crf = TreeCRF(scores, lengths)
        samples = crf.sample(4000, generator=gen)  # [4000, 2, 4, 4]
        again = crf.sample(4000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(samples, again)
    assert torch.isfinite(crf.log_prob(samples)).all()  # every sample is a tree of the CRF
    assert (samples.sum((-1, -2)) == torch.tensor([7.0, 3.0])).all()
    trees = [tuple(sorted(t)) for t in bracketings(0, 3)]
    counts = torch.zeros(len(trees), dtype=torch.float64)
    for spans in chart_to_spans(samples[:, 0]):
        counts[trees.index(tuple(spans))] += 1
    assert (counts / 4000 - prob).abs().max() < 4 * (prob * (1 - prob) / 4000).sqrt().max() + 1e-3
    torch.testing.assert_close(samples.mean(0), crf.marginals, atol=0.05, rtol=0)


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(ValueError, match=r"\[B, N, N\]"):
        TreeCRF(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="lengths"):
        TreeCRF(torch.zeros(2, 3, 3), torch.tensor([0, 3]))


def test_distribution_edge_cases():
    p_scores, lengths = random_batch(12, [4, 3, 2])
    q_scores = p_scores.clone()
    p_scores[2, 1, 1] = -INF  # p: no tree for sentence 2
    q_scores[0, 0, 0] = -INF  # q: no tree for sentence 0
    q_scores[1, 0, 1] = -INF  # q forbids a span p may use
    p, q = TreeCRF(p_scores, lengths), TreeCRF(q_scores, lengths)
    ce, kl = p.cross_entropy(q), p.kl(q)
    assert torch.isposinf(ce[:2]).all() and ce[2] == 0 and torch.isposinf(kl[:2]).all()
    assert p.entropy[2] == 0 and (p.entropy >= 0).all()
    best = p.log_prob(p.argmax)
    assert torch.isneginf(best[2]) and torch.isfinite(best[:2]).all()
    assert torch.isneginf(q.log_prob(p.argmax)[0])
    x = p_scores.clone().requires_grad_()
    (g,) = torch.autograd.grad(TreeCRF(x, lengths).entropy.sum(), x)
    assert torch.isfinite(g).all()
    with pytest.raises(ValueError, match="same shape and lengths"):
        p.cross_entropy(TreeCRF(q_scores, torch.tensor([4, 3, 1])))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_word_marginals_have_a_zero_backward(backend):
    # one-word trees: the marginals are constant, so their backward is 0 (the PyTorch path's
    # forward-mode derivative has no tangent there)
    x = torch.randn(2, 1, 1, dtype=torch.float64, requires_grad=True)
    with use_backend(backend):
        mu = TreeCRF(x, torch.tensor([1, 1])).marginals
        (grad,) = torch.autograd.grad(mu, x, torch.ones_like(mu))
    assert torch.equal(mu.detach(), torch.ones_like(mu)) and torch.equal(grad, torch.zeros_like(x))
