"""The compiled Viterbi of chains given as ``unary`` and ``transition``, read from the two factors
(:mod:`synattn.structs.chain._viterbi_kernels`): the same scores and labels as the kernel over
transfer matrices, ties included, and the labelling enumeration finds."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.structs import LinearChainCRF
from synattn.structs.backend import use_backend
from synattn.structs.chain.dp import _batch_first, transfer_matrices
from synattn.structs.scores import mask_impossible

pytest.importorskip("numba")
from synattn.structs.chain import _kernels, _viterbi_kernels  # noqa: E402  (needs numba)

INF = float("inf")


def random_factors(seed: int, B: int, N: int, C: int, integer: bool, dtype: torch.dtype,
                   masked: float = 0.25) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``unary [B, N, C]``, ``transition [B, C, C]`` (small integers: many ties; or normal
    draws), about ``masked`` of the entries ``-inf``, and ragged lengths (chain 0 full, one of
    length 1)."""
    gen = torch.Generator().manual_seed(seed)
    if integer:
        unary = torch.randint(-2, 3, (B, N, C), generator=gen).to(dtype)
        trans = torch.randint(-2, 3, (B, C, C), generator=gen).to(dtype)
    else:
        unary = torch.randn(B, N, C, generator=gen, dtype=dtype)
        trans = torch.randn(B, C, C, generator=gen, dtype=dtype)
    unary[torch.rand(unary.shape, generator=gen) < masked] = -INF
    trans[torch.rand(trans.shape, generator=gen) < masked] = -INF
    lengths = torch.randint(1, N + 1, (B,), generator=gen)
    lengths[0], lengths[-1] = N, 1
    return unary, trans, lengths


def both_kernels(unary: torch.Tensor, trans: torch.Tensor, lengths: torch.Tensor):
    """``(scores, labels)`` of the factored kernel and of the transfer-matrix kernel."""
    crf = LinearChainCRF(unary=unary, transition=trans, lengths=lengths)
    factored = _viterbi_kernels.viterbi_factored(crf.unary, mask_impossible(trans), crf.mask)
    u0, T = transfer_matrices(crf.unary, crf.edge, crf.mask, batch_innermost=False)
    return factored, _kernels.viterbi(u0.t(), _batch_first(T), crf.mask)


def enumerated_best(unary: torch.Tensor, trans: torch.Tensor, n: int) -> tuple[float, list[int] | None]:
    """Best score of one chain (``-inf`` masks, float64) and the best labelling that Viterbi's
    tie-breaking picks: the smallest last label, then right to left the smallest label before
    (the least labelling when compared from the end); None if every labelling is masked."""
    C = unary.shape[-1]
    best, labels = -INF, None
    for y in itertools.product(range(C), repeat=n):
        score = sum(float(unary[i, y[i]]) for i in range(n))
        score += sum(float(trans[y[i], y[i + 1]]) for i in range(n - 1))
        if score > best or (score == best > -INF and y[::-1] < labels[::-1]):
            best, labels = score, y
    return best, None if labels is None else list(labels)


@pytest.mark.parametrize("C", [1, 2, 5])
@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_factored_viterbi_equals_the_transfer_matrix_kernel(C, integer, dtype):
    """Bit for bit: the same best scores and the same labels, ties (integer scores) and masks
    included, over ragged lengths from 1 to 12."""
    for seed in range(20):
        unary, trans, lengths = random_factors(seed, 6, 12, C, integer, dtype)
        (s1, l1), (s2, l2) = both_kernels(unary, trans, lengths)
        assert s1.dtype == s2.dtype == dtype
        assert torch.equal(s1, s2) and torch.equal(l1, l2), (seed, s1, s2, l1, l2)


@pytest.mark.parametrize("C", [1, 2, 5])
@pytest.mark.parametrize("masked", [0.0, 0.3])
def test_factored_argmax_equals_enumeration(C, masked):
    """``max`` and ``argmax`` of chains with integer scores (many ties broken as the kernel over
    transfer matrices does), masks and ragged lengths 1..4 against every labelling; a chain
    whose masks leave no labelling has ``max = -inf`` and an all ``-1`` argmax."""
    infeasible = 0
    for seed in range(12 if C < 5 else 4):
        unary, trans, lengths = random_factors(seed, 5, 4, C, True, torch.float32, masked)
        with use_backend("numba"):
            crf = LinearChainCRF(unary=unary, transition=trans, lengths=lengths)
            best, argmax = crf.max, crf.argmax
        for b, n in enumerate(lengths.tolist()):
            score, labels = enumerated_best(unary[b].double(), trans[b].double(), n)
            if labels is None:
                infeasible += 1
                assert best[b] == -INF and (argmax[b] == -1).all()
                continue
            assert float(best[b]) == score
            assert argmax[b, :n].tolist() == labels and (argmax[b, n:] == -1).all()
    assert masked == 0 or C > 2 or infeasible > 0  # (the masked case is exercised)


@pytest.mark.parametrize("C", [1, 2, 5])
def test_factored_path_equals_edge_form_and_torch_path(C):
    """Public ``max`` / ``argmax`` of the factored path equal the edge form's (transfer matrices,
    compiled; it holds no first unary of its own, so from length 2) and the PyTorch path's, with
    ``[C, C]`` and ``[B, C, C]`` transitions, -inf and -1e30 masks, a constrained CRF and a batch
    of length-1 chains."""
    unary, trans, lengths = random_factors(C, 7, 9, C, True, torch.float64)
    unary[unary == -INF] = -1e30
    cases = [(unary, trans, lengths.clamp_min(2)), (unary, trans[0], lengths.clamp_min(2)),
             (unary, trans, lengths), (unary[:, :1], trans, torch.ones(7, dtype=torch.long))]
    for k, (u, t, lens) in enumerate(cases):
        edge = t.unsqueeze(-3) + u[:, 1:, None, :]
        edge = torch.cat((edge[:, :1] + u[:, :1, :, None], edge[:, 1:]), 1)
        results = []
        for backend, form in (("numba", "factors"), ("torch", "factors"), ("numba", "edge")):
            if form == "edge" and k >= 2:
                continue
            with use_backend(backend):
                crf = (LinearChainCRF(edge, lens) if form == "edge"
                       else LinearChainCRF(unary=u, transition=t, lengths=lens))
                labels = torch.where(torch.arange(u.shape[1]) % 2 == 0, -1, 0).expand(7, -1)
                kept = crf.constrain(labels=labels.masked_fill(~crf.mask, -1))
                results.append((crf.max, crf.argmax, kept.max, kept.argmax))
        for other in results[1:]:
            for a, e in zip(results[0], other):
                assert torch.equal(a, e), (a, e)


def test_factored_path_is_taken(monkeypatch):
    """A chain from ``unary`` and ``transition`` (also with masks, also constrained) never forms
    transfer matrices for ``max`` / ``argmax`` on the compiled path; the edge form still does."""
    calls = []
    factored = _viterbi_kernels.viterbi_factored

    def spy(*args):
        calls.append(args[0].shape)
        return factored(*args)

    def refused(*args, **kwargs):
        raise AssertionError("transfer matrices formed")

    monkeypatch.setattr(_viterbi_kernels, "viterbi_factored", spy)
    unary, trans, lengths = random_factors(0, 4, 6, 3, False, torch.float32)
    with use_backend("numba"):
        with monkeypatch.context() as m:
            m.setattr("synattn.structs.chain.crf.transfer_matrices", refused)
            crf = LinearChainCRF(unary=unary, transition=trans, lengths=lengths)
            assert crf.masked and crf.argmax.shape == (4, 6)
            crf.constrain(allowed=torch.rand(4, 6, 3) < 0.8).max
            LinearChainCRF(unary=unary.clamp_min(-5), transition=trans[0].clamp_min(-5)).argmax
        assert len(calls) == 3
        LinearChainCRF(trans[:, None].expand(4, 5, 3, 3).contiguous(), lengths).argmax
        assert len(calls) == 3


def test_masks_applied_only_where_present():
    """Unmasked float32/float64 scores are kept as given (no copy); masked ones (``-inf``,
    ``-1e30``) and half-precision inputs come out as before, with ``NEG`` at the masks, and the
    transition stays one matrix broadcast over the positions."""
    unary, trans, lengths = random_factors(3, 3, 5, 2, False, torch.float32, masked=0.0)
    crf = LinearChainCRF(unary=unary, transition=trans, lengths=lengths)
    assert crf.unary is unary and not crf.masked and crf.edge.stride(1) == 0
    for u, t in ((unary.masked_fill(unary > 1, -INF), trans.masked_fill(trans > 0.5, -1e30)),
                 (unary.half(), trans.half()), (unary, trans.double().masked_fill(trans > 1, -INF))):
        crf = LinearChainCRF(unary=u, transition=t, lengths=lengths)
        expected_u = mask_impossible(u.float(), u.dtype)
        expected_t = mask_impossible(t.float(), t.dtype)
        assert crf.edge.stride(1) == 0 and crf.masked == bool((expected_u <= -1e9).any() | (expected_t <= -1e9).any())
        assert torch.equal(crf.unary, expected_u) and torch.equal(crf.edge[:, 0], expected_t.expand(3, 2, 2))
