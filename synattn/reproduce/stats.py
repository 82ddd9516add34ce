"""The noise of a comparison: mean ± standard deviation over seeds, paired differences, and
sacreBLEU's paired bootstrap resampling (Koehn 2004) for translations of the same test set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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
                     samples: int = 1000, seed: int = 12345) -> dict[str, dict[str, float]]:
    """sacreBLEU's paired bootstrap test of ``system`` against ``baseline`` (BLEU and chrF).

    Args:
        baseline, system: detokenised outputs for the same sentences.
        references: one reference per sentence.
        samples: bootstrap resamples.
        seed: the resampling seed (sacreBLEU reads it from ``SACREBLEU_SEED``).

    Returns:
        ``{"bleu": {...}, "chrf": {...}}``, each with ``baseline``, ``system``, ``delta``,
        ``ci`` (half width of the system's 95% interval), ``p_value`` (the probability that the
        difference is due to chance; 1 where the scores are equal, e.g. identical outputs, where
        sacreBLEU's count of resampled differences larger than the observed one, 0, would give its
        smallest p-value)
        and ``signature``.
    """
    import os

    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

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
    out = {}
    for key, name in (("bleu", "BLEU"), ("chrf", "chrF2")):
        metric = next(k for k in scores if k.startswith(name))
        base, sys_ = scores[metric]
        out[key] = {"baseline": float(base.score), "system": float(sys_.score),
                    "delta": float(sys_.score - base.score), "ci": float(sys_.ci),
                    "p_value": 1.0 if sys_.score == base.score else float(sys_.p_value),
                    "signature": str(signatures[metric])}
    return out
