"""What the search functions return, and the one step they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from synattn.attention import SyntaxInputs
from synattn.models.state import DecoderState, ModelOutput


class Decoder(Protocol):
    """A model that decodes incrementally (``EncoderDecoderTransformer``, ``TransformerLM``)."""

    def decode_step(self, tokens: Tensor, state: DecoderState, syntax: SyntaxInputs | None = None,
                    need_weights: bool = False) -> ModelOutput: ...


@dataclass
class Generation:
    """Search results.

    Attributes:
        tokens: ``[batch_size, T]`` generated ids (after the prompt), ``pad_id`` after the end.
        lengths: ``[batch_size]`` number of generated tokens, EOS included.
        scores: ``[batch_size]`` sum of the tokens' log-probabilities (beam search: divided by
            ``length ** length_penalty``).
    """

    tokens: Tensor
    lengths: Tensor
    scores: Tensor


def next_log_probs(model: Decoder, state: DecoderState, prefix: Tensor, fed: int,
                   syntax: SyntaxInputs | None) -> Tensor:
    """Log-probabilities ``[batch_size, vocab]`` of the token after ``prefix [batch_size, t]``.

    With caches in ``state`` only ``prefix[:, fed:]`` (the tokens not fed yet) is computed;
    without, the whole prefix is recomputed.
    """
    tokens = prefix if state.layers is None else prefix[:, fed:]
    logits = model.decode_step(tokens, state, syntax).logits  # [B, t, V]
    assert logits is not None  # (a decoder's output)
    return torch.log_softmax(logits[:, -1].float(), dim=-1)
