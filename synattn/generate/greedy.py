"""Greedy search with a key/value cache."""

from __future__ import annotations

import torch
from torch import Tensor

from synattn.attention import SyntaxInputs
from synattn.generate.output import Decoder, Generation, next_log_probs
from synattn.models.state import DecoderState


@torch.no_grad()
def greedy_search(model: Decoder, state: DecoderState, prompt: Tensor, max_new_tokens: int,
                  eos_id: int, pad_id: int, syntax: SyntaxInputs | None = None) -> Generation:
    """Picks the most probable token at every step until EOS or ``max_new_tokens``.

    Args:
        model: a model with ``decode_step``.
        state: from ``model.start_decoding(...)`` (``use_cache=False``: recompute every step).
        prompt: ``[batch_size, p]`` first tokens (BOS for translation), p ≥ 1.
        max_new_tokens: the most tokens to generate.
        eos_id, pad_id: end and padding ids.
        syntax: decoder syntax fields, if the decoder's features need them.

    Returns:
        A :class:`Generation`.

    Example:
        >>> state = model.start_decoding(src)                        # doctest: +SKIP
        >>> bos = torch.full((src.shape[0], 1), model.config.bos_id)  # doctest: +SKIP
        >>> out = greedy_search(model, state, bos, 50, model.config.eos_id, model.config.pad_id)  # doctest: +SKIP
    """
    batch = prompt.shape[0]
    prefix, fed = prompt, 0
    finished = torch.zeros(batch, dtype=torch.bool, device=prompt.device)
    lengths = torch.zeros(batch, dtype=torch.long, device=prompt.device)
    scores = torch.zeros(batch, device=prompt.device)
    for _ in range(max_new_tokens):
        log_probs = next_log_probs(model, state, prefix, fed, syntax)  # [B, V]
        fed = prefix.shape[1]
        best, token = log_probs.max(dim=-1)  # [B], [B]
        token = token.masked_fill(finished, pad_id)
        scores = scores + best.masked_fill(finished, 0.0)
        lengths = lengths + (~finished).long()
        finished = finished | (token == eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)  # [B, t + 1]
        if bool(finished.all()):
            break
    return Generation(prefix[:, prompt.shape[1]:], lengths, scores)
