"""Subword segmentation with sentencepiece, aligned to the words of a dependency tree.

Words are segmented one by one (each word gets its own leading "▁"), so every piece belongs to
exactly one word and a word tree projects onto pieces by ``synattn.trees.project_to_subwords``.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

#: Fixed ids of the special pieces in every model synattn trains (``<mask>`` for masked LMs).
PAD, UNK, BOS, EOS, MASK = 0, 1, 2, 3, 4


def train_sentencepiece(sentences: Iterable[str], model_path: str | Path, vocab_size: int = 8000,
                        model_type: str = "unigram", character_coverage: float = 1.0,
                        ):
    """Train a sentencepiece model on sentences of whitespace-separated words and save it.

    Args:
        sentences: training text, one sentence per item.
        model_path: where to write the ``.model`` file (the vocabulary goes beside it as ``.vocab``).
        vocab_size: target vocabulary size; lowered automatically when the text is too small.
        model_type: ``"unigram"``, ``"bpe"``, ``"word"`` (whole words, the most frequent
            ``vocab_size`` of them; the others are ``<unk>``) or ``"char"``.
        character_coverage: share of characters covered by the vocabulary.

    Returns:
        The loaded ``sentencepiece.SentencePieceProcessor``.
    """
    import sentencepiece as spm

    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(sentences)), model_writer=buffer, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage, hard_vocab_limit=False,
        num_threads=2, minloglevel=2, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        user_defined_symbols=["<mask>"])
    from synattn.io import atomic_write

    with atomic_write(model_path, "wb") as f:
        f.write(buffer.getvalue())
    return spm.SentencePieceProcessor(model_proto=buffer.getvalue())


def segment_words(sp, words: Sequence[str], out_type: type = str) -> tuple[list, np.ndarray]:
    """Segment each word on its own.

    Args:
        sp: a ``sentencepiece.SentencePieceProcessor``.
        words: the words of one sentence.
        out_type: ``str`` for pieces, ``int`` for piece ids.

    Returns:
        ``(pieces, pieces_per_word)``: the pieces of the sentence in order, and an int array
        ``[n_words]`` with the number of pieces of each word (always ≥ 1).
    """
    per_word = sp.encode(list(words), out_type=out_type)
    pieces = [p for ws in per_word for p in ws]
    return pieces, np.array([max(len(ws), 1) for ws in per_word], dtype=np.int64)


def pieces_by_word(ids: np.ndarray, word_of_piece: np.ndarray) -> list[np.ndarray]:
    """The piece ids of each word, given each piece's word index (both ``[m]``)."""
    return np.split(ids, np.flatnonzero(np.diff(word_of_piece)) + 1)


def spell_words(ids: np.ndarray, word_of_piece: np.ndarray, sp) -> list[str]:
    """One sentence's words spelled from their pieces ``ids [m]`` with the sentencepiece processor
    ``sp`` (rare words whole, not ``<unk>``)."""
    return [sp.decode(p.tolist()) for p in pieces_by_word(ids, word_of_piece)] if len(ids) else []
