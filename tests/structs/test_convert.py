"""Score-layout converters to and from torch-struct and supar (the libraries are optional)."""

from __future__ import annotations

import itertools

import pytest
import torch

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF, TreeCRF, convert

GEN = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# Hand-built inputs: the documented relations.
# ---------------------------------------------------------------------------------------------

def test_dependency_layouts_by_hand():
    # 2 words; ours[h, d]: ROOT→1 = 1, ROOT→2 = 2, 1→2 = 3, 2→1 = 4
    ours = torch.tensor([[[0.0, 1.0, 2.0], [0.0, 0.0, 3.0], [0.0, 4.0, 0.0]]])
    assert convert.arcs_to_torch_struct(ours).tolist() == [[[1.0, 3.0], [4.0, 2.0]]]
    assert convert.arcs_to_supar(ours).tolist() == [[[0.0, 0.0, 0.0], [1.0, 0.0, 4.0],
                                                     [2.0, 3.0, 0.0]]]
    assert torch.equal(convert.arcs_from_torch_struct(convert.arcs_to_torch_struct(ours)), ours)
    assert torch.equal(convert.arcs_from_supar(convert.arcs_to_supar(ours)), ours)


def test_span_layouts_by_hand():
    # 2 words: (0,0) = 1, (1,1) = 2, (0,1) = 3; the lower triangle is ignored
    ours = torch.tensor([[[1.0, 3.0], [9.0, 2.0]]])
    assert convert.spans_to_supar(ours).tolist() == [[[0.0, 1.0, 3.0], [0.0, 0.0, 2.0],
                                                      [0.0, 0.0, 0.0]]]
    assert convert.spans_to_torch_struct(ours).shape == (1, 2, 2, 1)
    assert convert.spans_from_supar(convert.spans_to_supar(ours)).tolist() == [[[1.0, 3.0],
                                                                                [0.0, 2.0]]]
    # two labels with log-scores log 1 and log 2 on every span: the span score is log 3
    labelled = torch.stack((torch.zeros(1, 2, 2), torch.full((1, 2, 2), 2.0).log()), -1)
    torch.testing.assert_close(convert.spans_from_torch_struct(labelled),
                               torch.full((1, 2, 2), 3.0).log())


def test_chain_layouts_by_hand():
    unary = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])  # [1, 3, 2]
    trans = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
    edge = convert.chain_edge_potentials(unary, trans)  # [1, 2, 2, 2]
    assert edge[0, 0, 1, 0] == 1 * 0 + 2.0 + 30.0 + 3.0  # y0 = 1, y1 = 0
    assert edge[0, 1, 0, 1] == 20.0 + 6.0  # y1 = 0, y2 = 1
    assert convert.chain_to_torch_struct(edge)[0, 1, 1, 0] == edge[0, 1, 0, 1]
    supar_scores, supar_trans = convert.chain_to_supar(unary, trans)
    assert supar_trans.shape == (3, 3) and supar_trans[2].abs().sum() == 0
    assert torch.equal(supar_scores, unary) and torch.equal(supar_trans[:2, :2], trans)


# ---------------------------------------------------------------------------------------------
# Round trips and equal distributions.
# ---------------------------------------------------------------------------------------------

def test_round_trips():
    arcs = randn(3, 5, 5)
    usable = arcs.clone()
    usable[:, :, 0] = 0
    usable.diagonal(dim1=1, dim2=2).zero_()
    assert torch.equal(convert.arcs_from_torch_struct(convert.arcs_to_torch_struct(arcs)), usable)
    assert torch.equal(convert.arcs_from_supar(convert.arcs_to_supar(arcs)), arcs)
    spans = randn(3, 4, 4)
    assert torch.equal(convert.spans_from_supar(convert.spans_to_supar(spans)), spans.triu())
    there = convert.spans_to_torch_struct(spans)
    torch.testing.assert_close(convert.spans_from_torch_struct(there), spans)
    edge = randn(3, 4, 2, 2)
    assert torch.equal(convert.chain_from_torch_struct(convert.chain_to_torch_struct(edge)), edge)
    unary, trans = randn(3, 5, 3), randn(3, 3)
    back = convert.chain_from_supar(*convert.chain_to_supar(unary, trans))
    assert torch.equal(back[0], unary) and torch.equal(back[1], trans)


def test_minus_inf_survives_the_span_conversions():
    spans = randn(1, 3, 3)
    spans[0, 0, 1] = float("-inf")
    there = convert.spans_to_supar(spans)
    assert torch.isneginf(there[0, 0, 2]) and not torch.isnan(there).any()
    assert torch.isneginf(convert.spans_from_supar(there)[0, 0, 1])


def test_chain_edge_form_is_the_same_distribution():
    unary, trans, lengths = randn(2, 5, 3), randn(3, 3), torch.tensor([5, 3])
    a = LinearChainCRF(unary=unary, transition=trans, lengths=lengths)
    b = LinearChainCRF(convert.chain_edge_potentials(unary, trans), lengths)
    torch.testing.assert_close(a.log_partition, b.log_partition)
    torch.testing.assert_close(a.marginals, b.marginals)


def test_supar_start_and_end_scores_fold_into_the_unaries():
    """supar's chain score: start[y_0] + Σ unary + Σ trans + end[y_last]; brute force here."""
    scores, trans, lengths = randn(2, 4, 2), randn(3, 3), torch.tensor([4, 2])
    unary, transition = convert.chain_from_supar(scores, trans, lengths)
    ours = LinearChainCRF(unary=unary, transition=transition, lengths=lengths).log_partition
    for b, n in enumerate(lengths.tolist()):
        values = []
        for y in itertools.product(range(2), repeat=n):
            v = trans[2, y[0]] + trans[y[-1], 2] + sum(scores[b, i, y[i]] for i in range(n))
            values.append(v + sum(trans[y[i], y[i + 1]] for i in range(n - 1)))
        torch.testing.assert_close(ours[b], torch.logsumexp(torch.stack(values), 0))


# ---------------------------------------------------------------------------------------------
# Against the libraries, when installed.
# ---------------------------------------------------------------------------------------------

def test_against_torch_struct():
    torch_struct = pytest.importorskip("torch_struct")
    lengths = torch.tensor([5, 3])
    arcs = randn(2, 6, 6)
    pairs = ((DependencyCRF, torch_struct.DependencyCRF),
             (NonProjectiveDependencyCRF, torch_struct.NonProjectiveDependencyCRF))
    for ours_cls, theirs_cls in pairs:
        x = convert.arcs_to_torch_struct(arcs).requires_grad_()
        theirs = theirs_cls(x, lengths=lengths, multiroot=True)
        ours = ours_cls(arcs, lengths, multiroot=True)
        tol = 1e-8 if ours_cls is DependencyCRF else 1e-3  # (its Matrix-Tree adds eps = 1e-5)
        torch.testing.assert_close(theirs.partition.detach(), ours.log_partition,
                                   atol=tol, rtol=tol)
        torch.testing.assert_close(convert.arcs_from_torch_struct(theirs.marginals.detach()),
                                   ours.marginals, atol=tol, rtol=tol)
    spans = randn(2, 5, 5, 3)
    theirs = torch_struct.TreeCRF(spans.clone().requires_grad_(), lengths=lengths)
    ours = TreeCRF(convert.spans_from_torch_struct(spans), lengths)
    torch.testing.assert_close(theirs.partition.detach(), ours.log_partition)
    mu = convert.span_marginals_from_torch_struct(theirs.marginals.detach())
    torch.testing.assert_close(mu.triu(), ours.marginals)
    unary, trans = randn(2, 5, 3), randn(3, 3)
    edge = convert.chain_edge_potentials(unary, trans)
    theirs = torch_struct.LinearChainCRF(convert.chain_to_torch_struct(edge).requires_grad_(),
                                         lengths=lengths)
    ours = LinearChainCRF(unary=unary, transition=trans, lengths=lengths)
    torch.testing.assert_close(theirs.partition.detach(), ours.log_partition)
    torch.testing.assert_close(convert.chain_from_torch_struct(theirs.marginals.detach()),
                               ours.edge_marginals)


def test_against_supar():
    structs = pytest.importorskip("supar.structs")
    lengths = torch.tensor([5, 3])
    arcs = randn(2, 6, 6)
    for ours_cls, theirs_cls in ((DependencyCRF, structs.DependencyCRF),
                                 (NonProjectiveDependencyCRF, structs.MatrixTree)):
        for multiroot in (True, False):
            x = convert.arcs_to_supar(arcs).requires_grad_()
            theirs = theirs_cls(x, lengths, multiroot=multiroot)
            ours = ours_cls(arcs, lengths, multiroot=multiroot)
            torch.testing.assert_close(theirs.log_partition.detach(), ours.log_partition,
                                       check_dtype=False)  # (its Matrix-Tree returns float32)
            torch.testing.assert_close(convert.arcs_from_supar(theirs.marginals.detach()),
                                       ours.marginals, check_dtype=False)
    spans = randn(2, 5, 5)
    theirs = structs.ConstituencyCRF(convert.spans_to_supar(spans).requires_grad_(), lengths)
    ours = TreeCRF(spans, lengths)
    torch.testing.assert_close(theirs.log_partition.detach(), ours.log_partition)
    torch.testing.assert_close(convert.spans_from_supar(theirs.marginals.detach()), ours.marginals)
    scores, trans = randn(2, 5, 3), randn(4, 4)
    theirs = structs.LinearChainCRF(scores.clone().requires_grad_(), trans, lengths)
    unary, transition = convert.chain_from_supar(scores, trans, lengths)
    ours = LinearChainCRF(unary=unary, transition=transition, lengths=lengths)
    torch.testing.assert_close(theirs.log_partition.detach(), ours.log_partition)
    torch.testing.assert_close(theirs.marginals.detach(), ours.marginals)
