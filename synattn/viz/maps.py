"""What an attention plot shows: the self-attention of each stack of a model on one sentence, with
the labels of its positions and the sentence's tree over those positions (``synattn viz``).

Example:
    >>> position_heads(np.array([2, 0]), 1, 1).tolist()   # <s> a b </s>: b is the root, a hangs from it
    [-1, 3, 0, -1]
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from synattn.data.batching import collate_examples
from synattn.data.prepared import PreparedData
from synattn.data.subwords import BOS
from synattn.evaluate.induction import encoder_outputs
from synattn.models import EncoderDecoderTransformer, TransformerLM
from synattn.train.tasks import syntax_request_for


def position_heads(piece_heads: np.ndarray | None, offset: int, extra_after: int) -> np.ndarray | None:
    """1-based heads over the attention's positions (0 = ROOT) from a subword tree: ``offset``
    extra positions before the pieces (``<s>``) and ``extra_after`` after them (``</s>``) are no
    words of the tree (-1: no arc, no box)."""
    if piece_heads is None:
        return None
    h = np.asarray(piece_heads, dtype=np.int64)
    return np.concatenate([np.full(offset, -1, np.int64), np.where(h > 0, h + offset, 0),
                           np.full(extra_after, -1, np.int64)])


def sentence_pieces(folder: str | Path, example: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """The pieces of each side of ``example`` (``src``, and ``tgt`` when it has one), spelled by the
    prepared dataset's sentencepiece models in ``folder``."""
    import sentencepiece as spm

    manifest, pieces = PreparedData(folder).manifest, {}
    for side in ("src", "tgt"):
        if f"{side}_ids" in example:
            sp = spm.SentencePieceProcessor(model_file=str(Path(folder) / manifest["spm"][side]))
            pieces[side] = [sp.id_to_piece(int(i)) for i in example[f"{side}_ids"]]
    return pieces


@torch.no_grad()
def attention_maps(model, example: dict[str, np.ndarray], pieces: dict[str, list[str]]
                   ) -> list[tuple[str, list[np.ndarray], list[str], np.ndarray | None]]:
    """The self-attention of each stack on one sentence: ``(stack, per-layer [H, t, t],
    position labels, position heads or None)``. The encoder reads the source (masked LM,
    translation), a language model's decoder ``<s> x``, a translation model's decoder
    ``<s> y`` teacher-forced on the example's target (when it has one)."""
    request = syntax_request_for(model.config)
    if isinstance(model, TransformerLM):  # a language model reads the source side only
        example = {k: v for k, v in example.items() if k.startswith("src_")}
    has_target = "tgt_ids" in example
    if isinstance(model, EncoderDecoderTransformer) and not has_target:  # text input: no target side
        request = replace(request, tgt=frozenset())
    batch = collate_examples([example], request)
    maps = []
    if isinstance(model, TransformerLM):
        inputs = torch.cat([torch.full_like(batch.src[:, :1], BOS), batch.src[:, :-1]], dim=1)  # <s> x
        out = model(inputs, syntax=batch.tgt_syntax, need_weights=True)
        maps.append(("decoder", out.attentions["decoder.self"], ["<s>"] + pieces["src"],
                     position_heads(example.get("src_heads"), 1, 0)))
    else:
        extras = encoder_outputs(model, batch, need_weights=True)
        framed = (["<s>"] + pieces["src"], 1, 0) if batch.src_offset else (pieces["src"] + ["</s>"], 0, 1)
        maps.append(("encoder", extras.attentions["encoder.self"], framed[0],
                     position_heads(example.get("src_heads"), *framed[1:])))
    if isinstance(model, EncoderDecoderTransformer) and has_target:  # teacher-forced on the reference
        out = model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax, tgt_syntax=batch.tgt_syntax,
                    need_weights=True)
        maps.append(("decoder", out.attentions["decoder.self"], ["<s>"] + pieces["tgt"],
                     position_heads(example.get("tgt_heads"), 1, 0)))
    return [(name, [a[0].float().cpu().numpy() for a in layers], labels, heads)
            for name, layers, labels, heads in maps]
