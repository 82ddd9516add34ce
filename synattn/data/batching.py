"""Reading prepared datasets: examples, token-budget batches, and padded tensors with syntax.

Batches are built from the stored subword trees on the fly: relation labels, supervision targets
and tags are computed for the whole batch at once by the vectorised functions of
:mod:`synattn.trees.relations`, only for the fields a model asks for (:class:`SyntaxRequest`).

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

import numpy as np
import torch
from torch import Tensor

from synattn.attention.inputs import IGNORE_INDEX, SyntaxInputs
from synattn.data.subwords import BOS, EOS, PAD
from synattn.errors import DataError, InputError
from synattn.trees.relations import (batch_relation_labels, batch_syntax_hints, distance_vocab,
                                     traversal_vocab)


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


@dataclass(frozen=True)
class SyntaxRequest:
    """Which syntax fields a model needs, per side (computed only when asked)."""

    src: frozenset[str] = frozenset()
    tgt: frozenset[str] = frozenset()
    max_distance: int = 8
    max_traversal: int = 4


@dataclass
class Batch:
    """Padded tensors of one batch.

    Attributes:
        src: ``[B, n]`` source piece ids followed by ``</s>`` (PAD beyond).
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

    @property
    def num_target_tokens(self) -> int:
        pad = self.tgt_padding if self.tgt_padding is not None else self.src_padding
        return int((~pad).sum())

    def to(self, device) -> Batch:
        move = {k: (v.to(device) if isinstance(v, (Tensor, SyntaxInputs)) else v)
                for k, v in self.__dict__.items()}
        return Batch(**move)


def _pad(seqs: list[np.ndarray], length: int, value: int, dtype=torch.long) -> Tensor:
    out = np.full((len(seqs), length), value, dtype=np.int64)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = s
    return torch.as_tensor(out, dtype=dtype)


def _syntax(examples: list[dict], side: str, wanted: frozenset[str], length: int, offset: int,
            req: SyntaxRequest, causal: bool, name: str = "the data") -> SyntaxInputs | None:
    """Syntax fields of one side, on a sequence where piece k sits at position ``k + offset``."""
    if not wanted:
        return None
    if f"{side}_heads" not in examples[0]:
        how = "--parse-target" if side == "tgt" else "the source parsed (no --no-parse-source)"
        raise DataError(f"the model needs {', '.join(sorted(wanted))} on the {side} side, but the dataset "
                        f"has no {side} trees (prepare it with {how})", path=name)
    heads = [e[f"{side}_heads"].astype(np.int64) for e in examples]
    out: dict[str, Tensor] = {}
    if wanted & {"tree_dist", "traversal"}:
        # position p ≥ offset holds piece p - offset; ROOT-level extra tokens (</s>, <s>) get
        # overflow labels, like padding
        shifted = np.zeros((len(heads), length), dtype=np.int64)
        lens = np.zeros(len(heads), dtype=np.int64)
        for b, h in enumerate(heads):
            shifted[b, offset: offset + len(h)] = np.where(h > 0, h + offset, 0)
            lens[b] = offset + len(h)
        dist, trav = batch_relation_labels(shifted, lens, req.max_distance, req.max_traversal)
        if offset:  # positions before the first piece (<s>) are not words: overflow labels
            dist[:, :offset, :] = dist[:, :, :offset] = len(distance_vocab(req.max_distance)) - 1
            trav[:, :offset, :] = trav[:, :, :offset] = len(traversal_vocab(req.max_traversal)) - 1
        if "tree_dist" in wanted:
            out["tree_dist"] = torch.as_tensor(dist)
        if "traversal" in wanted:
            out["traversal"] = torch.as_tensor(trav)
    for name in ("pos", "deprel"):
        if name in wanted:
            column = f"{side}_upos" if name == "pos" else f"{side}_deprel"
            out[name] = _pad([np.concatenate([np.zeros(offset, np.int64), e[column]]) for e in examples],
                             length, PAD)
    if "head_targets" in wanted:
        targets = []
        for h in heads:
            k = np.arange(len(h))
            t = np.where(h > 0, h - 1, k) + offset  # root piece targets itself
            if causal:
                t = np.where(t - offset > k, IGNORE_INDEX, t)  # head to the right: left out
            targets.append(np.concatenate([np.full(offset, IGNORE_INDEX), t]))
        out["head_targets"] = _pad(targets, length, IGNORE_INDEX)
    if "hints" in wanted:
        out["hints"] = _hints(heads, length, offset)
    return SyntaxInputs(**out)


def _hints(heads: list[np.ndarray], length: int, offset: int) -> Tensor:
    """BET(SG) hints ``[B, length]`` on a sequence where piece k sits at position ``k + offset``.

    The positions before the first piece (``<s>``) are extra roots, never ancestors of a piece, so
    ``batch_syntax_hints`` of the shifted tree gives, at position t, the nearest ancestor of the
    piece at t + 1 among positions ≤ t, else t. Padding gets ``IGNORE_INDEX``.
    """
    shifted = np.zeros((len(heads), length), dtype=np.int64)
    lens = np.array([offset + len(h) for h in heads], dtype=np.int64)
    for b, h in enumerate(heads):
        shifted[b, offset: offset + len(h)] = np.where(h > 0, h + offset, 0)
    hints = batch_syntax_hints(shifted, lens)  # [B, length]
    hints[np.arange(length)[None, :] >= lens[:, None]] = IGNORE_INDEX
    return torch.as_tensor(hints)


def collate(dataset: PreparedDataset, indices: np.ndarray, request: SyntaxRequest = SyntaxRequest()) -> Batch:
    """Pad the examples ``indices`` of ``dataset`` into a :class:`Batch` with the requested syntax."""
    return collate_examples([dataset[int(i)] for i in indices], request, np.asarray(indices),
                            str(dataset.folder))


def collate_examples(examples: list[dict[str, np.ndarray]], request: SyntaxRequest = SyntaxRequest(),
                     indices: np.ndarray | None = None, name: str = "the data") -> Batch:
    """Pad examples (dicts of the stored fields, see ``prepare.encode_sentence``) into a :class:`Batch`."""
    if indices is None:
        indices = np.arange(len(examples))
    src = [np.concatenate([e["src_ids"], [EOS]]) for e in examples]
    n = max(len(s) for s in src)
    src_t = _pad(src, n, PAD)
    batch = Batch(src=src_t, src_padding=src_t == PAD, index=torch.as_tensor(indices))
    batch.src_syntax = _syntax(examples, "src", request.src, n, 0, request, causal=False, name=name)
    if "tgt_ids" in examples[0]:
        m = max(len(e["tgt_ids"]) for e in examples) + 1
        batch.tgt_in = _pad([np.concatenate([[BOS], e["tgt_ids"]]) for e in examples], m, PAD)
        batch.tgt_out = _pad([np.concatenate([e["tgt_ids"], [EOS]]) for e in examples], m, PAD)
        batch.tgt_padding = batch.tgt_out == PAD
        batch.tgt_syntax = _syntax(examples, "tgt", request.tgt, m, 1, request, causal=True, name=name)
    elif request.tgt - {"hints"}:
        raise DataError(f"the model needs {', '.join(sorted(request.tgt))} on the target side, but the "
                        f"dataset is monolingual", path=name)
    elif request.tgt:  # a language model over <s> x: its hints come from the source trees
        batch.tgt_syntax = _syntax(examples, "src", request.tgt, n, 1, request, causal=True, name=name)
    return batch
