"""Mean-field and loopy-BP approximate marginals for arc + sibling scores, against supar's
``DependencyMFVI`` and ``DependencyLBP`` on the same inputs."""

from __future__ import annotations

import pytest
import torch

from synattn.structs.convert import arcs_from_supar, arcs_to_supar, siblings_to_supar
from synattn.structs.dependency.second_order_vi import DependencyLBP, DependencyMFVI

MIN = -1e32  # supar's mask value


def inputs(seed=0, lengths=(5, 3, 4), scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    B, n = len(lengths), max(lengths)
    scores = torch.randn(B, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    siblings = torch.randn(B, n + 1, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    return scores, siblings, torch.tensor(lengths)


def supar_inputs(scores, siblings, lengths, root_sibling):
    """The same factors as supar's parsers feed them: padding heads, self-loops and arcs into ROOT
    masked; ROOT as a sibling or dependent given ``root_sibling`` (0 for MFVI, whose update
    multiplies it by p(h -> ROOT); MIN for LBP, whose messages it then leaves uniform)."""
    B, L, _ = scores.shape
    pos = torch.arange(L)
    usable = ((pos[None, :, None] <= lengths[:, None, None]) & (pos[None, None, :] <= lengths[:, None, None])
              & (pos[None, None, :] >= 1) & (pos[:, None] != pos[None, :]))  # [B, h, d]
    s_arc = arcs_to_supar(torch.where(usable, scores, torch.full_like(scores, MIN)))
    s_sib = siblings_to_supar(siblings).clone()  # [b, m, h, s]
    s_sib[:, :, :, 0] = root_sibling
    s_sib[:, 0] = root_sibling
    mask = (pos[None, :] <= lengths[:, None]) & (pos[None, :] >= 1)
    return (s_arc, s_sib), mask


@pytest.mark.parametrize("max_iter", [1, 3, 5])
@pytest.mark.parametrize("cls, root_sibling", [(DependencyMFVI, 0.0), (DependencyLBP, MIN)])
def test_matches_supar(cls, root_sibling, max_iter):
    structs = pytest.importorskip("supar.structs")
    scores, siblings, lengths = inputs(max_iter)
    ours = cls(max_iter)((scores, siblings), lengths)
    theirs = getattr(structs, cls.__name__)(max_iter)(*supar_inputs(scores, siblings, lengths, root_sibling))
    theirs = arcs_from_supar(theirs.detach())
    words = ours.sum(1, keepdim=True) > 0  # [B, 1, d]: the columns of words
    assert torch.allclose(ours, torch.where(words, theirs, torch.zeros_like(theirs)), atol=1e-10)
    assert torch.allclose(ours[:, :, 1:].sum(1), (torch.arange(1, 6) <= lengths[:, None]).double())


def test_loss_matches_supar():
    structs = pytest.importorskip("supar.structs")
    scores, siblings, lengths = inputs(4)
    target = torch.tensor([[2, 0, 2, 3, 4], [0, 1, 1, -1, -1], [0, 1, 2, 3, -1]])
    loss, mu = DependencyMFVI()((scores, siblings), lengths, target)
    args, mask = supar_inputs(scores, siblings, lengths, 0.0)
    gold = torch.cat([torch.zeros(3, 1, dtype=torch.long), target.clamp_min(0)], 1)
    their_loss, _ = structs.DependencyMFVI()(args, mask, gold)
    assert torch.allclose(loss, their_loss.detach())


@pytest.mark.parametrize("max_iter", [1, 4])
def test_zero_siblings_mfvi_is_head_selection(max_iter):
    """With no sibling factors mean field never moves: the marginals are softmax_h(scores)."""
    scores, siblings, lengths = inputs(7)
    mu = DependencyMFVI(max_iter)((scores, torch.zeros_like(siblings)), lengths)
    L = scores.shape[-1]
    pos = torch.arange(L)
    heads = (pos[None, :, None] <= lengths[:, None, None]) & (pos[:, None] != pos[None, :])
    expected = torch.where(heads, scores, torch.full_like(scores, -float("inf"))).softmax(1)
    words = (pos >= 1) & (pos[None, :] <= lengths[:, None])  # [B, d]
    expected = torch.where(words[:, None, :], expected, torch.zeros_like(expected))
    assert torch.allclose(mu, expected, atol=1e-12)


def test_zero_siblings_lbp_is_not_head_selection_in_supar_either():
    """supar's LBP message adds the factor's total mass to the matching head's: with zero sibling
    scores its marginals still move away from softmax_h(scores) (documented), and ours equal supar's."""
    structs = pytest.importorskip("supar.structs")
    scores, siblings, lengths = inputs(8)
    zero = torch.zeros_like(siblings)
    ours = DependencyLBP()((scores, zero), lengths)
    mfvi = DependencyMFVI()((scores, zero), lengths)
    assert (ours - mfvi).abs().max() > 1e-3
    theirs = structs.DependencyLBP()(*supar_inputs(scores, zero, lengths, MIN))
    words = ours.sum(1, keepdim=True) > 0
    assert torch.allclose(ours, torch.where(words, arcs_from_supar(theirs.detach()), 0.0), atol=1e-10)


def test_padding_is_ignored_and_gradients_flow():
    scores, siblings, lengths = inputs(9, lengths=(4, 2))
    dirty_s, dirty_sib = scores.clone(), siblings.clone()
    dirty_s[1, 3:] = float("nan")
    dirty_sib[1, 3:] = float("nan")
    dirty_sib[:, :, 2, 2] = float("nan")  # s = m: no factor
    for cls in (DependencyMFVI, DependencyLBP):
        clean = cls()((scores, siblings), lengths)
        assert torch.allclose(cls()((dirty_s, dirty_sib), lengths), clean)
        x = scores.clone().requires_grad_()
        y = siblings.clone().requires_grad_()
        (cls()((x, y), lengths)[:, :, 1:] * torch.randn(2, 5, 4, dtype=torch.float64)).sum().backward()
        assert torch.isfinite(x.grad).all() and y.grad.abs().sum() > 0


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_iter_must_be_positive(bad):
    with pytest.raises(ValueError, match="max_iter"):
        DependencyMFVI(bad)


@pytest.mark.parametrize("cls", [DependencyMFVI, DependencyLBP])
def test_compiled_rounds_match_the_torch_path_and_their_backward_is_exact(cls):
    """The compiled kernels (CPU) give the PyTorch path's logits and gradients, and their
    hand-written backward passes gradcheck in float64."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend

    scores, siblings, lengths = inputs(11, scale=2.0)
    siblings[0, 1, 2, 3] = -float("inf")
    module = cls(3)
    x, y = scores.clone().requires_grad_(), siblings.clone().requires_grad_()
    direction = torch.randn(scores.shape, dtype=torch.float64)
    with use_backend("numba"):
        ours = module((x, y), lengths)
        g_ours = torch.autograd.grad((ours * direction).sum(), (x, y))
    with use_backend("torch"):
        theirs = module((x, y), lengths)
        g_theirs = torch.autograd.grad((theirs * direction).sum(), (x, y))
    assert torch.allclose(ours, theirs, atol=1e-12)
    for a, b in zip(g_ours, g_theirs):
        assert torch.allclose(a, b, atol=1e-12)
    # (finite differences around a masked entry's -1e9 weight in MFVI are noise: gradcheck
    # on scores without it)
    clean = inputs(11, scale=2.0)[1].requires_grad_()
    with use_backend("numba"):
        assert torch.autograd.gradcheck(lambda a, b: module.logits(a, b, lengths), (x, clean))


def test_compiled_lbp_leaves_large_sibling_scores_to_the_torch_path():
    """Beyond the compiled LBP's range (its linear-space messages) the PyTorch path runs: the
    same numbers as that path, not overflowed ones."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend
    from synattn.structs.dependency._vi_kernels import LBP_LIMIT

    scores, siblings, lengths = inputs(12)
    siblings = siblings * (3 * LBP_LIMIT)
    with use_backend("numba"):
        ours = DependencyLBP()((scores, siblings), lengths)
    with use_backend("torch"):
        theirs = DependencyLBP()((scores, siblings), lengths)
    assert torch.isfinite(ours).all() and torch.allclose(ours, theirs, atol=1e-12)


@pytest.mark.parametrize("cls", [DependencyMFVI, DependencyLBP])
def test_compiled_path_refuses_nan_siblings_like_the_torch_path(cls):
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend

    scores, siblings, lengths = inputs(13)
    siblings[0, 1, 2, 3] = float("nan")
    for backend in ("numba", "torch"):
        with use_backend(backend), pytest.raises(ValueError, match="siblings: NaN"):
            cls()((scores, siblings), lengths)


@pytest.mark.parametrize("cls", [DependencyMFVI, DependencyLBP])
def test_compiled_path_checks_raw_arc_scores_in_the_kernel(cls, monkeypatch):
    """On CPU the kernels read the raw arc scores, mask and check them and return the marginals
    with the logits (no PyTorch pass over the scores when they are clean); what they flag goes
    through check_arc_scores, with its messages, and every input gives the PyTorch path's result."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend
    from synattn.structs.dependency import second_order_vi

    scores, siblings, lengths = inputs(14, lengths=(5, 2, 4))
    calls = []
    checked = second_order_vi.check_arc_scores
    monkeypatch.setattr(second_order_vi, "check_arc_scores", lambda *a, **k: calls.append(1) or checked(*a, **k))
    dirty = scores.clone()
    dirty[1, 3:] = float("nan")  # padding
    dirty[0, 2, 3] = -float("inf")  # a masked arc
    for x in (dirty, dirty.float(), dirty.half(), dirty.bfloat16()):
        calls.clear()
        with use_backend("numba"):
            ours = cls()((x, siblings), lengths)
        # (half types are cast and checked before the kernels)
        assert len(calls) == (x.dtype not in (torch.float32, torch.float64))
        with use_backend("torch"):
            theirs = cls()((x, siblings), lengths)
        assert torch.allclose(ours.double(), theirs.double(), atol=1e-6)
    for bad, match in ((float("nan"), "scores: NaN"), (1e9, "exceed the supported range")):
        x = scores.clone()
        x[2, 1, 4] = bad
        for backend in ("numba", "torch"):
            with use_backend(backend), pytest.raises(ValueError, match=match):
                cls()((x, siblings), lengths)
    for backend in ("numba", "torch"):
        with use_backend(backend), pytest.raises(ValueError, match=r"lengths must be \[B\] with values in 1\.\.5"):
            cls()((scores, siblings), torch.tensor([5, 0, 4]))


@pytest.mark.parametrize("cls", [DependencyMFVI, DependencyLBP])
def test_infinite_sibling_scores_are_refused_on_every_backend(cls):
    """An infinite sibling score counts as out of range on the compiled path too (its statistics
    once dropped non-finite extremes and let +inf through)."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend

    scores, siblings, lengths = inputs(16)
    siblings[0, 1, 2, 3] = float("inf")
    for backend in ("numba", "torch"):
        with use_backend(backend), pytest.raises(ValueError, match="exceed the supported range"):
            cls()((scores, siblings), lengths)


@pytest.mark.parametrize("cls", [DependencyMFVI, DependencyLBP])
def test_compiled_rounds_ignore_what_is_no_factor_exactly(cls):
    """NaN or infinite entries outside the factors (a word's own sibling column, ROOT as a
    sibling, padding) change no bit of the compiled result (the factors are copied with their
    masks, rows padded to whole vectors, four rows per pass), and float32 inputs give float32
    marginals within float32 rounding of the float64 ones."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend

    scores, siblings, lengths = inputs(13, lengths=(9, 4, 7), scale=2.0)
    dirty = siblings.clone()
    dirty[:, :, 2, 2] = float("nan")  # s = m
    dirty[:, :, 0] = float("inf")  # ROOT as a sibling
    dirty[1, :, 5:] = float("nan")  # past the length
    with use_backend("numba"):
        clean = cls()((scores, siblings), lengths)
        assert torch.equal(cls()((scores, dirty), lengths), clean)
        single = cls()((scores.float(), siblings.float()), lengths)
    with use_backend("torch"):
        assert torch.allclose(clean, cls()((scores, siblings), lengths), atol=1e-12)
    assert single.dtype == torch.float32
    assert torch.allclose(single.double(), clean, atol=1e-6)


def test_compiled_lbp_near_its_limit_on_long_sentences():
    """Sibling scores just inside the compiled LBP's range on long sentences: the messages'
    products taken before each logarithm stay in float64's range (the same numbers as the
    PyTorch path)."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend
    from synattn.structs.dependency._vi_kernels import LBP_LIMIT

    scores, siblings, lengths = inputs(14, lengths=(30, 17))
    siblings = siblings.clamp(-1, 1) * LBP_LIMIT
    with use_backend("numba"):
        ours = DependencyLBP()((scores, siblings), lengths)
    with use_backend("torch"):
        theirs = DependencyLBP()((scores, siblings), lengths)
    assert torch.isfinite(ours).all() and torch.allclose(ours, theirs, atol=1e-10)


def test_compiled_lbp_every_length_with_and_without_padding_lanes():
    """The compiled LBP keeps each pair's messages in rows over the sibling index padded to
    whole vectors: every sentence length from 1 word (no factor) to 17, rows that need padding
    and rows that fill their vectors (n + 1 a multiple of 8), gives the PyTorch path's logits
    and gradients."""
    pytest.importorskip("numba")
    from synattn.structs.backend import use_backend

    lengths = tuple(range(1, 18))
    scores, siblings, lengths = inputs(17, lengths=lengths, scale=2.0)
    module = DependencyLBP(4)
    direction = torch.randn(scores.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    results = {}
    for backend in ("numba", "torch"):
        x, y = scores.clone().requires_grad_(), siblings.clone().requires_grad_()
        with use_backend(backend):
            q = module.logits(x, y, lengths)
            results[backend] = (q, *torch.autograd.grad((q * direction).sum(), (x, y)))
    for ours, theirs in zip(results["numba"], results["torch"]):
        assert torch.allclose(ours, theirs, atol=1e-12)


def test_no_autocast_context_is_entered_when_autocast_is_off(monkeypatch):
    """``fp32_inside`` (every structure's entry point) skips the two autocast contexts when
    autocast is off (they cost more than a small compiled kernel) and still disables it when
    it is on."""
    entered = []
    real = torch.autocast

    def counting(*args, **kwargs):
        entered.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "autocast", counting)
    scores, siblings, lengths = inputs(15)
    DependencyMFVI()((scores, siblings), lengths)
    assert entered == []
    with real("cpu", dtype=torch.bfloat16):
        mu = DependencyMFVI()((scores.float(), siblings.float()), lengths)
    assert entered and mu.dtype == torch.float32
