"""Labelled spans (scores ``[B, N, N, NT]``) on TreeCRF, against enumeration of every labelled
tree and against torch-struct's ``TreeCRF``."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import TreeCRF
from synattn.structs.cky import span_mask
from synattn.structs.semirings import EntropySemiring, MaxSemiring
from tests.helpers.spans import bracketings


def labelled_trees(n: int, N: int, NT: int) -> torch.Tensor:
    """Every labelled tree over ``n`` words as 0/1 charts ``[T, N, N, NT]``."""
    out = []
    for tree in bracketings(0, n - 1):
        for labels in itertools.product(range(NT), repeat=len(tree)):
            chart = torch.zeros(N, N, NT, dtype=torch.float64)
            for (i, j), label in zip(tree, labels):
                chart[i, j, label] = 1
            out.append(chart)
    return torch.stack(out)


def brute(scores: torch.Tensor, n: int):
    """log Z, labelled marginals, every tree and its score for one sentence ``scores [N, N, NT]``."""
    trees = labelled_trees(n, scores.shape[0], scores.shape[-1])
    used = trees > 0
    tree_scores = torch.where(used, scores, 0.0).flatten(1).sum(1)
    tree_scores = torch.where((used & (scores == -float("inf"))).flatten(1).any(1), -float("inf"), tree_scores)
    log_z = torch.logsumexp(tree_scores, 0)
    prob = (tree_scores - log_z).exp()
    return log_z, (prob.view(-1, 1, 1, 1) * trees).sum(0), trees, tree_scores


def random_scores(lengths, NT, seed, p_mask=0.2):
    gen = torch.Generator().manual_seed(seed)
    N = max(lengths)
    scores = torch.randn(len(lengths), N, N, NT, generator=gen, dtype=torch.float64) * 2
    mask = torch.rand(scores.shape, generator=gen) < p_mask
    mask[..., 0] = False  # every span keeps a label: some tree exists
    return scores.masked_fill(mask, -float("inf"))


@settings(max_examples=8, deadline=None)
@given(lengths=st.lists(st.integers(1, 4), min_size=1, max_size=3), NT=st.integers(1, 3),
       k=st.integers(1, 6), seed=st.integers(0, 99))
def test_matches_enumeration_of_labelled_trees(lengths, NT, k, seed):
    if max(lengths) == 4:
        NT = min(NT, 2)
    scores = random_scores(lengths, NT, seed)
    crf = TreeCRF(scores, torch.tensor(lengths))
    assert isinstance(crf, TreeCRF) and crf.marginals.shape == scores.shape
    best, top_scores, top = crf.argmax, *crf.kbest(k)
    assert best.shape == scores.shape
    for b, n in enumerate(lengths):
        log_z, mu, trees, tree_scores = brute(scores[b], n)
        torch.testing.assert_close(crf.log_partition[b], log_z)
        torch.testing.assert_close(crf.marginals[b], mu)
        torch.testing.assert_close(crf.max[b], tree_scores.max())
        torch.testing.assert_close(crf.score(best)[b], tree_scores.max())
        assert best[b].sum() == 2 * n - 1 and (best[b].sum(-1) <= 1).all()
        expect = tree_scores.sort(descending=True).values
        expect = expect[expect > -float("inf")][:k]
        torch.testing.assert_close(top_scores[b, :len(expect)], expect)
        m = len(expect)
        found = (top[b, :m].unsqueeze(1) == trees.unsqueeze(0)).flatten(2).all(-1)  # [m, T]
        assert (found.sum(1) == 1).all() and len(set(found.double().argmax(1).tolist())) == m
        torch.testing.assert_close(tree_scores[found.double().argmax(1)], expect)
        one = TreeCRF(scores[b:b + 1].expand(len(trees), -1, -1, -1), torch.tensor([n] * len(trees)))
        torch.testing.assert_close(one.log_prob(trees), tree_scores - log_z)
        p = (tree_scores - log_z).exp()
        h = -torch.where(p > 0, p * (tree_scores - log_z), 0.0).sum()
        torch.testing.assert_close(crf.entropy[b], h)
        torch.testing.assert_close(crf.count[b], (tree_scores > -float("inf")).sum().double())
    torch.testing.assert_close(crf.run(MaxSemiring, compiled=False), crf.max)
    torch.testing.assert_close(crf.run(EntropySemiring), crf.entropy)


def test_samples_follow_the_labelled_distribution():
    scores = random_scores([3], 2, 5)
    crf = TreeCRF(scores)
    _, _, trees, tree_scores = brute(scores[0], 3)
    count = 4000
    draws = crf.sample(count, generator=torch.Generator().manual_seed(0))[:, 0]  # [count, N, N, NT]
    assert draws.shape == (count, 3, 3, 2)
    found = (draws.unsqueeze(1) == trees.unsqueeze(0)).flatten(2).all(-1)
    assert (found.sum(1) == 1).all()  # every draw is one labelled tree
    freq = found.double().mean(0)
    p = (tree_scores - tree_scores.logsumexp(0)).exp()
    assert ((freq - p).abs() <= 4.5 * (p * (1 - p) / count).sqrt() + 1e-3).all()


def test_one_label_is_the_unlabelled_crf_and_gradients_flow():
    scores = torch.randn(2, 5, 5, 1, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3])
    lab, plain = TreeCRF(scores, lengths), TreeCRF(scores[..., 0], lengths)
    torch.testing.assert_close(lab.log_partition, plain.log_partition)
    torch.testing.assert_close(lab.marginals[..., 0], plain.marginals)
    assert torch.equal(lab.argmax[..., 0], plain.argmax)
    torch.testing.assert_close(lab.kbest(4)[0], plain.kbest(4)[0])
    (g,) = torch.autograd.grad(lab.log_partition.sum(), scores)
    torch.testing.assert_close(g[..., 0], plain.marginals)
    lab, plain = TreeCRF(scores, lengths), TreeCRF(scores[..., 0], lengths)  # (fresh graphs)
    (g,) = torch.autograd.grad(lab.entropy.sum(), scores)  # differentiable through the marginals
    (h,) = torch.autograd.grad(plain.entropy.sum(), scores)
    torch.testing.assert_close(g, h)


def test_masks_nan_padding_and_errors():
    scores = torch.randn(2, 4, 4, 3, dtype=torch.float64)
    scores[0, 0, 3] = -float("inf")  # every label of the whole sentence masked: no tree
    scores[1, ..., 1] = -float("inf")  # label 1 never used
    scores[1, 3] = float("nan")  # past the length 3: ignored
    crf = TreeCRF(scores, torch.tensor([4, 3]))
    assert crf.log_partition[0] == -float("inf") and (crf.argmax[0] == 0).all()
    assert (crf.marginals[0] == 0).all() and crf.entropy[0] == 0
    assert (crf.marginals[1, ..., 1] == 0).all() and (crf.sample(20)[:, 1, ..., 1] == 0).all()
    assert torch.isfinite(crf.log_partition[1]) and not crf.marginals.isnan().any()
    bad = crf.argmax.clone()
    bad[1, 0, 0] = torch.tensor([0.0, 1.0, 0.0])  # a masked label
    assert crf.score(bad)[1] == -float("inf") and crf.log_prob(bad)[1] == -float("inf")
    with pytest.raises(ValueError, match="labelled trees must be 0/1 charts"):
        crf.score(torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match="labelled span scores must be"):
        TreeCRF(torch.randn(2, 4, 3, 2))
    with pytest.raises(ValueError, match="lengths must be"):
        TreeCRF(torch.randn(2, 4, 4, 2), torch.tensor([5, 1]))
    with pytest.raises(ValueError, match="NaN"):
        TreeCRF(torch.full((1, 2, 2, 2), float("nan")))


def test_matches_torch_struct_labelled():
    torch_struct = pytest.importorskip("torch_struct")
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(3, 6, 6, 4, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 1])
    peer = torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths)
    crf = TreeCRF(scores, lengths)
    torch.testing.assert_close(crf.log_partition, peer.partition.detach())
    within = span_mask(lengths, 6).unsqueeze(-1).double()  # (theirs past the lengths: not 0)
    mu = peer.marginals.detach() * within
    torch.testing.assert_close(crf.marginals, mu)
    torch.testing.assert_close(crf.argmax, peer.argmax.detach() * within)
    torch.testing.assert_close(crf.entropy, peer.entropy.detach())
    torch.testing.assert_close(crf.kmax(3), peer.kmax(3).detach())


def test_kl_and_the_distribution_adapter():
    from synattn.structs.torch_distribution import StructuredDistribution

    sp, sq = random_scores([3, 3], 2, 7), random_scores([3, 3], 2, 8)
    p, q = TreeCRF(sp), TreeCRF(sq)
    for b in range(2):
        _, _, trees, lp = brute(sp[b], 3)
        lq = brute(sq[b], 3)[3]
        lp, lq = lp - lp.logsumexp(0), lq - lq.logsumexp(0)
        pr = lp.exp()
        keep = pr > 0
        if bool((keep & (lq == -float("inf"))).any()):
            assert p.kl(q)[b] == float("inf")
        else:
            torch.testing.assert_close(p.kl(q)[b], (pr[keep] * (lp[keep] - lq[keep])).sum())
    p = TreeCRF(random_scores([3, 3], 2, 9, p_mask=0.0))
    dist = StructuredDistribution(p)
    assert dist.event_shape == (3, 3, 2)
    support = dist.enumerate_support()  # every labelled tree: 2 bracketings × 2**5 labellings
    assert support.shape == (64, 2, 3, 3, 2)
    torch.testing.assert_close(dist.log_prob(support).exp().sum(0), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(dist.perplexity(), p.perplexity)


def _both_paths(scores, lengths):
    """The labelled CRF on the compiled path (one pass over the labels) and on the PyTorch one."""
    from synattn.structs.backend import use_backend

    with use_backend("torch"):
        slow = TreeCRF(scores, lengths)
        slow_values = (slow.log_partition, slow.marginals, slow.max, slow.argmax)
    fast = TreeCRF(scores, lengths)
    return (fast.log_partition, fast.marginals, fast.max, fast.argmax), slow_values


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_compiled_label_reduction_matches_the_torch_path(dtype):
    """Masked labels, dead spans (every label masked), a sentence without a tree, NaN past the
    lengths, float16's mask value, a non-contiguous tensor: the compiled pass gives the values
    of the PyTorch path."""
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(4, 6, 6, 5, generator=gen, dtype=torch.float64) * 3
    scores[torch.rand(scores.shape, generator=gen) < 0.3] = -float("inf")
    scores[1, 0, 2] = -float("inf")  # a dead span
    scores[2, 0, 3] = -1e9  # the whole sentence of length 4 dead: no tree
    scores[3, 4:] = float("nan")  # past the length 4
    scores = scores.to(dtype)
    if dtype == torch.float16:
        scores[0, 1, 1, 0] = torch.finfo(torch.float16).min  # float16's mask
    lengths = torch.tensor([6, 5, 4, 4])
    for x in (scores, scores.transpose(1, 2).contiguous().transpose(1, 2)):
        fast, slow = _both_paths(x, lengths)
        for a, b in zip(fast, slow):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert fast[0][2] == -float("inf") and fast[3][2].sum() == 0


def test_compiled_label_reduction_gradients():
    """The gradient of log Z is the label softmax times the span marginals, differentiable again
    (gradcheck and gradgradcheck through the compiled pass, masked labels and NaN padding)."""
    scores = random_scores([3, 2], 3, 11, p_mask=0.3)
    scores[1, 2] = float("nan")  # past the length 2
    lengths = torch.tensor([3, 2])
    free = scores > -float("inf")
    base = torch.where(free, scores, 0.0)

    def log_z(x):  # (the masked entries stay -inf, the NaN padding stays NaN)
        return TreeCRF(torch.where(free, x, scores), lengths).log_partition

    x = base.clone().requires_grad_()
    torch.autograd.gradcheck(log_z, (x,))
    torch.autograd.gradgradcheck(log_z, (x,))
    (g,) = torch.autograd.grad(log_z(x).sum(), x)
    torch.testing.assert_close(g, TreeCRF(scores, lengths).marginals.nan_to_num())
    mu = TreeCRF(torch.where(free, x, scores), lengths).marginals
    (h,) = torch.autograd.grad((mu * torch.randn(mu.shape, dtype=mu.dtype)).nan_to_num().sum(), x)
    assert torch.isfinite(h).all() and (h[~free] == 0).all() and (h[1, 2] == 0).all()


def test_compiled_label_reduction_checks_like_check_scores():
    """The compiled pass refuses what check_scores refuses (NaN inside a sentence, a label or a
    reduced span score too large for the masks) and accepts NaN past the lengths."""
    from synattn.structs.constants import MAX_TOTAL_SCORE

    with pytest.raises(ValueError, match="NaN among the scores"):
        TreeCRF(torch.tensor([[[[0.0, float("nan")]]]]))
    TreeCRF(torch.full((1, 2, 2, 2), float("nan")).index_fill(1, torch.tensor([0]), 0.0).tril(),
            torch.tensor([1]))
    parts = 2 * 2 - 1
    edge = MAX_TOTAL_SCORE / parts  # |label| at the limit: accepted; its log-sum-exp over two
    ok = torch.full((1, 2, 2, 1), edge, dtype=torch.float64)  # equal labels is past it
    TreeCRF(ok)
    for backend in ("torch", "auto"):
        from synattn.structs.backend import use_backend

        with use_backend(backend), pytest.raises(ValueError, match="exceed the supported range"):
            TreeCRF(ok.expand(1, 2, 2, 2))


def test_compiled_path_reads_the_labels_in_compiled_passes_only():
    """Building a labelled TreeCRF on CPU and taking log Z, the marginals and the best tree run
    no PyTorch operation over the labelled scores (the mask, range check, log-sum-exp and
    dead-span test were one PyTorch pass each, more time than the unlabelled CKY at
    torch-struct's sizes)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    scores = torch.randn(2, 7, 7, 4)
    reads = []

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            flat = torch.utils._pytree.tree_leaves((args, kwargs))
            if func not in (torch.ops.aten.detach.default, torch.ops.aten.alias.default) and any(
                    isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr()
                    == scores.untyped_storage().data_ptr() for t in flat):
                reads.append(str(func))
            return func(*args, **(kwargs or {}))

    with Reads(), torch.no_grad():
        crf = TreeCRF(scores, torch.tensor([7, 4]))
        crf.log_partition, crf.marginals, crf.argmax
    assert reads == []
