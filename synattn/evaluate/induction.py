"""Unsupervised constituency trees from a model with constituent attention (the Tree Transformer,
docs/methods.md §3): the encoder's link probabilities between adjacent pieces, per layer, made
word-level and decoded top-down (:mod:`synattn.trees.induce`). ``synattn induce`` and ``viz`` and the
tree-transformer study run these.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from synattn.data.batching import collate_examples
from synattn.data.sentences import Sentences
from synattn.errors import InputError
from synattn.models import EncoderDecoderTransformer, MaskedLM
from synattn.syntax.request import SyntaxRequest
from synattn.train.tasks import syntax_request_for
from synattn.trees.induce import induce_tree, no_split, word_links


def source_request(model) -> SyntaxRequest:
    """The source-side syntax the model's encoder reads."""
    request = syntax_request_for(model.config)
    return replace(request, tgt=frozenset())


def encoder_outputs(model, batch, need_weights: bool = False):
    """The encoder's extras (losses, attentions, constituent links) on a batch's sources."""
    if isinstance(model, MaskedLM):
        return model(batch.src, syntax=batch.src_syntax, need_weights=need_weights)
    if isinstance(model, EncoderDecoderTransformer):
        return model.encode(batch.src, batch.src_syntax, need_weights)[2]
    raise InputError(f"{type(model).__name__} has no encoder; induce and viz read an encoder's attention")


def check_constituent(model, run: str) -> None:
    """Raises ``InputError`` unless the model's encoder has constituent attention."""
    encoder = getattr(model.config, "encoder", None)
    if encoder is None or not encoder.constituent:
        raise InputError("the model's encoder has no constituent attention (train a config with "
                         "model.encoder.constituent: true, e.g. configs/tree_transformer_mlm.yaml)", run)


@torch.no_grad()
def constituent_links(model, sentences: Sentences, batch_size: int = 32) -> list[np.ndarray]:
    """Per sentence, the encoder's link probabilities between adjacent pieces ``[layers, pieces − 1]``."""
    request = source_request(model)
    device = next(model.parameters()).device
    order = np.argsort([len(e["src_ids"]) for e in sentences.examples], kind="stable")
    out: list[np.ndarray] = [np.zeros(0)] * len(order)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = collate_examples([sentences.examples[i] for i in chunk], request).to(device)
        links = encoder_outputs(model, batch).constituent_links["encoder"].float().cpu().numpy()  # [B, L, n − 1]
        for row, i in enumerate(chunk):
            pieces = len(sentences.examples[i]["src_ids"])
            out[i] = links[row, :, batch.src_offset:batch.src_offset + pieces - 1]  # not the <s> link
    return out


def sentence_links(model, sentences: Sentences, batch_size: int = 32) -> list[np.ndarray]:
    """Per sentence, the encoder's link probabilities between adjacent words ``[layers, words − 1]``
    (:func:`~synattn.trees.induce.word_links` of :func:`constituent_links`)."""
    return [word_links(a, e["src_word"]) for a, e in zip(constituent_links(model, sentences, batch_size),
                                                         sentences.examples)]


def induce_sentences(model, sentences: Sentences, threshold: float = 0.8, min_layer: int = 3,
                     batch_size: int = 32, descend_above: float | None = None,
                     links: list[np.ndarray] | None = None) -> list:
    """The induced word-level tree of every sentence (``descend_above``: see ``induced_spans``);
    ``links``: :func:`sentence_links`' result when it is computed already."""
    links = sentence_links(model, sentences, batch_size) if links is None else links
    return [induce_tree(a, words, threshold, min_layer, descend_above=descend_above)
            for a, words in zip(links, sentences.words)]


def flat_note(links: list[np.ndarray], threshold: float, min_layer: int) -> str | None:
    """A note for the sentences of three or more words decoded without any split (every word link
    ``[layers, words − 1]`` from ``min_layer`` up above ``threshold``), or None when there are none."""
    long = [a for a in links if a.shape[1] >= 2]
    flat = [a for a in long if no_split(a, threshold, min_layer)]
    if not flat:
        return None
    lowest = min(float(a[min(min_layer, a.shape[0]) - 1:].min()) for a in flat)
    return (f"note: {len(flat)} of {len(long)} sentences of three or more words are flat trees: every link from "
            f"layer {min_layer} up is above --threshold {threshold:g} (the lowest {lowest:.3f}), so no split was "
            "made; the model's links do not separate words yet (too little training?)")
