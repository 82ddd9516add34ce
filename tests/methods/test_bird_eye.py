"""Bird-Eye attention (docs/methods.md §4): BET(SG) pointer loss and BET(SF) reweighting, vs references;
the hints batches carry and the pointer loss of a language model in training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from synattn.attention import IGNORE_INDEX, MultiheadAttention
from synattn.attention.cache import KVCache
from synattn.data.batching import collate_examples
from synattn.data.subwords import BOS
from synattn.methods.bird_eye import BirdEyeReweighting, SyntaxGuidedPointer, diagonal_free_bias
from synattn.models import LanguageModelConfig, TransformerLM
from synattn.syntax.inputs import SyntaxInputs
from synattn.train.tasks import LanguageModelTask, syntax_request_for
from synattn.trees.relations import batch_syntax_hints
from tests.helpers.attention import random_heads
from tests.helpers.models import TINY, VOCAB, tiny_mt

D, H = 16, 4
DK = D // H


def split_projections(attn: MultiheadAttention, x):
    b, n, _ = x.shape
    return [F.linear(x, lin.weight, lin.bias).view(b, n, H, DK).transpose(1, 2)
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj)]  # [B, H, n, d_k] each


def diagonal_free_allowed(pad, n: int):
    """``[B, n, n]``: key j ≤ query i, no padding, and j ≠ i unless i = 0, pair by pair."""
    allowed = torch.zeros(pad.shape[0], n, n, dtype=torch.bool)
    for b in range(pad.shape[0]):
        for i in range(n):
            for j in range(i + 1):
                allowed[b, i, j] = not bool(pad[b, j]) and (j != i or i == 0)
    return allowed


def masked_softmax(logits, allowed):
    return torch.softmax(logits.masked_fill(~allowed[:, None], float("-inf")), -1).nan_to_num(0.0)


def reference_bird_eye(attn, feature: BirdEyeReweighting | None, x, pad):
    """Diagonal-free causal attention, reweighted by γ r_j when ``feature`` is given."""
    b, n, _ = x.shape
    q, k, v = split_projections(attn, x)
    allowed = diagonal_free_allowed(pad, n)
    logits = q @ k.transpose(-1, -2) / math.sqrt(DK)  # [B, H, n, n]
    probs = masked_softmax(logits, allowed)
    if feature is not None:
        h = (probs @ v).transpose(1, 2).reshape(b, n, D)
        hidden = torch.relu(F.linear(torch.cat([x, h], -1), feature.level[0].weight, feature.level[0].bias))
        r = F.linear(hidden, feature.level[2].weight, feature.level[2].bias)  # [B, n, H]
        logits = logits + feature.gamma * r.permute(0, 2, 1)[:, :, None, :]
        probs = masked_softmax(logits, allowed)
    mixed = (probs @ v).transpose(1, 2).reshape(b, n, D)
    return F.linear(mixed, attn.out_proj.weight, attn.out_proj.bias), probs


def sf_layer(gamma: float, seed: int = 0):
    torch.manual_seed(seed)
    feature = BirdEyeReweighting(D, H, hidden=6)
    attn = MultiheadAttention(D, H, features=[feature]).double().eval()
    with torch.no_grad():
        feature.gamma.fill_(gamma)
    return attn, feature


PAD = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])


def test_diagonal_free_bias_keeps_position_zero():
    bias = diagonal_free_bias(2, 2, 4, torch.float64)[0, 0]
    assert (bias < 0).tolist() == [[False, False, True, False], [False, False, False, True]]
    assert (diagonal_free_bias(0, 1, 1, torch.float32) == 0).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_sf_with_zero_gamma_is_diagonal_free_attention(need_weights):
    attn, _ = sf_layer(0.0)
    x = torch.randn(2, 6, D, dtype=torch.float64)
    expected, probs = reference_bird_eye(attn, None, x, PAD)
    out, extras = attn(x, key_padding_mask=PAD, causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, expected)
    if need_weights:
        torch.testing.assert_close(extras.probs, probs)
        assert (extras.probs.diagonal(0, -2, -1)[..., 1:] == 0).all()


def test_sf_reweights_by_levels():
    attn, feature = sf_layer(0.8, seed=1)
    x = torch.randn(2, 6, D, dtype=torch.float64)
    expected, probs = reference_bird_eye(attn, feature, x, PAD)
    plain, _ = reference_bird_eye(attn, None, x, PAD)
    out, extras = attn(x, key_padding_mask=PAD, causal=True, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(extras.probs, probs)
    assert not torch.allclose(out, plain)


def test_sf_gamma_and_level_ffn_learn():
    torch.manual_seed(2)
    feature = BirdEyeReweighting(D, H)
    attn = MultiheadAttention(D, H, features=[feature])
    out, _ = attn(torch.randn(2, 5, D), causal=True)
    out.square().sum().backward()
    assert feature.gamma.grad is not None and feature.gamma.grad != 0


def run_steps(attn, x, pad, chunks):
    """Decodes ``x`` in chunks of the given sizes with a KV cache; returns the concatenated outputs."""
    cache, outs, start = KVCache(), [], 0
    for size in chunks:
        out, _ = attn(x[:, start:start + size], causal=True, cache=cache,
                      key_padding_mask=pad[:, :start + size])
        outs.append(out)
        start += size
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("chunks", [[1] * 6, [2, 1, 3]])
def test_sf_cached_decoding_equals_full_recomputation(chunks):
    attn, _ = sf_layer(0.9, seed=3)
    x = torch.randn(2, 6, D, dtype=torch.float64)
    full, _ = attn(x, key_padding_mask=PAD, causal=True)
    torch.testing.assert_close(run_steps(attn, x, PAD, chunks), full)


def test_sf_cache_follows_beam_reordering():
    attn, _ = sf_layer(0.9, seed=4)
    x = torch.randn(2, 3, D, dtype=torch.float64)
    tail = torch.randn(3, 3, D, dtype=torch.float64)
    index = torch.tensor([1, 0, 1])  # after 3 steps the 2 rows become 3 beams
    full, _ = attn(torch.cat([x[index], tail], dim=1), causal=True)
    cache, outs = KVCache(), []
    for t in range(3):
        outs.append(attn(x[:, t:t + 1], causal=True, cache=cache)[0])
    cache.reorder(index)  # the levels in cache.extra follow the keys and values
    outs = [out[index] for out in outs]
    for t in range(3):
        outs.append(attn(tail[:, t:t + 1], causal=True, cache=cache)[0])
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_sf_incremental_misuse_is_rejected():
    attn, _ = sf_layer(0.5)
    cache = KVCache()
    attn(torch.randn(1, 2, D, dtype=torch.float64), causal=True, cache=cache)
    with pytest.raises(ValueError, match="previous steps"):
        attn(torch.randn(3, 1, D, dtype=torch.float64), causal=True,
             cache=KVCache(*(t.expand(3, -1, -1, -1) for t in (cache.key, cache.value))))


def reference_pointer(probs, hints, pad, head=None):
    """−mean over non-padding positions with a hint of log A[t, hint(t)]."""
    attention = probs.mean(1) if head is None else probs[:, head]
    terms = []
    for b in range(probs.shape[0]):
        for t in range(probs.shape[2]):
            if not bool(pad[b, t]) and int(hints[b, t]) != IGNORE_INDEX:
                terms.append(-torch.log(attention[b, t, int(hints[b, t])]))
    return torch.stack(terms).mean()


HEADS = torch.tensor([[2, 0, 2, 5, 3, 3], [3, 3, 0, 3, 0, 0]])  # second sentence: 4 words


def hinted(hints):
    return SyntaxInputs(hints=hints)


@pytest.mark.parametrize("head", [None, 2])
def test_pointer_loss_equals_reference_and_leaves_attention_unchanged(head):
    torch.manual_seed(5)
    feature = SyntaxGuidedPointer(weight=0.5, head=head)
    attn = MultiheadAttention(D, H, features=[feature]).double()
    plain = MultiheadAttention(D, H).double()
    plain.load_state_dict(attn.state_dict())
    x = torch.randn(2, 6, D, dtype=torch.float64)
    hints = batch_syntax_hints(HEADS, torch.tensor([6, 4]))
    hints[0, 1] = IGNORE_INDEX
    out, extras = attn(x, key_padding_mask=PAD, causal=True, syntax=hinted(hints), need_weights=True)
    expected, base = plain(x, key_padding_mask=PAD, causal=True, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(extras.probs, base.probs)
    torch.testing.assert_close(extras.losses["pointer"], 0.5 * reference_pointer(base.probs, hints, PAD, head))
    # eval mode: the fused path, no loss unless the weights are asked for
    attn.eval()
    _, quiet = attn(x, key_padding_mask=PAD, causal=True, syntax=hinted(hints))
    assert quiet.losses == {}


def test_pointer_loss_with_cache_equals_full_rows():
    torch.manual_seed(6)
    attn = MultiheadAttention(D, H, features=[SyntaxGuidedPointer()]).double()
    x = torch.randn(1, 6, D, dtype=torch.float64)
    hints = batch_syntax_hints(HEADS[:1])
    full, extras = attn(x, causal=True, syntax=hinted(hints), need_weights=True)
    cache = KVCache()
    for t in range(6):
        out, step = attn(x[:, t:t + 1], causal=True, cache=cache, syntax=hinted(hints))
        torch.testing.assert_close(out, full[:, t:t + 1])
        expected = -torch.log(extras.probs.mean(1)[0, t, hints[0, t]])
        torch.testing.assert_close(step.losses["pointer"], expected)


def test_pointer_loss_needs_hints_in_training():
    attn = MultiheadAttention(D, H, features=[SyntaxGuidedPointer()])
    with pytest.raises(ValueError, match="hints"):
        attn(torch.randn(1, 3, D), causal=True)


def test_pointer_loss_drives_attention_to_the_hints():
    torch.manual_seed(7)
    attn = MultiheadAttention(D, H, features=[SyntaxGuidedPointer()])
    x = torch.randn(2, 6, D)
    hints = batch_syntax_hints(HEADS, torch.tensor([6, 4]))
    syntax = hinted(hints)
    valid = ~PAD

    def mass_on_hints():
        _, extras = attn(x, key_padding_mask=PAD, causal=True, syntax=syntax, need_weights=True)
        mass = extras.probs.mean(1).gather(-1, hints[..., None])[..., 0]  # [B, n]
        return mass[valid].min().item()

    before = mass_on_hints()
    optimizer = torch.optim.Adam(attn.parameters(), lr=0.05)
    for _ in range(150):
        _, extras = attn(x, key_padding_mask=PAD, causal=True, syntax=syntax)
        optimizer.zero_grad()
        extras.losses["pointer"].backward()
        optimizer.step()
    after = mass_on_hints()
    assert before < 0.6 and after > 0.9, (before, after)


# ------------------------------------------------------------------------------------------------
# in the models: BET(SG) hints from the data, the pointer loss in training


def test_bird_eye_needs_a_causal_call():
    attn = MultiheadAttention(16, 2, features=[BirdEyeReweighting(16, 2)])
    with pytest.raises(ValueError, match="BirdEyeReweighting needs causal self-attention"):
        attn(torch.randn(1, 3, 16))


def reference_hints(piece_heads: np.ndarray, length: int) -> list[int]:
    """Hints over ``<s> y_0 .. y_{P-1}`` (+ padding), by walking up the tree from each y_t."""
    pieces = len(piece_heads)
    out = []
    for t in range(length):
        if t > pieces:
            out.append(IGNORE_INDEX)
            continue
        hint, head = t, (piece_heads[t] if t < pieces else 0)  # position P predicts </s>
        while head != 0:
            if head <= t:  # piece head − 1 sits at position head
                hint = head
                break
            head = piece_heads[head - 1]
        out.append(hint)
    return out


def _monolingual(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(2, 9))
        out.append({"src_ids": rng.integers(4, VOCAB, n).astype(np.int32), "src_heads": random_heads(rng, n)})
    return out


def test_collate_gives_shifted_hints_for_lm_and_translation_targets():
    examples = _monolingual(6, seed=3)
    batch = collate_examples(examples, syntax_request_for(
        LanguageModelConfig.from_dict(dict(TINY, vocab_size=VOCAB, decoder=dict(bird_eye="sg")))))
    n = batch.src.shape[1]
    hints = batch.tgt_syntax.hints
    assert hints.shape == (6, n) and batch.src_syntax is None
    for b, ex in enumerate(examples):
        assert hints[b].tolist() == reference_hints(ex["src_heads"], n)
    parallel = [{"src_ids": e["src_ids"], "tgt_ids": e["src_ids"], "tgt_heads": e["src_heads"]} for e in examples]
    batch = collate_examples(parallel, syntax_request_for(tiny_mt(decoder=dict(bird_eye="sg")).config))
    m = batch.tgt_in.shape[1]
    for b, ex in enumerate(examples):
        assert batch.tgt_syntax.hints[b].tolist() == reference_hints(ex["src_heads"], m)
    with pytest.raises(ValueError, match="needs hints on the tgt side, but the dataset has no tgt trees"):
        collate_examples([{"src_ids": e["src_ids"], "tgt_ids": e["src_ids"]} for e in examples],
                         syntax_request_for(tiny_mt(decoder=dict(bird_eye="sg")).config))


def test_lm_with_bet_sg_trains_with_the_pointer_loss_of_every_block():
    torch.manual_seed(4)
    lm = TransformerLM(LanguageModelConfig.from_dict(
        dict(TINY, vocab_size=VOCAB, decoder=dict(layers=2, bird_eye=dict(variant="sg", pointer_weight=0.5)))))
    examples = _monolingual(8, seed=5)
    request = syntax_request_for(lm.config)
    task = LanguageModelTask(request=request)
    batch = collate_examples(examples, task.syntax_request())
    loss, logs = task.loss(lm, batch)
    assert {k for k in logs if k.startswith("aux/")} == {"aux/decoder.0.pointer", "aux/decoder.1.pointer"}
    # the objective is the summed CE plus ntokens × Σ λ_p L_p, with L_p from the model's attention
    inputs = torch.cat([torch.full_like(batch.src[:, :1], BOS), batch.src[:, :-1]], dim=1)
    torch.manual_seed(0)
    out = lm(inputs, syntax=batch.tgt_syntax, need_weights=True)
    target = batch.src.masked_fill(batch.src_padding, IGNORE_INDEX)
    ce = F.cross_entropy(out.logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    tokens = int((~batch.src_padding).sum())
    hints, valid = batch.tgt_syntax.hints, ~batch.src_padding
    for layer, probs in enumerate(out.attentions["decoder.self"]):  # brute force, position by position
        terms = [-torch.log(probs[b].mean(0)[t, int(hints[b, t])])
                 for b in range(hints.shape[0]) for t in range(hints.shape[1]) if valid[b, t]]
        torch.testing.assert_close(out.losses[f"decoder.{layer}.pointer"], 0.5 * torch.stack(terms).mean())
    torch.testing.assert_close(loss, ce + tokens * sum(out.losses.values()), rtol=1e-5, atol=1e-4)
    # a few steps lower the pointer loss: the attention moves toward the hints
    optimizer = torch.optim.Adam(lm.parameters(), lr=0.02)
    pointer = []
    for _ in range(30):
        loss, logs = task.loss(lm, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        pointer.append(float(logs["aux/decoder.0.pointer"] + logs["aux/decoder.1.pointer"]))
    assert pointer[-1] < 0.7 * pointer[0], pointer
    lm.train()
    with pytest.raises(ValueError, match="hints"):  # training without hints is an error
        lm(inputs)
