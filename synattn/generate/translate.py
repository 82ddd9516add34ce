"""Translating text with a trained encoder-decoder: encode (parsing when the encoder reads trees),
beam search, decode pieces back to text."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from synattn.data.batching import collate_examples
from synattn.data.encoding import encode_sentence
from synattn.data.prepared import PreparedData
from synattn.errors import InputError
from synattn.generate.beam import beam_search
from synattn.generate.greedy import greedy_search
from synattn.progress import progress
from synattn.trees.dependency import DependencyTree

logger = logging.getLogger(__name__)


class Translator:
    """Beam-search translation with a model and the vocabularies of its prepared dataset.

    Args:
        model: an ``EncoderDecoderTransformer``.
        data: the prepared dataset folder the model was trained on, or the run's copy of its
            tokenizers and labels (``RUN/vocab``, :mod:`synattn.runs`).
        beam: beam size (1 = greedy search).
        length_penalty: exponent of the length normalisation of beam scores.
        max_len_a, max_len_b: at most ``a × source pieces + b`` target pieces (the source pieces of
            the longest sentence of the batch; batches hold sentences of similar lengths), so that
            decoding ends even when the model never emits the end of the sentence (an untrained
            model); most translations stopped there are warned about (:attr:`stopped_at_limit`).
        batch_size: sentences per batch (sorted by length).
        detokenize: write the target's tokens as text, as the dataset's training text writes them
            (:mod:`synattn.data.detok`); else tokens separated by spaces, as the model makes them.
    """

    def __init__(self, model, data: str | Path, beam: int = 4, length_penalty: float = 1.0,
                 max_len_a: float = 1.5, max_len_b: int = 10, batch_size: int = 32,
                 detokenize: bool = True):
        from synattn.train.tasks import syntax_request_for

        folder = Path(data)
        prepared = PreparedData(folder)
        self.manifest = prepared.manifest
        if "tgt" not in self.manifest["spm"]:
            raise InputError("the dataset is monolingual: nothing to translate into", str(folder))
        self.src_sp, self.tgt_sp = prepared.tokenizer("src"), prepared.tokenizer("tgt")
        self.labels = prepared.labels
        self.spacing = prepared.spacing("tgt") if detokenize else None
        if detokenize and self.spacing is None and "detok" not in self.manifest:
            logger.warning("%s holds no detokenization table (prepared by an older synattn): translations "
                           "are written as tokens separated by spaces", folder)
        self.model = model
        request = syntax_request_for(model.config)  # the source side, with the model's label clipping
        self.request = replace(request, tgt=frozenset())
        self.beam, self.length_penalty, self.batch_size = beam, length_penalty, batch_size
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
        self.stopped_at_limit = 0
        """Translations of the last :meth:`translate` that reached the maximum length unfinished."""

    @property
    def needs_trees(self) -> bool:
        """Whether the encoder reads source trees (then input text must be parsed)."""
        return bool(self.request.src)

    def encode(self, words: Sequence[str], tree: DependencyTree | None = None) -> dict[str, np.ndarray]:
        """The source fields of one sentence (a tree is required when :attr:`needs_trees`)."""
        if self.needs_trees and tree is None:
            raise ValueError("this model's encoder reads source trees: give a parsed tree")
        return encode_sentence("src", list(words), self.src_sp, self.labels, tree)

    @torch.no_grad()
    def translate(self, examples: Sequence[dict[str, np.ndarray]], show_progress: bool = False) -> list[str]:
        """Translate encoded sources (see :meth:`encode` or a prepared split's examples); a warning
        when most translations reach the maximum length without ending (:attr:`stopped_at_limit`)."""
        self.model.eval()
        device = next(self.model.parameters()).device
        config = self.model.config
        order = np.argsort([len(e["src_ids"]) for e in examples], kind="stable")
        out: list[str] = [""] * len(examples)
        self.stopped_at_limit = 0
        chunks = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for chunk in progress(chunks, desc="translate", unit="batch", enabled=show_progress):
            batch = collate_examples([examples[i] for i in chunk], self.request).to(device)
            state = self.model.start_decoding(batch.src, batch.src_syntax)
            prompt = torch.full((len(chunk), 1), config.bos_id, dtype=torch.long, device=device)
            max_new = int(self.max_len_a * batch.src.shape[1] + self.max_len_b)
            if self.beam > 1:
                result = beam_search(self.model, state, prompt, max_new, config.eos_id, config.pad_id,
                                     beam_size=self.beam, length_penalty=self.length_penalty)
            else:
                result = greedy_search(self.model, state, prompt, max_new, config.eos_id, config.pad_id)
            for row, i in enumerate(chunk):
                ids = result.tokens[row, : int(result.lengths[row])].tolist()
                self.stopped_at_limit += len(ids) >= max_new and (not ids or ids[-1] != config.eos_id)
                text = self.tgt_sp.decode([t for t in ids if t not in (config.eos_id, config.pad_id)])
                out[i] = self.spacing.detokenize(text) if self.spacing is not None else text
        if examples and self.stopped_at_limit > len(examples) / 2:
            logger.warning("%d of %d translations reached the maximum length (%g × source pieces + %d) without "
                           "ending: the model has not learnt to end its sentences (trained too little?)",
                           self.stopped_at_limit, len(examples), self.max_len_a, self.max_len_b)
        return out
