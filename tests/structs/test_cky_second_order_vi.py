"""Mean-field and loopy-BP approximate span marginals for span + span-pair scores, against supar's
``ConstituencyMFVI`` and ``ConstituencyLBP`` on the same inputs, a hand-computed first round and
the exact marginals of small factor graphs."""

from __future__ import annotations

import math

import pytest
import torch

from synattn.structs.cky.dp import span_mask
from synattn.structs.cky.second_order_vi import ConstituencyLBP, ConstituencyMFVI
from synattn.structs.convert import span_pairs_from_supar, span_pairs_to_supar, spans_from_supar, spans_to_supar
from tests.helpers.binary_mrf import exact_marginals


def inputs(seed=0, lengths=(4, 2, 3), scale=1.0):
    """Random span scores and pair weights, 0 where the spans or the factor do not exist."""
    gen = torch.Generator().manual_seed(seed)
    B, N = len(lengths), max(lengths)
    lengths = torch.tensor(lengths)
    spans = torch.randn(B, N, N, generator=gen, dtype=torch.float64) * scale
    pairs = torch.randn(B, N, N, N, generator=gen, dtype=torch.float64) * scale
    usable = span_mask(lengths, N)
    factors = usable.unsqueeze(3) & usable.unsqueeze(2) & ~torch.eye(N, dtype=torch.bool)
    return torch.where(usable, spans, 0.0), torch.where(factors, pairs, 0.0), lengths


def supar_mask(lengths, N):
    """The span mask supar's constituency parsers pass: fenceposts ``i < j <= length``."""
    pos = torch.arange(N + 1)
    return (pos[:, None] < pos[None, :])[None] & (pos[None, None, :] <= lengths[:, None, None])


def supar_lbp_args(spans, pairs):
    """Our scores in the orientation supar's ``ConstituencyLBP`` reads (it takes spans and pairs
    transposed against its mask; its output is transposed back)."""
    return spans_to_supar(spans).transpose(1, 2), span_pairs_to_supar(pairs).permute(0, 3, 1, 2)


@pytest.mark.parametrize("max_iter", [1, 3, 5])
def test_mfvi_matches_supar(max_iter):
    structs = pytest.importorskip("supar.structs")
    spans, pairs, lengths = inputs(max_iter)
    ours = ConstituencyMFVI(max_iter)((spans, pairs), lengths)
    args = (spans_to_supar(spans), span_pairs_to_supar(pairs))
    theirs = spans_from_supar(structs.ConstituencyMFVI(max_iter)(args, supar_mask(lengths, 4)).detach())
    assert torch.allclose(ours, torch.where(span_mask(lengths, 4), theirs, 0.0), atol=1e-12)


@pytest.mark.parametrize("max_iter", [1, 3, 5])
def test_lbp_matches_supar_in_the_orientation_it_reads(max_iter):
    structs = pytest.importorskip("supar.structs")
    spans, pairs, lengths = inputs(10 + max_iter)
    ours = ConstituencyLBP(max_iter)((spans, pairs), lengths)
    theirs = structs.ConstituencyLBP(max_iter)(supar_lbp_args(spans, pairs), supar_mask(lengths, 4))
    theirs = spans_from_supar(theirs.detach().transpose(1, 2))
    assert torch.allclose(ours, torch.where(span_mask(lengths, 4), theirs, 0.0), atol=1e-12)
    assert (ours - ConstituencyMFVI(max_iter)((spans, pairs), lengths)).abs().max() > 1e-3


def test_supar_lbp_as_its_parser_calls_it_ignores_the_pairs():
    """Documented difference: with its parser's mask and scores as they come, no factor reaches a
    span in supar's LBP (its marginals are σ(spans)); ours uses the pairs."""
    structs = pytest.importorskip("supar.structs")
    spans, pairs, lengths = inputs(3)
    args = (spans_to_supar(spans), span_pairs_to_supar(pairs))
    theirs = spans_from_supar(structs.ConstituencyLBP()(args, supar_mask(lengths, 4)).detach())
    usable = span_mask(lengths, 4)
    assert torch.allclose(torch.where(usable, theirs, 0.0), torch.where(usable, spans.sigmoid(), 0.0))
    ours = ConstituencyLBP()((spans, pairs), lengths)
    assert (ours - torch.where(usable, spans.sigmoid(), 0.0)).abs().max() > 1e-2


def test_loss_matches_supar():
    structs = pytest.importorskip("supar.structs")
    spans, pairs, lengths = inputs(4)
    gold = torch.rand(3, 4, 4, generator=torch.Generator().manual_seed(1)) < 0.4
    mask, target = supar_mask(lengths, 4), spans_to_supar(gold.double()).bool()
    loss, _ = ConstituencyMFVI()((spans, pairs), lengths, gold)
    their_loss, _ = structs.ConstituencyMFVI()((spans_to_supar(spans), span_pairs_to_supar(pairs)), mask, target)
    assert torch.allclose(loss, their_loss.detach().double(), atol=1e-6)  # (supar's target is float32)
    # supar's LBP loss (two-class cross-entropy) on its logits, turned to our orientation
    loss, _ = ConstituencyLBP()((spans, pairs), lengths, gold)
    logits = structs.ConstituencyLBP().lbp(*supar_lbp_args(spans, pairs), mask).detach().transpose(1, 2)
    their_loss = torch.nn.functional.cross_entropy(logits[mask], target[mask].long())
    assert torch.allclose(loss, their_loss, atol=1e-12)


def test_pair_converters_round_trip():
    _, pairs, _ = inputs(5, lengths=(4,))
    assert torch.equal(span_pairs_from_supar(span_pairs_to_supar(pairs)), pairs)


def test_mfvi_first_round_by_hand():
    """One round: q(i..j) = s(i..j) + Σ_{k != j} σ(s(i..k)) pair(i, j, k), over the spans i..k."""
    spans, pairs, lengths = inputs(6, lengths=(3,))
    mu = ConstituencyMFVI(max_iter=1)((spans, pairs), lengths)
    s, p = spans[0].tolist(), pairs[0].tolist()
    def sig(x):
        return 1 / (1 + math.exp(-x))

    for i in range(3):
        for j in range(i, 3):
            q = s[i][j] + sum(sig(s[i][k]) * p[i][j][k] for k in range(i, 3) if k != j)
            assert mu[0, i, j].item() == pytest.approx(sig(q), abs=1e-14)


def test_mfvi_reaches_its_fixed_point():
    """With small pair weights the update contracts; after many rounds q = s + Σ σ(q) pair."""
    spans, pairs, lengths = inputs(7, scale=0.3)
    mu = ConstituencyMFVI(max_iter=100)((spans, pairs), lengths)
    usable = span_mask(lengths, 4)
    q = torch.where(usable, mu.logit(), 0.0)
    update = spans + torch.einsum("bijk,bik->bij", pairs, torch.where(usable, mu, 0.0))
    assert torch.allclose(q, torch.where(usable, update, 0.0), atol=1e-10)


def _field(spans, pairs, n):
    """The pairwise field of one sentence: symmetric pair weights as one factor per pair."""
    unary = {(i, j): spans[0, i, j].item() for i in range(n) for j in range(i, n)}
    factors = {((i, j), (i, k)): pairs[0, i, j, k].item()
               for i in range(n) for j in range(i, n) for k in range(j + 1, n) if pairs[0, i, j, k] != 0}
    return exact_marginals(unary, factors)


@pytest.mark.parametrize("cls", [ConstituencyLBP, ConstituencyMFVI])
def test_one_factor_first_round(cls):
    """Two words: one factor (spans 0..0 and 0..1). One LBP round is exact on it; MFVI is not."""
    spans, _, lengths = inputs(8, lengths=(2,))
    pairs = torch.zeros(1, 2, 2, 2, dtype=torch.float64)
    pairs[0, 0, 0, 1] = pairs[0, 0, 1, 0] = 1.7
    exact = _field(spans, pairs, 2)
    mu = cls(max_iter=1)((spans, pairs), lengths)
    err = max(abs(mu[0, i, j].item() - p) for (i, j), p in exact.items())
    assert err < 1e-12 if cls is ConstituencyLBP else err > 1e-3


def test_lbp_star_center_exact_after_one_round():
    """Three words, factors 0..1 with 0..0 and with 0..2 (a star; no loop): after one round the
    centre's LBP belief is its exact marginal, and so are the spans without factors. Later rounds
    move away from it (supar's cavity subtracts the message's own previous value, documented)."""
    spans, _, lengths = inputs(9, lengths=(3,))
    pairs = torch.zeros(1, 3, 3, 3, dtype=torch.float64)
    pairs[0, 0, 1, 0] = pairs[0, 0, 0, 1] = 1.3
    pairs[0, 0, 1, 2] = pairs[0, 0, 2, 1] = -2.1
    exact = _field(spans, pairs, 3)
    mu = ConstituencyLBP(max_iter=1)((spans, pairs), lengths)
    for (i, j), p in exact.items():
        if (i, j) not in ((0, 0), (0, 2)):
            assert mu[0, i, j].item() == pytest.approx(p, abs=1e-12)
    later = ConstituencyLBP(max_iter=4)((spans, pairs), lengths)
    assert abs(later[0, 0, 1].item() - exact[0, 1]) > 1e-4


@pytest.mark.parametrize("cls", [ConstituencyMFVI, ConstituencyLBP])
def test_loss_gradcheck(cls):
    spans, pairs, lengths = inputs(11, lengths=(3, 2), scale=0.7)
    gold = torch.rand(2, 3, 3, generator=torch.Generator().manual_seed(2)) < 0.5
    torch.autograd.gradcheck(lambda s, p: cls(3)((s, p), lengths, gold)[0],
                             (spans.requires_grad_(), pairs.requires_grad_()))


def test_padding_is_ignored_and_masks_forbid():
    spans, pairs, lengths = inputs(12, lengths=(4, 2))
    dirty_s, dirty_p = spans.clone(), pairs.clone()
    dirty_s[1, 2:] = float("nan")
    dirty_p[1, :, 2:] = float("nan")
    dirty_p[:, 1, 0] = float("nan")  # below the diagonal: no span
    for cls in (ConstituencyMFVI, ConstituencyLBP):
        assert torch.allclose(cls()((dirty_s, dirty_p), lengths), cls()((spans, pairs), lengths))
        forbidden = spans.clone()
        forbidden[0, 0, 2] = -float("inf")
        assert cls()((forbidden, pairs), lengths)[0, 0, 2] == 0


def test_finite_values_outside_the_factors_change_nothing():
    """MFVI reads clean weights as given (no masking pass): whatever finite values lie outside the
    factors (k = j, non-spans, padding) give the same marginals and zero gradients there."""
    spans, pairs, lengths = inputs(13, lengths=(4, 2))
    dirty = pairs + 1e3 * torch.randn(pairs.shape, generator=torch.Generator().manual_seed(1),
                                      dtype=torch.float64) * (pairs == 0)
    assert (dirty.diagonal(0, 2, 3) != 0).all()
    for cls in (ConstituencyMFVI, ConstituencyLBP):
        torch.testing.assert_close(cls()((spans, dirty), lengths), cls()((spans, pairs), lengths),
                                   rtol=1e-12, atol=1e-12)
        x = dirty.clone().requires_grad_()
        cls()((spans, x), lengths).sum().backward()
        assert (x.grad[pairs == 0] == 0).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize("bad, match", [((torch.zeros(1, 3, 3), torch.zeros(1, 3, 3)), "pairs must be"),
                                        ((torch.zeros(1, 3, 3), [0.0]), "pairs must be a torch.Tensor")])
def test_bad_inputs(bad, match):
    with pytest.raises(ValueError, match=match):
        ConstituencyMFVI()(bad)
    with pytest.raises(ValueError, match="max_iter"):
        ConstituencyLBP(0)
    with pytest.raises(ValueError, match="target"):
        ConstituencyLBP()((torch.zeros(1, 3, 3), torch.zeros(1, 3, 3, 3)), target=torch.zeros(3, 3))


def test_compiled_mfvi_matches_the_torch_path_and_checks_raw_scores_in_the_kernel(monkeypatch):
    """On CPU ConstituencyMFVI's kernels read the raw scores (no PyTorch pass over clean ones),
    give the PyTorch path's marginals, loss and gradients, their hand-written backward passes
    gradcheck, and what they flag is refused through the shared checks with their messages."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend
    from synattn.structs.cky import second_order_vi

    spans, pairs, lengths = inputs(14, lengths=(5, 2, 4), scale=2.0)
    spans[0, 1, 3] = -float("inf")  # a forbidden span
    pairs[2, 0, 1, 3] = -float("inf")  # a masked factor
    dirty = pairs.clone()
    dirty[1, :, 2:] = float("nan")  # padding
    gold = torch.rand(spans.shape, generator=torch.Generator().manual_seed(3)) < 0.5
    calls = []
    checked = second_order_vi._checked
    monkeypatch.setattr(second_order_vi, "_checked", lambda *a, **k: calls.append(1) or checked(*a, **k))
    direction = torch.randn(spans.shape, dtype=torch.float64)
    results = {}
    for backend in ("numba", "torch"):
        calls.clear()
        x, y = spans.clone().requires_grad_(), dirty.clone().requires_grad_()
        with use_backend(backend):
            loss, mu = ConstituencyMFVI(3)((x, y), lengths, gold)
        assert len(calls) == (backend == "torch")
        grads = torch.autograd.grad(loss + (mu * direction).sum(), (x, y))
        results[backend] = (loss, mu, *grads)
    for a, b in zip(results["numba"], results["torch"]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    with use_backend("numba"):
        clean = inputs(15, lengths=(3, 2))
        assert torch.autograd.gradcheck(lambda s, p: ConstituencyMFVI(2)((s, p), clean[2], gold[:2, :3, :3])[0],
                                        (clean[0].requires_grad_(), clean[1].requires_grad_()))
        assert torch.autograd.gradgradcheck(lambda s, p: ConstituencyMFVI(2)((s, p), clean[2]),
                                            (clean[0], clean[1]))
    for which, bad, match in ((0, float("nan"), "scores: NaN"), (1, float("nan"), "pairs: NaN"),
                              (1, 1e9, "exceed the supported range"), (0, float("inf"), "exceed")):
        args = [spans.clone(), pairs.clone()]
        args[which][0, 1, 2] = bad if which == 0 else args[which][0, 1, 2]
        if which == 1:
            args[1][0, 1, 2, 3] = bad
        for backend in ("numba", "torch"):
            with use_backend(backend), pytest.raises(ValueError, match=match):
                ConstituencyMFVI()(tuple(args), lengths)
