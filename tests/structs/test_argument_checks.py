"""Arguments every public entry checks, on every backend: NaN among the used scores (and only
there), label sets, flags, types, label values, and counts bounded by memory (k-best, samples);
the one-pass checks of the scores and weights behind them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF, TreeCRF
from tests.helpers.backends import BACKENDS, on

INF = float("inf")


def _nan_inputs():
    """One constructor per CRF class, each with one NaN among the scores some structure uses."""
    arcs = torch.randn(2, 5, 5, dtype=torch.float64)
    arcs[0, 1, 2] = float("nan")
    unary = torch.randn(2, 4, 3, dtype=torch.float64)
    unary[1, 2, 0] = float("nan")
    trans = torch.randn(3, 3)
    trans[0, 1] = float("nan")
    spans = torch.randn(2, 4, 4)
    spans[0, 0, 2] = float("nan")
    return [("DependencyCRF", lambda: DependencyCRF(arcs)),
            ("NonProjectiveDependencyCRF", lambda: NonProjectiveDependencyCRF(arcs)),
            ("NonProjectiveDependencyCRF single root",
             lambda: NonProjectiveDependencyCRF(arcs, multiroot=False)),
            ("LinearChainCRF unary", lambda: LinearChainCRF(unary=unary)),
            ("LinearChainCRF transition", lambda: LinearChainCRF(unary=unary.nan_to_num(),
                                                                 transition=trans)),
            ("LinearChainCRF edges", lambda: LinearChainCRF(unary[:, 1:, :, None].expand(2, 3, 3, 3))),
            ("TreeCRF", lambda: TreeCRF(spans))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(7))
def test_nan_scores_are_a_value_error_on_every_backend(backend, case):
    """NaN used to be a mask on the compiled Matrix-Tree (log Z 8.29 against 8.44 clean) and
    NaN on the PyTorch one; argmax returned all -1 (Eisner, chain) or a tree (CKY)."""
    name, make = _nan_inputs()[case]
    with on(backend), pytest.raises(ValueError, match="NaN"):
        crf = make()
        crf.log_partition, crf.argmax


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_past_the_lengths_is_still_ignored(backend):
    arcs = torch.randn(1, 4, 4, dtype=torch.float64)
    arcs[0, :, 3] = arcs[0, 3, :] = float("nan")  # word 3 is padding
    unary = torch.randn(1, 4, 2, dtype=torch.float64)
    unary[0, 3] = float("nan")
    spans = torch.randn(1, 3, 3)
    spans[0, :, 2] = float("nan")
    lengths = torch.tensor([2])
    with on(backend):
        for crf in (DependencyCRF(arcs, lengths), NonProjectiveDependencyCRF(arcs, lengths),
                    LinearChainCRF(unary=unary, lengths=torch.tensor([3])), TreeCRF(spans, lengths)):
            assert torch.isfinite(crf.log_partition).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_without_labels_is_a_value_error(backend):
    """C = 0 crashed the compiled kernel (segmentation fault), IndexError on PyTorch."""
    with on(backend):
        for make in (lambda: LinearChainCRF(unary=torch.randn(2, 7, 0), transition=torch.randn(0, 0),
                                            lengths=torch.tensor([5, 3])),
                     lambda: LinearChainCRF(torch.randn(2, 6, 0, 0))):
            with pytest.raises(ValueError, match="labels C must be >= 1"):
                make().argmax


@pytest.mark.parametrize("value", ["no", "False", 0, 1, None, 2.0, [True]])
def test_multiroot_must_be_a_bool(value):
    """multiroot="no" counted as True."""
    for cls in (DependencyCRF, NonProjectiveDependencyCRF):
        with pytest.raises(ValueError, match="multiroot must be True or False"):
            cls(torch.randn(1, 3, 3), multiroot=value)
    assert DependencyCRF(torch.randn(1, 3, 3), multiroot=np.bool_(False)).multiroot is False


def test_scan_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="scan must be True, False or None"):
        LinearChainCRF(unary=torch.randn(1, 3, 2), scan="yes")


def test_numpy_scores_are_a_clear_error():
    """numpy scores raised AttributeError ('numpy.ndarray' object has no attribute 'dim')."""
    x = np.random.randn(1, 3, 3)
    for make in (lambda: DependencyCRF(x), lambda: NonProjectiveDependencyCRF(x), lambda: TreeCRF(x),
                 lambda: LinearChainCRF(unary=x), lambda: LinearChainCRF(x[..., None]),
                 lambda: LinearChainCRF(unary=torch.randn(1, 3, 3), transition=x[0])):
        with pytest.raises(ValueError, match=r"must be a torch.Tensor, got ndarray \(convert it"):
            make()
    with pytest.raises(ValueError, match="floating-point"):
        DependencyCRF(torch.ones(1, 3, 3, dtype=torch.long))


def test_chain_log_prob_with_a_label_out_of_range():
    """A label >= C raised RuntimeError from gather; a negative one was read as label 0."""
    crf = LinearChainCRF(unary=torch.randn(2, 3, 2), lengths=torch.tensor([3, 2]))
    with pytest.raises(ValueError, match=r"labels\[0, 1\] = 5 is outside 0..1"):
        crf.log_prob(torch.tensor([[0, 5, 1], [0, 0, -1]]))
    with pytest.raises(ValueError, match=r"labels\[1, 0\] = -1"):
        crf.score(torch.tensor([[0, 1, 1], [-1, 0, -1]]))
    with pytest.raises(ValueError, match="integer tensor"):
        crf.log_prob(torch.zeros(2, 3))
    assert torch.isfinite(crf.log_prob(torch.tensor([[0, 1, 1], [1, 0, -1]]))).all()  # -1 = padding


def test_kbest_k_is_bounded_by_memory_and_stops_when_all_are_listed(monkeypatch):
    """kbest(10**8) of a 2-word sentence ran 25 s and took 2.4 GB; k = 10**15 exhausted memory."""
    import synattn.limits as limits

    crf = DependencyCRF(torch.randn(1, 3, 3))
    for make in (lambda: crf.kbest(10 ** 15), lambda: TreeCRF(torch.randn(1, 3, 3)).kbest(10 ** 15),
                 lambda: LinearChainCRF(unary=torch.randn(1, 3, 2)).kbest(10 ** 15)):
        with pytest.raises(ValueError, match=r"kbest: k=1000000000000000 is too large: .* more than "
                                             r"this machine's"):
            make()
    monkeypatch.setattr(limits, "memory_bytes", lambda: 10 ** 9)  # a 1 GB machine
    with pytest.raises(ValueError, match="kbest: k=100000000 is too large"):
        crf.kbest(10 ** 8)
    for bad in ("3", 0, 2.0, True):
        with pytest.raises(ValueError, match="kbest: k must be a whole number >= 1"):
            crf.kbest(bad)
    monkeypatch.undo()
    for k in (10 ** 6, 10 ** 8):  # 3 trees of 2 words exist: listed at once, no padding made
        scores, heads = crf.kbest(k)
        assert scores.shape == (1, 3) and heads.shape == (1, 3, 2) and torch.isfinite(scores).all()
    two = DependencyCRF(torch.randn(2, 4, 4), lengths=torch.tensor([3, 2]))  # 12 and 3 trees
    scores, heads = two.kbest(10 ** 6)
    assert scores.shape == (2, 12) and torch.isinf(scores[1, 3:]).all() and (heads[1, 3:] == -1).all()


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["projective", "nonprojective", "chain", "tree"]), backend=st.sampled_from(BACKENDS),
       n=st.integers(1, 5), length=st.integers(1, 5), i=st.integers(0, 5), j=st.integers(0, 5),
       value=st.sampled_from([float("nan"), -float("nan")]))
def test_fuzz_one_nan_anywhere(kind, backend, n, length, i, j, value):
    """A NaN where some structure reads it is a ValueError on every backend; elsewhere it is ignored."""
    length = min(length, n)
    lengths = torch.tensor([n, length])
    if kind == "chain":
        x = torch.randn(2, n, 2, dtype=torch.float64)
        i, j = i % n, j % 2
        x[1, i, j] = value
        used = i < length
        make = lambda: LinearChainCRF(unary=x, lengths=lengths)  # noqa: E731
    elif kind == "tree":
        x = torch.randn(2, n, n, dtype=torch.float64)
        i, j = i % n, j % n
        x[1, i, j] = value
        used = i <= j < length
        make = lambda: TreeCRF(x, lengths)  # noqa: E731
    else:
        x = torch.randn(2, n + 1, n + 1, dtype=torch.float64)
        i, j = i % (n + 1), j % (n + 1)
        x[1, i, j] = value
        used = i != j and 1 <= j <= length and i <= length
        cls = DependencyCRF if kind == "projective" else NonProjectiveDependencyCRF
        make = lambda: cls(x, lengths)  # noqa: E731
    with on(backend):
        if used:
            with pytest.raises(ValueError, match="NaN"):
                make()
        else:
            crf = make()
            assert torch.isfinite(crf.log_partition).all() and not torch.isnan(crf.marginals).any()


def test_sample_count_is_bounded_by_memory(monkeypatch):
    """sample(count) had no bound: 10**9 samples of a batch allocated until the machine gave out."""
    import synattn.limits as limits
    from synattn.structs import Dependency2oCRF, SemiMarkovCRF

    monkeypatch.setattr(limits, "memory_bytes", lambda: 10 ** 9)  # a 1 GB machine
    makers = {"chain": lambda: LinearChainCRF(unary=torch.randn(2, 5, 3)),
              "projective": lambda: DependencyCRF(torch.randn(2, 6, 6)),
              "nonprojective": lambda: NonProjectiveDependencyCRF(torch.randn(2, 6, 6)),
              "tree": lambda: TreeCRF(torch.randn(2, 5, 5)),
              "semimarkov": lambda: SemiMarkovCRF(torch.randn(2, 5, 3, 2, 2)),
              "projective2o": lambda: Dependency2oCRF(torch.randn(2, 6, 6), torch.randn(2, 6, 6, 6))}
    for name, make in makers.items():
        crf = make()
        with pytest.raises(ValueError, match=r"sample: count=1000000000 is too large: 1000000000 samples"):
            crf.sample(10 ** 9)
        assert crf.sample(3).shape[0] == 3, name  # a sensible count still samples


def test_weights_as_given_need_one_clean_pass():
    """The weights of the MFVI updates are used as given only when every entry, used or not, is
    finite and in range; their diagonal is 0 on a copy unless it is 0 already and no gradient
    flows (then the caller's tensor itself, no copy)."""
    from synattn.structs.constants import MAX_TOTAL_SCORE
    from synattn.structs.scores import in_range, weights_as_given

    like = torch.zeros((), dtype=torch.float64)
    x = torch.randn(2, 4, 4, 4, dtype=torch.float64)
    out = weights_as_given([x], 4, [(2, 3)], like)[0]
    assert out is not x and (out.diagonal(0, 2, 3) == 0).all() and (x.diagonal(0, 2, 3) != 0).all()
    torch.testing.assert_close(out + torch.diag_embed(x.diagonal(0, 2, 3)), x)
    clean = out.clone()
    assert weights_as_given([clean], 4, [(2, 3)], like)[0] is clean
    grad = clean.clone().requires_grad_()
    assert weights_as_given([grad], 4, [(1, 2)], like)[0] is not grad
    for bad in (float("nan"), -INF, INF, -1e9, MAX_TOTAL_SCORE):  # anywhere, even where unused
        dirty = clean.clone()
        dirty[1, 3, 0, 2] = bad
        assert weights_as_given([clean, dirty], 4, [(2, 3), (2, 3)], like) is None
        assert not in_range([dirty], 4)
    half = clean.half()
    half[0, 0, 0, 1] = torch.finfo(torch.float16).min  # a float16 mask
    assert weights_as_given([half], 4, [(2, 3)], like) is None


def test_arc_check_is_one_pass_with_lengths_first():
    """check_arc_scores reads the lengths' range with the scores' bounds (one synchronisation);
    a bad length is still reported before NaN or range errors, and ``fill`` sets the entries no
    tree uses (what DependencyMFVI/LBP need) from the same usable mask."""
    from synattn.structs.constants import NEG
    from synattn.structs.dependency.arc_scores import check_arc_scores, usable_arcs
    from synattn.structs.scores import check_scores

    scores = torch.randn(2, 4, 4)
    nan = scores.index_fill(1, torch.tensor([1]), float("nan"))  # NaN in usable arcs too
    for bad in (torch.tensor([0, 3]), torch.tensor([3, 4])):
        for x in (scores, nan):
            with pytest.raises(ValueError, match=r"lengths must be \[B\] with values in 1\.\.3"):
                check_arc_scores(x, bad)
    out, lengths = check_arc_scores(scores, torch.tensor([3, 2]), fill=NEG)
    usable = usable_arcs(lengths, 4)
    assert (out[~usable] == NEG).all() and torch.equal(out[usable], scores[usable])
    with pytest.raises(ValueError, match="first"):
        check_scores([(scores, None)], 3, "scores", (torch.tensor(True), lambda: "first"))
    assert not check_scores([(scores, None)], 3, "scores", (torch.tensor(False), lambda: "first"))
