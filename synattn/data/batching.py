"""Reading prepared datasets: examples, token-budget batches, and padded tensors with syntax.

Batches are built from the stored subword trees on the fly: relation labels, supervision targets
and tags are computed for the whole batch at once, only for the fields a model asks for
(:class:`~synattn.syntax.request.SyntaxRequest`), each by the builder registered with the field
(:mod:`synattn.syntax.fields`, vectorised by :mod:`synattn.trees.relations`).

Target-side conventions (decoder input = ``<s> y_0 … y_{m-1}``, output = ``y_0 … y_{m-1} </s>``):
the piece ``y_k`` sits at decoder position ``k + 1``; its supervised-head target is the position of
its head piece, and arcs whose head lies to the right of ``y_k`` are left out (the decoder is
causal, docs/methods.md §2); ``<s>`` has no target. The BET(SG) hint of decoder position t, which predicts
``y_t``, is the position of the nearest ancestor of ``y_t`` among positions ≤ t, else t itself
(docs/methods.md §4; the position predicting ``</s>`` points to itself, padding gets ``IGNORE_INDEX``).
A language model's input is ``<s> x`` (``synattn.train.tasks.LanguageModelTask``): for
monolingual data the decoder-side hints come from the source trees with the same shift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from synattn.syntax.batch import batch_syntax
from synattn.syntax.fields import is_field, syntax_field
from synattn.syntax.inputs import SyntaxInputs
from synattn.syntax.request import SyntaxRequest  # (also importable from here, where it was defined)
from synattn.data.subwords import BOS, EOS, PAD, spell_words
from synattn.errors import DataError, InputError


class PreparedDataset:
    """One split of a folder written by :func:`synattn.data.prepare.prepare`.

    Opening it checks the manifest and the shapes of the split's arrays (every field there, one
    sentence count, offsets that fit: :func:`synattn.data.validate.check_fields`, milliseconds
    for tens of thousands of sentences), so a damaged or hand-edited folder is an
    :class:`~synattn.errors.InputError` naming the file and the cause, not a crash later;
    :func:`synattn.data.validate.check_split` also checks every stored index (``synattn train``
    runs it on the splits it trains and validates on).

    Args:
        folder: the prepared folder (with ``manifest.json``).
        split: ``"train"``, ``"dev"`` or ``"test"``.

    Raises:
        InputError: the folder is not a prepared dataset, has no such split, or is damaged.
    """

    def __init__(self, folder: str | Path, split: str):
        from synattn.data.validate import check_fields, check_manifest, load_fields

        self.folder = Path(folder)
        self.manifest = check_manifest(self.folder)
        if split not in self.manifest["splits"]:
            raise InputError(f"has no split {split!r} (has {', '.join(self.manifest['splits']) or 'none'})",
                             str(self.folder))
        self.split = split
        self.sides = self.manifest["sides"]
        self.fields = load_fields(self.folder, split)
        check_fields(self.fields, self.manifest, split, self.folder / split)

    def __len__(self) -> int:
        return len(self.fields["src_ids"])

    def text(self, side: str = "tgt") -> list[str]:
        """The sentences of one side as prepared (e.g. references for BLEU), one per example."""
        return (self.folder / self.split / f"{side}.txt").read_text(encoding="utf-8").splitlines()

    def words(self, side: str, tokenizer) -> list[list[str]]:
        """Every example's words on ``side`` as prepared, spelled from their pieces with the side's
        sentencepiece ``tokenizer`` (rare words whole, not ``<unk>``)."""
        ids, word = self.fields[f"{side}_ids"], self.fields[f"{side}_word"]
        return [spell_words(ids[i], word[i], tokenizer) for i in range(len(self))]

    def has(self, name: str) -> bool:
        return name in self.fields

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {name: f[i] for name, f in self.fields.items()}

    def lengths(self) -> np.ndarray:
        """``[len(self)]`` padded length of each example (pieces + ``</s>``), the larger side."""
        out = self.fields["src_ids"].lengths + 1
        if "tgt_ids" in self.fields:
            out = np.maximum(out, self.fields["tgt_ids"].lengths + 1)
        return out


def token_batches(lengths: np.ndarray, max_tokens: int, *, shuffle: bool = True, seed: int = 0,
                  epoch: int = 0, max_sentences: int | None = None) -> list[np.ndarray]:
    """Group examples of similar length into batches of at most ``max_tokens`` padded tokens.

    Deterministic for a given ``(seed, epoch)``: a resumed run rebuilds the same batches.

    Args:
        lengths: ``[N]`` padded length of every example.
        max_tokens: bound on ``batch_size × longest`` of every batch (an example longer than
            this forms a batch of its own).
        shuffle: shuffle within equal lengths and shuffle the order of the batches.
        seed, epoch: the randomness of the shuffle.
        max_sentences: optional bound on the batch size.

    Returns:
        Index arrays, one per batch.
    """
    rng = np.random.default_rng([seed, epoch])
    noise = rng.random(len(lengths)) if shuffle else np.zeros(len(lengths))
    order = np.lexsort((noise, lengths))  # by length, ties in random order
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order):
            size = end + 1 - start
            if size * lengths[order[end]] > max_tokens or (max_sentences and size > max_sentences):
                break
            end += 1
        batches.append(order[start:end])
        start = end
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


@dataclass
class Batch:
    """Padded tensors of one batch.

    Attributes:
        src: ``[B, n]`` source piece ids followed by ``</s>`` (PAD beyond), or preceded by ``<s>``
            (``SyntaxRequest.src_bos``): piece k sits at position ``k + src_offset``.
        src_padding: ``[B, n]`` bool, True at padding.
        tgt_in / tgt_out: ``[B, m]`` decoder input (``<s> y``) and output (``y </s>``); None for
            monolingual data.
        tgt_padding: ``[B, m]`` bool.
        src_syntax / tgt_syntax: the requested syntax fields (None when nothing was requested);
            for monolingual data, ``tgt_syntax`` holds the hints of the language model's input.
        index: ``[B]`` the examples' indices in the dataset.
    """

    src: Tensor
    src_padding: Tensor
    index: Tensor
    tgt_in: Tensor | None = None
    tgt_out: Tensor | None = None
    tgt_padding: Tensor | None = None
    src_syntax: SyntaxInputs | None = None
    tgt_syntax: SyntaxInputs | None = None
    extra: dict = field(default_factory=dict)
    src_offset: int = 0

    @property
    def num_target_tokens(self) -> int:
        pad = self.tgt_padding if self.tgt_padding is not None else self.src_padding
        return int((~pad).sum())

    def to(self, device, non_blocking: bool = False) -> Batch:
        """A copy on ``device`` (``non_blocking``: asynchronous copies from pinned memory)."""
        move: dict[str, Any] = {k: (v.to(device, non_blocking=non_blocking)
                                    if isinstance(v, (Tensor, SyntaxInputs)) else v)
                                for k, v in self.__dict__.items()}
        return Batch(**move)

    def pin_memory(self) -> Batch:
        """A copy with every tensor in page-locked memory (what ``DataLoader(pin_memory=True)`` calls)."""
        pinned: dict[str, Any] = {k: (v.pin_memory() if isinstance(v, (Tensor, SyntaxInputs)) else v)
                                  for k, v in self.__dict__.items()}
        return Batch(**pinned)


def pad_ids(seqs: list[np.ndarray], length: int, value: int, dtype=torch.long) -> Tensor:
    """``[len(seqs), length]``: each sequence on its row from the left, ``value`` after it."""
    out = np.full((len(seqs), length), value, dtype=np.int64)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = s
    return torch.as_tensor(out, dtype=dtype)


def collate(dataset: PreparedDataset, indices: np.ndarray, request: SyntaxRequest = SyntaxRequest()) -> Batch:
    """Pad the examples ``indices`` of ``dataset`` into a :class:`Batch` with the requested syntax."""
    return collate_examples([dataset[int(i)] for i in indices], request, np.asarray(indices),
                            str(dataset.folder))


def collate_examples(examples: list[dict[str, np.ndarray]], request: SyntaxRequest = SyntaxRequest(),
                     indices: np.ndarray | None = None, name: str = "the data") -> Batch:
    """Pad examples (dicts of the stored fields, see ``prepare.encode_sentence``) into a :class:`Batch`."""
    if indices is None:
        indices = np.arange(len(examples))
    offset = int(request.src_bos)
    src = [np.concatenate([[BOS], e["src_ids"]] if offset else [e["src_ids"], [EOS]]) for e in examples]
    n = max(len(s) for s in src)
    src_t = pad_ids(src, n, PAD)
    batch = Batch(src=src_t, src_padding=src_t == PAD, index=torch.as_tensor(indices), src_offset=offset)
    batch.src_syntax = batch_syntax(examples, "src", request.src, n, offset, request, causal=False, name=name)
    if "tgt_ids" in examples[0]:
        m = max(len(e["tgt_ids"]) for e in examples) + 1
        batch.tgt_in = pad_ids([np.concatenate([[BOS], e["tgt_ids"]]) for e in examples], m, PAD)
        batch.tgt_out = pad_ids([np.concatenate([e["tgt_ids"], [EOS]]) for e in examples], m, PAD)
        batch.tgt_padding = batch.tgt_out == PAD
        batch.tgt_syntax = batch_syntax(examples, "tgt", request.tgt, m, 1, request, causal=True, name=name)
    elif not all(is_field(f) and syntax_field(f).language_model for f in request.tgt):
        raise DataError(f"the model needs {', '.join(sorted(request.tgt))} on the target side, but the "
                        f"dataset is monolingual", path=name)
    elif request.tgt:  # a language model over <s> x: its hints come from the source trees
        batch.tgt_syntax = batch_syntax(examples, "src", request.tgt, n, 1, request, causal=True, name=name)
    return batch
