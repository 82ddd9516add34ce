"""What one evaluation of a model on a split measured (``synattn evaluate``, the studies)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Evaluation:
    """What :func:`evaluate_run` measured."""

    split: str
    sentences: int
    perplexity: float | None
    """None for a model without a language-model loss (a pretrained encoder trained with ``mlm: false``)."""
    translation: dict | None = None
    attachment: dict[str, float] = field(default_factory=dict)
    """UAS of each supervised head, each word's head read as its attention's argmax."""
    tree_attachment: dict[str, float] = field(default_factory=dict)
    """UAS of each supervised head's best projective single-root tree (Eisner decoding)."""
    head_agreement: dict[str, list[list[float]]] = field(default_factory=dict)
    hypotheses: list[str] | None = None

    def format(self) -> str:
        lines = [f"split {self.split}: {self.sentences} sentences"]
        if self.perplexity is not None:
            lines.append(f"perplexity {self.perplexity:.2f}")
        if self.translation:
            lines += [f"BLEU {self.translation['bleu']:.2f}  {self.translation['bleu_signature']}",
                      f"chrF {self.translation['chrf']:.2f}  {self.translation['chrf_signature']}"]
        if self.attachment:
            lines.append("supervised heads against the split's trees (its gold trees, or the parser's where the "
                         "dataset was parsed), word-level UAS:")
        lines += [f"supervised head {k}: UAS {v:.1%}"
                  + (f" (decoded tree: {self.tree_attachment[k]:.1%})" if k in self.tree_attachment else "")
                  for k, v in self.attachment.items()]
        for stack, table in self.head_agreement.items():
            best = max(((v, layer, head) for layer, row in enumerate(table) for head, v in enumerate(row)))
            lines.append(f"{stack}: best tree-following head layer {best[1]} head {best[2]} "
                         f"({best[0]:.1%} of pieces attend most to their subword head; piece-level, not the "
                         "word-level UAS of the studies)")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "hypotheses"}
