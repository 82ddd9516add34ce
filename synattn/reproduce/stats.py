"""The noise of a comparison: mean ± standard deviation over seeds, paired differences, and
sacreBLEU's paired bootstrap resampling (Koehn 2004) for translations of the same test set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (n − 1) of one metric over seeds."""

    mean: float
    std: float
    n: int

    def format(self, digits: int = 1, scale: float = 1.0) -> str:
        if self.n == 0:
            return "–"
        if self.n == 1:
            return f"{scale * self.mean:.{digits}f}"
        return f"{scale * self.mean:.{digits}f} ± {scale * self.std:.{digits}f}"

    def to_dict(self) -> dict:
        return {"mean": self.mean, "std": self.std, "n": self.n}


def summarize(values: Sequence[float]) -> Summary:
    """Mean ± sample standard deviation (0 for one value; NaN-free values only).

    Example:
        >>> summarize([1.0, 2.0, 3.0]).format(2)
        '2.00 ± 1.00'
    """
    values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(values)
    if n == 0:
        return Summary(math.nan, math.nan, 0)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return Summary(mean, std, n)


def paired_difference(method: dict[int, float], baseline: dict[int, float]) -> Summary:
    """Mean ± std over seeds of ``method[seed] − baseline[seed]`` (seeds both have).

    Pairing by seed removes the part of the noise that the two runs share (the same batches and
    masks for a given seed).

    Example:
        >>> paired_difference({1: 3.0, 2: 5.0}, {1: 1.0, 2: 2.0, 3: 9.0}).format(1)
        '2.5 ± 0.7'
    """
    seeds = sorted(set(method) & set(baseline))
    return summarize([method[s] - baseline[s] for s in seeds])


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     samples: int = 1000, seed: int = 12345) -> dict[str, dict[str, Any]]:
    """sacreBLEU's paired bootstrap test of ``system`` against ``baseline`` (BLEU and chrF).

    Args:
        baseline, system: detokenised outputs for the same sentences.
        references: one reference per sentence.
        samples: bootstrap resamples.
        seed: the resampling seed (sacreBLEU reads it from ``SACREBLEU_SEED``).

    Returns:
        ``{"bleu": {...}, "chrf": {...}}``, each with ``baseline``, ``system``, ``delta``,
        ``ci`` (half width of the system's own 95% interval, sacreBLEU's), ``delta_interval``
        (``[low, high]``: the 95% interval of the difference ``system − baseline`` over the same
        resamples, their 2.5th and 97.5th percentiles as sacreBLEU takes them), ``p_value`` (the
        probability that the difference is due to chance; 1 where the scores are equal, e.g.
        identical outputs, where sacreBLEU's count of resampled differences larger than the
        observed one, 0, would give its smallest p-value) and ``signature``.
    """
    import os

    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest, Result

    if not len(baseline) == len(system) == len(references):
        raise ValueError(f"{len(baseline)} baseline and {len(system)} system outputs for "
                         f"{len(references)} references")
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        test = PairedTest([("baseline", list(baseline)), ("system", list(system))],
                          {"bleu": BLEU(), "chrf": CHRF()}, [list(references)], test_type="bs",
                          n_samples=samples)
        signatures, scores = test()
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = previous
    out: dict[str, dict[str, Any]] = {}
    for key, name, metric_class in (("bleu", "BLEU", BLEU), ("chrf", "chrF2", CHRF)):
        metric = next(k for k in scores if k.startswith(name))
        base, sys_ = scores[metric]
        assert isinstance(base, Result) and isinstance(sys_, Result)  # (the two systems' results)
        # (the bootstrap test sets the system's ci and p_value)
        out[key] = {"baseline": float(base.score), "system": float(sys_.score),
                    "delta": float(sys_.score - base.score), "ci": float(cast(float, sys_.ci)),
                    "delta_interval": _delta_interval(metric_class(), baseline, system, references, samples, seed),
                    "p_value": 1.0 if sys_.score == base.score else float(cast(float, sys_.p_value)),
                    "signature": str(signatures[metric])}
    return out


def _delta_interval(metric, baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                    samples: int, seed: int) -> list[float]:
    """The 95% interval ``[low, high]`` of ``score(system) − score(baseline)`` over the resamples
    of sacreBLEU's paired bootstrap (the same indices: its generator and seed), each resample's
    two scores from the sentences' sufficient statistics as sacreBLEU computes them."""
    import numpy as np

    n = len(references)
    if n == 0:
        return [0.0, 0.0]
    idxs = np.random.default_rng(seed).choice(n, size=(samples, n), replace=True)  # [samples, n]
    stats = [np.array(metric._extract_corpus_statistics(list(hyps), [list(references)]), dtype="float32")
             for hyps in (baseline, system)]  # each [n, statistics]
    base, sys_ = ([metric._compute_score_from_stats(s[i].sum(0)).score for i in idxs] for s in stats)
    diffs = np.sort(np.array(list(sys_)) - np.array(list(base)))
    low = samples // 40  # the 2.5th percentile as sacreBLEU's estimate_ci takes it
    return [float(diffs[low]), float(diffs[samples - low - 1])]


DEGENERATE = 1.0
"""A score (BLEU or chrF, 0–100) below which a system is taken to translate nothing yet: BLEU
under one point means next to no matching 4-gram (what sacreBLEU's smoothing gives a model whose
outputs share only single words with the references). Two such scores say nothing about which
system is better, whatever the test says."""


def bootstrap_verdict(test: dict, level: float = 0.05) -> str:
    """What one entry of :func:`paired_bootstrap` shows: ``"no evidence (both scores under 1)"``
    when both scores are degenerate (:data:`DEGENERATE`), ``"within the noise"`` when the p-value
    is at least ``level`` or the difference's 95% interval holds 0, else ``"better"`` or
    ``"worse"`` (the system against the baseline).

    Example:
        >>> bootstrap_verdict({"baseline": 0.13, "system": 0.0, "delta": -0.13, "p_value": 0.001,
        ...                    "delta_interval": [-0.2, -0.1]})
        'no evidence (both scores under 1)'
    """
    if max(test["baseline"], test["system"]) < DEGENERATE:
        return f"no evidence (both scores under {DEGENERATE:g})"
    low, high = test["delta_interval"]
    if test["p_value"] >= level or low <= 0.0 <= high:
        return "within the noise"
    return "better" if test["delta"] > 0 else "worse"
