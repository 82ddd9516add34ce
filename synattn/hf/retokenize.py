"""A prepared dataset seen through a pretrained model's own tokenizer.

A dataset written by ``synattn prepare`` stores sentencepiece pieces; a pretrained model reads its
own vocabulary (MiniLM's WordPiece, say). :class:`RetokenizedDataset` spells every sentence's words
back from their pieces (:meth:`synattn.data.batching.PreparedDataset.words`), tokenizes each word
with the model's fast tokenizer and projects the word tree onto the new pieces
(:func:`synattn.trees.project_to_subwords`, the same rules as everywhere in synattn), so the
examples have the stored fields' names and meaning (``src_ids``, ``src_word``, ``src_heads``,
``src_upos``, ``src_deprel``) in the model's vocabulary. :func:`collate_pretrained` frames them as
the model expects, ``[CLS] x [SEP]`` (piece k at position k + 1), with the syntax fields built by
their registered builders at those positions.

Example:
    >>> from synattn.hf.retokenize import RetokenizedDataset   # doctest: +SKIP
    >>> view = RetokenizedDataset(PreparedDataset("data/ewt", "dev"), tokenizer)
    >>> batch = collate_pretrained(view, [0, 1, 2], SyntaxRequest(src=frozenset({"head_targets"})))
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from synattn.data.batching import Batch, PreparedDataset, pad_ids
from synattn.errors import DataError
from synattn.syntax.batch import batch_syntax
from synattn.syntax.request import SyntaxRequest
from synattn.trees.subword import project_to_subwords, word_heads_of_pieces


class TokenIds:
    """The special token ids of a pretrained tokenizer that framing and masking need.

    Attributes:
        cls / sep / pad / mask / unk: the ids of ``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]``, ``[UNK]``
            (or the tokenizer's equivalents: ``bos``/``eos`` when it has no ``cls``/``sep``).
        vocab_size: the tokenizer's vocabulary size.
    """

    def __init__(self, tokenizer):
        def first(*names: str) -> int:
            for name in names:
                value = getattr(tokenizer, f"{name}_token_id", None)
                if value is not None:
                    return int(value)
            raise DataError(f"the tokenizer has no {' or '.join(names)} token", str(tokenizer.name_or_path))

        self.cls, self.sep = first("cls", "bos"), first("sep", "eos")
        self.pad, self.mask, self.unk = first("pad"), first("mask"), first("unk")
        self.vocab_size = len(tokenizer)
        self.special = np.array(sorted({self.cls, self.sep, self.pad, self.mask}), dtype=np.int64)


class RetokenizedDataset:
    """One split of a prepared dataset in a pretrained tokenizer's pieces (see the module docstring).

    Args:
        dataset: the prepared split (its sentencepiece model spells the words back).
        tokenizer: a ``transformers`` fast tokenizer.
        max_length: the longest sequence the model reads, ``[CLS]`` and ``[SEP]`` included (e.g.
            ``config.max_position_embeddings``).

    Raises:
        DataError: a sentence does not fit ``max_length`` (naming the split and the sentence).
    """

    def __init__(self, dataset: PreparedDataset, tokenizer, max_length: int = 512):
        from synattn.data.prepared import PreparedData

        self.dataset, self.folder, self.split = dataset, dataset.folder, dataset.split
        self.ids = TokenIds(tokenizer)
        words = dataset.words("src", PreparedData(dataset.folder).tokenizer("src"))
        self.examples = [self._encode(i, w, tokenizer, max_length) for i, w in enumerate(words)]

    def _encode(self, i: int, words: list[str], tokenizer, max_length: int) -> dict[str, np.ndarray]:
        stored = self.dataset[i]
        pieces = tokenizer(words, add_special_tokens=False)["input_ids"] if words else []
        pieces = [p if p else [self.ids.unk] for p in pieces]  # a word the tokenizer drops stays a word
        per_word = np.array([len(p) for p in pieces], dtype=np.int64)
        if per_word.sum() + 2 > max_length:
            raise DataError(f"sentence {i + 1} of split {self.split} has {int(per_word.sum())} pieces of the "
                            f"model's tokenizer, more than the {max_length - 2} it reads",
                            str(self.folder / self.split))
        word_of_piece = np.repeat(np.arange(len(words)), per_word)
        out: dict[str, np.ndarray] = {"src_ids": np.array([t for p in pieces for t in p], dtype=np.int32),
                                      "src_word": word_of_piece}
        if "src_heads" in stored:
            heads = word_heads_of_pieces(stored["src_heads"], stored["src_word"])  # [words], 1-based
            out["src_heads"] = project_to_subwords(heads, per_word)
            first = np.searchsorted(stored["src_word"], np.arange(len(words)))  # each word's first stored piece
            for name in ("src_upos", "src_deprel"):
                if name in stored:
                    out[name] = np.asarray(stored[name])[first][word_of_piece]
        return out

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.examples[i]

    def has(self, name: str) -> bool:
        return name in self.examples[0] if self.examples else self.dataset.has(name)

    @cached_property
    def _lengths(self) -> np.ndarray:
        return np.array([len(e["src_ids"]) + 2 for e in self.examples], dtype=np.int64)

    def lengths(self) -> np.ndarray:
        """``[len(self)]`` each example's length with ``[CLS]`` and ``[SEP]``."""
        return self._lengths


def collate_pretrained(dataset: RetokenizedDataset, indices, request: SyntaxRequest = SyntaxRequest()) -> Batch:
    """Pads the examples ``indices`` of ``dataset`` as ``[CLS] x [SEP]`` (``src_offset`` 1) with the
    requested syntax fields; ``[CLS]``, ``[SEP]`` and padding are outside every tree."""
    ids = dataset.ids
    examples = [dataset[int(i)] for i in indices]
    src = [np.concatenate([[ids.cls], e["src_ids"], [ids.sep]]) for e in examples]
    n = max(len(s) for s in src)
    tokens = pad_ids(src, n, ids.pad)
    padding = torch.ones_like(tokens, dtype=torch.bool)
    for b, s in enumerate(src):
        padding[b, : len(s)] = False
    batch = Batch(src=tokens, src_padding=padding, index=torch.as_tensor(np.asarray(indices)), src_offset=1)
    batch.src_syntax = batch_syntax(examples, "src", request.src, n, 1, request, causal=False,
                                    name=str(Path(dataset.folder) / dataset.split))
    return batch
