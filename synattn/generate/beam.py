"""Beam search with a key/value cache (caches follow the surviving beams)."""

from __future__ import annotations

import torch
from torch import Tensor

from synattn.attention import SyntaxInputs
from synattn.generate.output import Decoder, Generation, next_log_probs
from synattn.models.state import DecoderState


@torch.no_grad()
def beam_search(model: Decoder, state: DecoderState, prompt: Tensor, max_new_tokens: int,
                eos_id: int, pad_id: int, beam_size: int = 5, length_penalty: float = 1.0,
                syntax: SyntaxInputs | None = None) -> Generation:
    """Keeps the ``beam_size`` best prefixes per sentence; returns the best finished hypothesis.

    A hypothesis finishes when it emits EOS or reaches ``max_new_tokens``; its score is the sum of
    its tokens' log-probabilities divided by ``length ** length_penalty`` (length counts EOS;
    ``length_penalty=0`` ranks by the plain sum). A sentence stops when it has ``beam_size``
    finished hypotheses (fairseq's rule).

    Args:
        model: a model with ``decode_step``.
        state: from ``model.start_decoding(...)`` for the ``batch_size`` sentences; it is expanded
            to ``batch_size * beam_size`` rows here.
        prompt: ``[batch_size, p]`` first tokens (BOS for translation).
        max_new_tokens: the most tokens to generate.
        eos_id, pad_id: end and padding ids.
        beam_size: beams per sentence.
        length_penalty: exponent of the length normalisation.
        syntax: decoder syntax fields for ``batch_size`` rows, if the decoder needs them.

    Returns:
        A :class:`Generation` with the best hypothesis of each sentence.
    """
    batch, k, device = prompt.shape[0], beam_size, prompt.device
    rows = torch.arange(batch, device=device).repeat_interleave(k)  # [B * K]
    state.reorder(rows)
    syntax = None if syntax is None else syntax.index_select(rows)
    prefix, fed = prompt.index_select(0, rows), 0  # [B * K, p]
    beam_scores = torch.full((batch, k), float("-inf"), device=device)
    beam_scores[:, 0] = 0.0  # all beams start equal: keep one
    finished: list[list[tuple[float, list[int], float]]] = [[] for _ in range(batch)]
    for step in range(max_new_tokens):
        log_probs = next_log_probs(model, state, prefix, fed, syntax)  # [B * K, V]
        fed = prefix.shape[1]
        vocab = log_probs.shape[-1]
        candidates = (beam_scores.view(-1, 1) + log_probs).view(batch, k * vocab)  # [B, K * V]
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=-1)  # [B, 2K]
        new_scores = torch.full((batch, k), float("-inf"), device=device)
        new_tokens = torch.full((batch, k), pad_id, dtype=torch.long, device=device)
        new_rows = torch.arange(batch, device=device)[:, None].mul(k).expand(batch, k).clone()
        last = step == max_new_tokens - 1
        for b in range(batch):
            alive = 0
            if len(finished[b]) >= k:
                continue
            for score, index in zip(top_scores[b].tolist(), top_index[b].tolist()):
                if score == float("-inf") or alive == k:
                    break
                beam, token = divmod(index, vocab)
                if token == eos_id or last:
                    tokens = prefix[b * k + beam, prompt.shape[1]:].tolist() + [token]
                    finished[b].append((score / len(tokens) ** length_penalty, tokens, score))
                else:
                    new_scores[b, alive], new_tokens[b, alive] = score, token
                    new_rows[b, alive] = b * k + beam
                    alive += 1
        if all(len(f) >= k for f in finished) or last:
            break
        rows = new_rows.view(-1)
        state.reorder(rows)
        syntax = None if syntax is None else syntax.index_select(rows)
        prefix = torch.cat([prefix.index_select(0, rows), new_tokens.view(-1, 1)], dim=1)
        beam_scores = new_scores
    return _best(finished, pad_id, device)


def _best(finished: list[list[tuple[float, list[int], float]]], pad_id: int,
          device: torch.device) -> Generation:
    best = [max(hyps, key=lambda h: h[0]) for hyps in finished]
    width = max(len(tokens) for _, tokens, _ in best)
    tokens = torch.full((len(best), width), pad_id, dtype=torch.long, device=device)
    for b, (_, seq, _) in enumerate(best):
        tokens[b, :len(seq)] = torch.tensor(seq, dtype=torch.long)
    lengths = torch.tensor([len(seq) for _, seq, _ in best], device=device)
    scores = torch.tensor([score for score, _, _ in best], device=device)
    return Generation(tokens, lengths, scores)
