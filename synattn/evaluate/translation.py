"""sacreBLEU / chrF with their signatures (of finished translations, and of dev translations at each
validation while training), and perplexity."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TranslationScores:
    """Corpus BLEU and chrF with the sacreBLEU signatures that make them reproducible."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int

    def format(self) -> str:
        return (f"BLEU {self.bleu:.2f}  ({self.bleu_signature})\n"
                f"chrF {self.chrf:.2f}  ({self.chrf_signature})")


def translation_scores(hypotheses: Sequence[str], references: Sequence[str], *, tokenize: str = "13a",
                       lowercase: bool = False) -> TranslationScores:
    """Corpus BLEU and chrF of detokenised hypotheses against one reference each (sacreBLEU).

    Args:
        hypotheses: system outputs, detokenised, one per sentence.
        references: references, same order and count.
        tokenize: sacreBLEU's BLEU tokeniser (``"13a"`` default, ``"intl"``, ``"ja-mecab"``, ...).
        lowercase: case-insensitive BLEU.

    Raises:
        ValueError: different numbers of hypotheses and references.
    """
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(tokenize=tokenize, lowercase=lowercase), CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return TranslationScores(b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature()),
                             len(hypotheses))


def perplexity(nll_sum: float, tokens: int) -> float:
    """exp(mean negative log-likelihood in nats per token); ``inf`` on overflow."""
    if tokens <= 0:
        raise ValueError("perplexity of zero tokens")
    mean = nll_sum / tokens
    return math.exp(mean) if mean < 700 else math.inf


def translation_metrics(model, exp, dev):
    """The ``valid_metrics`` of a training run that translates (for
    :func:`synattn.train.experiment_run.train_experiment`): BLEU and chrF of the first
    ``eval.bleu_sentences`` dev sentences, translated with the ``eval`` settings; None when the
    task does not translate or ``eval.bleu_sentences`` is 0."""
    from synattn.generate.translate import Translator

    if not (exp.kind.translates and exp.eval.bleu_sentences):
        return None
    count = min(exp.eval.bleu_sentences, len(dev))
    examples = [dev[i] for i in range(count)]
    references = dev.text("tgt")[:count]

    def metrics(trained) -> dict[str, float]:
        ev = exp.eval
        translator = Translator(getattr(trained, "module", trained), exp.data, ev.beam, ev.length_penalty,
                                ev.max_len_a, ev.max_len_b, ev.batch_size)
        scores = translation_scores(translator.translate(examples), references)
        return {"bleu": scores.bleu, "chrf": scores.chrf}

    return metrics
