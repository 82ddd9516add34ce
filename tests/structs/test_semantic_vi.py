"""Mean-field and loopy-BP approximate arc marginals of semantic dependency graphs (sibling,
co-parent and grandparent factors), against supar's ``SemanticDependencyMFVI`` and
``SemanticDependencyLBP`` on the same inputs, a hand-computed first round and the exact marginals
of a small factor graph."""

from __future__ import annotations

import math

import pytest
import torch

from synattn.structs.convert import arcs_from_supar, arcs_to_supar, siblings_to_supar
from synattn.structs.dependency.arc_scores import usable_arcs
from synattn.structs.dependency.semantic_vi import FACTORS, SemanticDependencyLBP, SemanticDependencyMFVI, second_arcs
from tests.helpers.binary_mrf import exact_marginals


def inputs(seed=0, lengths=(4, 2, 3), scale=1.0, root_coparent=True):
    """Random edge scores and factor weights, 0 where no arc or factor is (and, unless
    ``root_coparent``, for ROOT as a co-parent, a factor supar's mask drops)."""
    gen = torch.Generator().manual_seed(seed)
    B, L = len(lengths), max(lengths) + 1
    lengths = torch.tensor(lengths)
    arcs = usable_arcs(lengths, L)
    edges = torch.where(arcs, torch.randn(B, L, L, generator=gen, dtype=torch.float64) * scale, 0.0)
    masks = second_arcs(arcs)
    weights = [torch.where(masks[name], torch.randn(B, L, L, L, generator=gen, dtype=torch.float64) * scale, 0.0)
               for name in FACTORS]
    if not root_coparent:
        weights[1][:, :, 0] = 0
    return edges, weights, lengths, arcs


def supar_mfvi(max_iter, edges, weights, arcs, target=None):
    from supar.structs import SemanticDependencyMFVI as Theirs
    args = (arcs_to_supar(edges), *[siblings_to_supar(w) for w in weights])
    mask = arcs_to_supar(arcs)  # supar's parser mask without its self-loops
    if target is None:
        return arcs_from_supar(Theirs(max_iter)(args, mask).detach())
    return Theirs(max_iter)(args, mask, arcs_to_supar(target).long())[0].detach()


def supar_lbp_logits(max_iter, edges, weights, arcs):
    """supar's two-state LBP logits ``[B, h, m, 2]``, each weight given from the sender's side
    (the side its LBP reads)."""
    from supar.structs import SemanticDependencyLBP as Theirs
    args = (arcs_to_supar(edges), *[siblings_to_supar(w.transpose(2, 3)) for w in weights])
    return Theirs(max_iter).lbp(*args, arcs_to_supar(arcs)).detach().transpose(1, 2)


@pytest.mark.parametrize("max_iter", [1, 3, 5])
def test_mfvi_matches_supar(max_iter):
    pytest.importorskip("supar.structs")
    edges, weights, lengths, arcs = inputs(max_iter, root_coparent=False)
    ours = SemanticDependencyMFVI(max_iter)((edges, *weights), lengths)
    assert torch.allclose(ours, torch.where(arcs, supar_mfvi(max_iter, edges, weights, arcs), 0.0), atol=1e-12)


@pytest.mark.parametrize("max_iter", [1, 3, 5])
def test_lbp_matches_supar_with_sibling_factors(max_iter):
    pytest.importorskip("supar.structs")
    edges, (siblings, _, _), lengths, arcs = inputs(10 + max_iter)
    zero = torch.zeros_like(siblings)
    ours = SemanticDependencyLBP(max_iter)((edges, siblings, zero, zero), lengths)
    theirs = supar_lbp_logits(max_iter, edges, [siblings, zero, zero], arcs).softmax(-1)[..., 1]
    assert torch.allclose(ours, torch.where(arcs, theirs, 0.0), atol=1e-12)


def test_supar_lbp_passes_coparent_and_grandparent_weights_between_siblings():
    """Documented difference: in supar's LBP a co-parent or grandparent weight acts as a sibling
    factor (its messages go between arcs sharing a head); ours pairs the arcs its MFVI pairs."""
    pytest.importorskip("supar.structs")
    edges, (_, coparents, grandparents), lengths, arcs = inputs(20)
    zero = torch.zeros_like(coparents)
    for weights in ([zero, coparents, zero], [zero, zero, grandparents]):
        w = weights[1] + weights[2]
        as_cop = supar_lbp_logits(3, edges, weights, arcs)
        as_sib = supar_lbp_logits(3, edges, [w, zero, zero], arcs)
        assert torch.allclose(torch.where(arcs[..., None], as_cop, 0.0), torch.where(arcs[..., None], as_sib, 0.0))
        ours = SemanticDependencyLBP(3)((edges, *weights), lengths)
        assert (ours - torch.where(arcs, as_cop.softmax(-1)[..., 1], 0.0)).abs().max() > 1e-3


def test_root_is_a_coparent_here():
    """ROOT -> m with h -> m: a factor here, dropped by supar's mask."""
    edges, weights, lengths, _ = inputs(21)
    without = [weights[0], weights[1].clone(), weights[2]]
    without[1][:, :, 0] = 0
    for cls in (SemanticDependencyMFVI, SemanticDependencyLBP):
        assert (cls()((edges, *weights), lengths) - cls()((edges, *without), lengths)).abs().max() > 1e-3


@pytest.mark.parametrize("cls", [SemanticDependencyMFVI, SemanticDependencyLBP])
def test_loss_matches_supar(cls):
    pytest.importorskip("supar.structs")
    edges, weights, lengths, arcs = inputs(4, root_coparent=False)
    gold = (torch.rand(edges.shape, generator=torch.Generator().manual_seed(1)) < 0.4) & arcs
    if cls is SemanticDependencyLBP:
        weights[1:] = [torch.zeros_like(w) for w in weights[1:]]
    loss, _ = cls()((edges, *weights), lengths, gold)
    if cls is SemanticDependencyMFVI:
        theirs = supar_mfvi(3, edges, weights, arcs, gold.double())
    else:  # supar's LBP loss: two-class cross-entropy of its logits
        logits = supar_lbp_logits(3, edges, weights, arcs)
        theirs = torch.nn.functional.cross_entropy(logits[arcs], gold[arcs].long())
    assert torch.allclose(loss, theirs.double(), atol=1e-6)  # (supar's MFVI target is float32)


def test_mfvi_first_round_by_hand():
    """One round over three words: q(h->m) = s(h->m) + Σ_k σ(s(h->k)) sib + σ(s(k->m)) cop + σ(s(m->k)) grd."""
    edges, weights, lengths, arcs = inputs(6, lengths=(3,))
    mu = SemanticDependencyMFVI(max_iter=1)((edges, *weights), lengths)
    s, (sib, cop, grd) = edges[0].tolist(), [w[0].tolist() for w in weights]

    def sig(x):
        return 1 / (1 + math.exp(-x))

    for h in range(4):
        for m in range(1, 4):
            if h == m:
                assert mu[0, h, m] == 0
                continue
            q = s[h][m]
            for k in range(4):
                if k in (h, m):
                    continue
                q += (sig(s[h][k]) * sib[h][k][m] if k > 0 else 0.0) + sig(s[k][m]) * cop[h][k][m]
                q += sig(s[m][k]) * grd[h][k][m] if k > 0 else 0.0
            assert mu[0, h, m].item() == pytest.approx(sig(q), abs=1e-14)


def test_mfvi_reaches_its_fixed_point():
    edges, weights, lengths, arcs = inputs(7, scale=0.2)
    mu = SemanticDependencyMFVI(max_iter=100)((edges, *weights), lengths)
    p = torch.where(arcs, mu, 0.0)
    sib, cop, grd = weights
    update = (edges + torch.einsum("bhk,bhkm->bhm", p, sib) + torch.einsum("bkm,bhkm->bhm", p, cop)
              + torch.einsum("bmk,bhkm->bhm", p, grd))
    assert torch.allclose(torch.where(arcs, mu.logit(), 0.0), torch.where(arcs, update, 0.0), atol=1e-10)


def test_lbp_star_center_exact_after_one_round():
    """Two words: arcs 0->1 (the centre), 0->2 (its sibling), 2->1 (its co-parent), 1->2 (no
    factor). The factor graph is a star: one LBP round gives the centre and the lone arc their
    exact marginals (enumeration over the 16 graphs)."""
    edges, _, lengths, _ = inputs(8, lengths=(2,))
    sib, cop, grd = (torch.zeros(1, 3, 3, 3, dtype=torch.float64) for _ in range(3))
    sib[0, 0, 2, 1] = sib[0, 0, 1, 2] = 1.4  # 0->1 with 0->2, seen from either arc
    cop[0, 0, 2, 1] = cop[0, 2, 0, 1] = -1.9  # 0->1 with 2->1
    unary = {(h, m): edges[0, h, m].item() for h, m in ((0, 1), (0, 2), (1, 2), (2, 1))}
    exact = exact_marginals(unary, {((0, 1), (0, 2)): 1.4, ((0, 1), (2, 1)): -1.9})
    mu = SemanticDependencyLBP(max_iter=1)((edges, sib, cop, grd), lengths)
    for h, m in ((0, 1), (1, 2)):
        assert mu[0, h, m].item() == pytest.approx(exact[h, m], abs=1e-12)
    assert abs(SemanticDependencyMFVI(max_iter=1)((edges, sib, cop, grd), lengths)[0, 0, 1].item()
               - exact[0, 1]) > 1e-3


@pytest.mark.parametrize("cls", [SemanticDependencyMFVI, SemanticDependencyLBP])
def test_loss_gradcheck(cls):
    edges, weights, lengths, arcs = inputs(11, lengths=(3, 2), scale=0.7)
    gold = (torch.rand(edges.shape, generator=torch.Generator().manual_seed(2)) < 0.5) & arcs
    args = [edges.requires_grad_(), *(w.requires_grad_() for w in weights)]
    torch.autograd.gradcheck(lambda *x: cls(3)(tuple(x), lengths, gold)[0], args)


def test_padding_and_self_loops_are_ignored():
    edges, weights, lengths, _ = inputs(12, lengths=(4, 2))
    dirty_e, dirty_w = edges.clone(), [w.clone() for w in weights]
    dirty_e[1, 3:] = float("nan")
    dirty_e[:, 2, 2] = float("nan")  # a self-loop: no arc
    for w in dirty_w:
        w[1, :, :, 3:] = float("nan")
        w[:, :, 1, 1] = float("nan")  # k = m: no factor
    for cls in (SemanticDependencyMFVI, SemanticDependencyLBP):
        assert torch.allclose(cls()((dirty_e, *dirty_w), lengths), cls()((edges, *weights), lengths))


def test_finite_values_outside_the_factors_change_nothing():
    """MFVI reads clean weights as given (no masking pass): whatever finite values lie outside the
    factors (the second arc the first one, its reverse, a self-loop or padding) give the same
    marginals and zero gradients there."""
    edges, weights, lengths, _ = inputs(14, lengths=(4, 2))
    gen = torch.Generator().manual_seed(3)
    dirty = [w + 1e3 * torch.randn(w.shape, generator=gen, dtype=torch.float64) * (w == 0) for w in weights]
    for cls in (SemanticDependencyMFVI, SemanticDependencyLBP):
        torch.testing.assert_close(cls()((edges, *dirty), lengths), cls()((edges, *weights), lengths),
                                   rtol=1e-12, atol=1e-12)
        xs = [w.clone().requires_grad_() for w in dirty]
        cls()((edges, *xs), lengths).sum().backward()
        assert all((x.grad[w == 0] == 0).all() for x, w in zip(xs, weights))
        assert all(x.grad.abs().sum() > 0 for x in xs)


def test_bad_inputs():
    edges = torch.zeros(1, 3, 3)
    with pytest.raises(ValueError, match="scores must be"):
        SemanticDependencyMFVI()((edges, edges))
    with pytest.raises(ValueError, match="coparents must be"):
        SemanticDependencyLBP()((edges, torch.zeros(1, 3, 3, 3), edges, torch.zeros(1, 3, 3, 3)))
    with pytest.raises(ValueError, match="target"):
        SemanticDependencyMFVI()((edges, *[torch.zeros(1, 3, 3, 3)] * 3), target=torch.zeros(3, 3))
