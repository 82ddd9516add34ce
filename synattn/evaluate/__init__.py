"""Evaluation: translation metrics, perplexity, attachment of supervised heads, head agreement."""

from synattn.evaluate.attachment import head_agreement, supervised_attachment, word_predictions
from synattn.evaluate.translation import TranslationScores, perplexity, translation_scores

__all__ = ["TranslationScores", "head_agreement", "perplexity", "supervised_attachment",
           "translation_scores", "word_predictions"]
