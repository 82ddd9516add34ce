"""``score`` and ``log_prob`` refuse the same inputs, for every class with both.

``log_prob(y)`` is ``score(y) - log Z`` where ``y`` is a structure of the distribution; a
structure that ``log_prob`` refuses (a head or label outside its range within a sentence, a wrong
shape or dtype) must not get a score silently. Each class gets its best structure (accepted by
both) and the same structure spoiled in several ways; both methods must give the same outcome
(a value, or the same exception type) on each, and the index-valued ones must refuse ``-1``
inside a sentence's length with a ValueError.
"""

from __future__ import annotations

import pytest
import torch

from synattn.structs import (
    AlignmentCRF,
    Dependency2oCRF,
    DependencyCRF,
    LinearChainCRF,
    NonProjectiveDependencyCRF,
    SemiMarkovCRF,
    SentCFG,
    TreeCRF,
)

B, N = 2, 5
LENGTHS = torch.tensor([5, 3])


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


CLASSES = {
    "DependencyCRF": lambda: DependencyCRF(_randn(B, N + 1, N + 1), LENGTHS),
    "NonProjectiveDependencyCRF": lambda: NonProjectiveDependencyCRF(_randn(B, N + 1, N + 1), LENGTHS),
    "Dependency2oCRF": lambda: Dependency2oCRF(_randn(B, N + 1, N + 1), _randn(B, N + 1, N + 1, N + 1), LENGTHS),
    "DependencyCRF labelled": lambda: DependencyCRF(_randn(B, N + 1, N + 1, 3), LENGTHS),
    "NonProjectiveDependencyCRF labelled": lambda: NonProjectiveDependencyCRF(_randn(B, N + 1, N + 1, 3), LENGTHS),
    "TreeCRF": lambda: TreeCRF(_randn(B, N, N), LENGTHS),
    "TreeCRF labelled": lambda: TreeCRF(_randn(B, N, N, 3), LENGTHS),
    "LinearChainCRF": lambda: LinearChainCRF(_randn(B, N - 1, 3, 3), LENGTHS),
    "SemiMarkovCRF": lambda: SemiMarkovCRF(_randn(B, N - 1, 3, 2, 2), LENGTHS),
    "SentCFG": lambda: SentCFG(_randn(B, N, 2), _randn(B, 2, 4, 4), _randn(B, 2), LENGTHS),
    "AlignmentCRF": lambda: AlignmentCRF(_randn(B, N, 4, 3)),
}
"""Every class with ``score`` and ``log_prob`` (the labelled ones are built from labelled scores)."""

INDEXED = {"DependencyCRF", "NonProjectiveDependencyCRF", "Dependency2oCRF", "DependencyCRF labelled",
           "NonProjectiveDependencyCRF labelled", "LinearChainCRF"}
"""Structures given as indices (heads, labels) where ``-1`` marks padding only."""


def _set(x: torch.Tensor, index: tuple[int, ...], value: float) -> torch.Tensor:
    x = x.clone()
    x[index] = value
    return x


def _spoiled(best: torch.Tensor) -> dict[str, torch.Tensor]:
    """The best structure and versions of it that may be refused: ``-1`` or a large value in
    the first position of sentence 0 (inside its length; for ``[B, n, 2]`` labelled trees, in the
    head and in the label), another dtype, a position or a sentence missing."""
    first = (0,) * best.dim()
    out = {"best": best, "-1 inside": _set(best, first, -1), "large inside": _set(best, first, 100),
           "float" if not best.is_floating_point() else "long": best.double() if not best.is_floating_point()
           else best.long(), "bool": best.bool(), "one position short": best[:, :-1],
           "one sentence short": best[:1]}
    if best.dim() == 3 and best.shape[-1] == 2:  # labelled heads
        out["-1 label inside"] = _set(best, (0, 0, 1), -1)
    return out


def _outcome(method, structure) -> str:
    try:
        method(structure)
    except Exception as error:  # noqa: BLE001  # the outcome compared is the exception's type
        return type(error).__name__
    return "value"


@pytest.mark.parametrize("name", list(CLASSES))
def test_score_and_log_prob_refuse_the_same_inputs(name):
    crf = CLASSES[name]()
    best = crf.argmax
    if isinstance(best, tuple):  # SentCFG: (terms, rules, roots) counts; spoil the terms
        cases = {what: (x, *best[1:]) for what, x in _spoiled(best[0]).items()}
        cases["two parts"] = best[:2]
    else:
        cases = _spoiled(best)
    outcomes = {what: (_outcome(crf.score, y), _outcome(crf.log_prob, y)) for what, y in cases.items()}
    assert outcomes["best"] == ("value", "value")
    differ = {what: pair for what, pair in outcomes.items() if pair[0] != pair[1]}
    assert not differ, f"{name}: (score, log_prob) outcomes differ: {differ}"
    if name in INDEXED:
        assert outcomes["-1 inside"] == ("ValueError", "ValueError")
        assert outcomes["large inside"] == ("ValueError", "ValueError")


@pytest.mark.parametrize("cls", [DependencyCRF, NonProjectiveDependencyCRF])
def test_score_refuses_a_padding_head_inside_a_sentence(cls):
    # (issue: DependencyCRF.score summed a -1 head as the last row's arc, log_prob refused it)
    crf = cls(_randn(B, N + 1, N + 1), LENGTHS)
    heads = crf.argmax.clone()
    heads[1, 2] = -1  # sentence 1 has 3 words: its third word needs a head
    with pytest.raises(ValueError, match=r"heads\[1, 2\] = -1"):
        crf.score(heads)
    heads[1, 2] = 0
    heads[1, 3:] = -1  # past its length: padding, accepted
    assert torch.isfinite(crf.score(heads)).all()
