"""The dependency-supervised biaffine head (Deguchi et al. 2019; docs/methods.md §2): the feature
against a reference, and the heads of a translation model learning the gold trees (subword level)
while the translation loss falls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from synattn.attention import IGNORE_INDEX, MultiheadAttention, SyntaxInputs
from synattn.methods.supervised import SupervisedHead
from synattn.models import EncoderDecoderConfig, EncoderDecoderTransformer
from synattn.trees.relations import head_targets
from synattn.trees.subword import project_to_subwords
from tests.helpers.attention import dense_allowed, naive_attention, projections

D, H = 16, 4
DK = D // H


def _reference_scores(attn, head: SupervisedHead, x):
    q, k, _ = projections(attn, x)
    qh, kh = q[:, head.head], k[:, head.head]
    b, n, m = x.shape[0], x.shape[1], x.shape[1]
    s = torch.empty(b, n, m, dtype=x.dtype)
    for bi in range(b):
        for t in range(n):
            for j in range(m):
                s[bi, t, j] = (qh[bi, t] / math.sqrt(DK)) @ head.bilinear @ kh[bi, j] + head.key_bias @ kh[bi, j]
    return s


@pytest.mark.parametrize("causal", [False, True])
def test_supervised_head_is_biaffine_and_its_loss_is_cross_entropy(causal):
    torch.manual_seed(1)
    head = SupervisedHead(DK, head=2, weight=0.7)
    attn = MultiheadAttention(D, H, features=[head]).double().eval()
    with torch.no_grad():
        head.bilinear.copy_(torch.randn(DK, DK))
        head.key_bias.copy_(torch.randn(DK))
    x = torch.randn(2, 6, D, dtype=torch.float64)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    targets = torch.tensor([[1, 1, 1, 5, 3, 2], [2, 0, 2, 1, IGNORE_INDEX, IGNORE_INDEX]])
    allowed = dense_allowed(pad, causal, 6, 6, batch=2)
    s = _reference_scores(attn, head, x)
    expected, probs = naive_attention(attn, x, allowed=allowed, head_logits=(2, s))
    out, extras = attn(x, key_padding_mask=pad, causal=causal,
                       syntax=SyntaxInputs(head_targets=targets), need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(extras.probs, probs)
    fused, fused_extras = attn(x, key_padding_mask=pad, causal=causal, syntax=SyntaxInputs(head_targets=targets))
    torch.testing.assert_close(fused, expected)
    # reference loss: mean over targets that are allowed keys (left arcs only when causal)
    terms = []
    for b in range(2):
        for t in range(6):
            j = int(targets[b, t])
            if j >= 0 and allowed[b, t, j]:
                terms.append(-torch.log(probs[b, 2, t, j]))
    expected_loss = 0.7 * torch.stack(terms).mean()
    torch.testing.assert_close(extras.losses["parse"], expected_loss)
    torch.testing.assert_close(fused_extras.losses["parse"], expected_loss)
    if causal:
        assert float(extras.head_log_probs["parse"].detach().exp().triu(1).max()) == 0.0
        assert len(terms) < int((targets >= 0).sum())  # right-pointing arcs were left out


def test_supervised_head_without_valid_targets_has_zero_loss():
    attn = MultiheadAttention(D, H, features=[SupervisedHead(DK)])
    targets = torch.full((1, 4), IGNORE_INDEX)
    _, extras = attn(torch.randn(1, 4, D), syntax=SyntaxInputs(head_targets=targets))
    assert float(extras.losses["parse"].detach()) == 0.0


def test_supervised_head_learns_fixed_targets():
    """A few gradient steps on the parse loss alone drive the argmax to the targets."""
    torch.manual_seed(2)
    attn = MultiheadAttention(D, H, features=[SupervisedHead(DK, head=0)])
    x = torch.randn(4, 6, D)
    targets = torch.randint(0, 6, (4, 6))
    opt = torch.optim.Adam(attn.parameters(), lr=0.05)
    for _ in range(150):
        _, extras = attn(x, syntax=SyntaxInputs(head_targets=targets))
        opt.zero_grad()
        extras.losses["parse"].backward()
        opt.step()
    predicted = extras.head_log_probs["parse"].argmax(-1)
    assert float((predicted == targets).float().mean()) >= 0.95
    assert F.nll_loss(extras.head_log_probs["parse"].transpose(1, 2), targets) < 0.2


# ------------------------------------------------------------------------------------------------
# in a translation model

# Hand-parsed sentences (CoNLL-U heads: 1-based, 0 = ROOT).
SENTENCES = [
    ("I think this is a good idea .", [2, 0, 4, 2, 7, 7, 4, 2]),
    ("She reads books .", [2, 0, 2, 2]),
    ("The cat sat on the mat .", [2, 3, 0, 6, 6, 3, 3]),
    ("We listen to jazz music .", [2, 0, 5, 5, 2, 2]),
    ("Dogs chase small cats quickly .", [2, 0, 4, 2, 2, 2]),
    ("He gave her a red apple .", [2, 0, 2, 6, 6, 2, 2]),
    ("Birds sing in the morning .", [2, 0, 5, 5, 2, 2]),
    ("My brother plays football every weekend .", [2, 3, 0, 3, 6, 3, 3]),
]
PAD, BOS, EOS = 0, 1, 2


def _pieces(word: str) -> list[str]:
    """A toy subword split: words longer than 4 characters become two pieces."""
    return [word] if len(word) <= 4 else [word[:4], "##" + word[4:]]


def _encode(words, heads, vocab):
    pieces = [_pieces(w) for w in words]
    ids = [vocab.setdefault(p, len(vocab)) for ps in pieces for p in ps]
    sub_heads = project_to_subwords(np.array(heads), [len(ps) for ps in pieces])
    final = np.cumsum([len(ps) for ps in pieces]) - 1  # final piece of each word
    return ids, head_targets(sub_heads), final


def _batch():
    src_vocab, tgt_vocab = {"<pad>": PAD, "<bos>": BOS, "<eos>": EOS}, {"<pad>": PAD, "<bos>": BOS, "<eos>": EOS}
    src, src_targets, tgt_in, tgt_out, tgt_targets, src_final = [], [], [], [], [], []
    for text, heads in SENTENCES:
        words = text.split()
        ids, targets, final = _encode(words, heads, src_vocab)
        src.append(ids)
        src_targets.append(list(targets))
        src_final.append(final)
        # toy "translation": the words in reverse order, in another vocabulary; the tree follows
        n = len(words)
        rev_words = ["T_" + w.lower() for w in reversed(words)]
        rev_heads = [0 if heads[n - 1 - i] == 0 else n + 1 - heads[n - 1 - i] for i in range(n)]
        ids, targets, _ = _encode(rev_words, rev_heads, tgt_vocab)
        tgt_in.append([BOS] + ids)
        tgt_out.append(ids + [EOS])
        tgt_targets.append([IGNORE_INDEX] + [t + 1 for t in targets])  # decoder positions: BOS at 0

    def pad(rows, value):
        width = max(len(r) for r in rows)
        return torch.tensor([r + [value] * (width - len(r)) for r in rows])

    return (pad(src, PAD), pad(src_targets, IGNORE_INDEX), pad(tgt_in, PAD), pad(tgt_out, PAD),
            pad(tgt_targets, IGNORE_INDEX), src_final, len(src_vocab), len(tgt_vocab))


def test_supervised_heads_overfit_gold_trees_while_translation_loss_falls():
    torch.manual_seed(0)
    src, src_targets, tgt_in, tgt_out, tgt_targets, src_final, v_src, v_tgt = _batch()
    config = EncoderDecoderConfig.from_dict(dict(
        src_vocab_size=v_src, tgt_vocab_size=v_tgt, d_model=32, heads=2, ffn_dim=64, dropout=0.0,
        norm="pre", encoder=dict(layers=2, supervised_head=dict(layer=1, head=0)),
        decoder=dict(layers=2, supervised_head=dict(layer=1, head=0))))
    model = EncoderDecoderTransformer(config)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    src_syntax, tgt_syntax = SyntaxInputs(head_targets=src_targets), SyntaxInputs(head_targets=tgt_targets)
    losses = []
    for _ in range(100):
        out = model(src, tgt_in, src_syntax, tgt_syntax)
        translation = F.cross_entropy(out.logits.transpose(1, 2), tgt_out, ignore_index=PAD)
        opt.zero_grad()
        (translation + out.aux_loss).backward()
        opt.step()
        losses.append(float(translation.detach()))
    assert losses[-1] < 0.25 * losses[0]
    model.eval()
    with torch.no_grad():
        out = model(src, tgt_in, src_syntax, tgt_syntax)
    # encoder: attachment per word (the word's final piece must point at its gold piece)
    predicted = out.head_log_probs["encoder.1.parse"].argmax(-1)
    hits = [int(predicted[b, f] == src_targets[b, f]) for b, finals in enumerate(src_final) for f in finals]
    assert np.mean(hits) >= 0.95, np.mean(hits)
    # decoder: causal distribution; attachment over the arcs it can attend (head at or before it)
    dec = out.head_log_probs["decoder.1.parse"].exp()
    assert float(dec.triu(1).max()) == 0.0
    predicted = dec.argmax(-1)
    positions = torch.arange(tgt_targets.shape[1])[None]
    left = (tgt_targets >= 0) & (tgt_targets <= positions)
    assert int((~left & (tgt_targets >= 0)).sum()) > 0  # right-pointing arcs exist and are skipped
    assert float((predicted == tgt_targets)[left].float().mean()) >= 0.95
