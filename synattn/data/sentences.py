"""Sentences to run a trained model on, encoded as a prepared dataset's are: a split of the dataset,
or the lines of a text file split into words, parsed when the model reads trees and segmented by the
dataset's sentencepiece model (``synattn translate``, ``induce`` and ``viz``, and the studies).

Example:
    >>> from synattn.data.sentences import Sentences
    >>> s = Sentences([], [], [], 0)
    >>> s.total, len(s.skipped)
    (0, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sentencepiece as spm

from synattn.data.batching import PreparedDataset
from synattn.data.encoding import encode_sentence
from synattn.data.prepared import PreparedData
from synattn.data.subwords import pieces_by_word
from synattn.data.text import SkipReport, count_lines, read_lines
from synattn.errors import InputError

if TYPE_CHECKING:
    from synattn.trees.dependency import DependencyTree


class Sentences:
    """Encoded source sentences of a run's vocabulary: the model's inputs and their words.

    Attributes:
        examples: the stored fields of each sentence (``src_ids``, ``src_word``, with trees
            ``src_heads`` ...), as ``collate_examples`` takes them.
        words: the words of each sentence.
        numbers: each sentence's 1-based number: its line in the input file (skipped lines
            have none), or its index in the split plus one.
        total: number of input lines (or split sentences).
        skipped: the input lines left out (``on_error="skip"``) and why (:class:`SkipReport`).
    """

    def __init__(self, examples: list[dict[str, np.ndarray]], words: list[list[str]],
                 numbers: list[int], total: int):
        self.examples, self.words, self.numbers, self.total = examples, words, numbers, total
        self.skipped = SkipReport()

    @classmethod
    def from_split(cls, data: Path, split: str, indices: Sequence[int] | None = None) -> Sentences:
        """Sentences of a prepared split (all, or ``indices``); words decoded from their pieces."""
        try:
            dataset = PreparedDataset(data, split)
        except (FileNotFoundError, KeyError) as err:
            raise InputError(str(err).strip('"'), str(data)) from None
        sp = spm.SentencePieceProcessor(model_file=str(data / dataset.manifest["spm"]["src"]))
        indices = range(len(dataset)) if indices is None else indices
        for i in indices:
            if not 0 <= i < len(dataset):
                raise InputError(f"sentence index {i} is outside 0..{len(dataset) - 1}", f"{data}/{split}")
        examples = [dataset[i] for i in indices]
        try:
            lines = dataset.text("src")
        except OSError:
            lines = None
        words = []
        for i, e in zip(indices, examples):
            count = int(e["src_word"].max()) + 1 if len(e["src_word"]) else 0
            tokens = lines[i].split() if lines is not None and i < len(lines) else []
            if len(tokens) != count:  # raw text tokenised by the parser: the words from their pieces
                tokens = [sp.decode(ids.tolist()) for ids in pieces_by_word(e["src_ids"], e["src_word"])]
            words.append(tokens)  # the prepared words themselves: rare words are not <unk> (⁇)
        return cls(examples, words, [i + 1 for i in indices], len(dataset))

    @classmethod
    def from_text(cls, data: Path, path: str, needs_trees: bool, on_error: str = "raise",
                  line: int | None = None, pretokenized: bool | None = None,
                  max_len: int | None = None) -> Sentences:
        """Sentences of a text file (all lines, or the 0-based ``line`` alone), parsed when
        ``needs_trees`` with the spaCy pipeline the dataset was prepared with. With
        ``pretokenized`` the words are the whitespace-separated tokens (kept by the parser);
        without, raw text is tokenised by the parser, as ``prepare`` does; None (default): as the
        dataset's source words were made (:meth:`PreparedData.word_tokenizer`), so that
        ``servants.`` is the two words ``servants .`` wherever the training text had them so.
        Every line is checked before any parser or tokenizer sees it
        (:func:`synattn.data.text.line_problem`: characters, control characters and, with
        ``max_len`` (the ``--max-len`` in pieces), at most that many words, each word being one
        piece or more). Lines left out (``on_error="skip"``) are in ``skipped``."""
        prepared = PreparedData(data)
        manifest, labels = prepared.manifest, prepared.labels
        sp = prepared.tokenizer("src")
        word_tokenizer = prepared.word_tokenizer("src")
        if pretokenized is None:
            pretokenized = word_tokenizer is None
        report = SkipReport()
        # one chosen line: the others may be anything (an empty line elsewhere is not its problem)
        lines = read_lines(path, on_error="skip" if line is not None else on_error, report=report,
                           max_words=max_len, words_option="--max-len")
        if line is not None:
            lines = [(number, text) for number, text in lines if number == line + 1]
            cause = dict(report.skipped).get(line + 1)
            if cause is not None:
                raise InputError(f"line {line + 1} (0-based index {line}): {cause}", path)
            if not lines:
                raise InputError(f"no sentence at line {line + 1} (0-based index {line})", path)
        words = [text.split() for _, text in lines]
        trees: list[DependencyTree | None] = [None] * len(lines)
        if needs_trees:
            from synattn.data.parsing import parse

            parsed = list(parse([text for _, text in lines], manifest["config"]["src_model"],
                                pretokenized=pretokenized))
            trees, words = list(parsed), [tree.words for tree in parsed]
        elif not pretokenized:
            from synattn.data.parsing import tokenize

            words = tokenize([text for _, text in lines], word_tokenizer or manifest["config"]["src_model"])
        examples = [encode_sentence("src", w, sp, labels, tree) for w, tree in zip(words, trees)]
        sentences = cls(examples, words, [number for number, _ in lines], count_lines(path))
        sentences.skipped = report if line is None else SkipReport()
        return sentences
