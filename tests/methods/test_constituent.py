"""Tree Transformer constituent attention (docs/methods.md §3) against a pair-by-pair reference; the
links of a masked LM with it, and its training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from synattn.attention import MultiheadAttention
from synattn.attention.cache import KVCache
from synattn.data.subwords import PAD
from synattn.methods.constituent import ConstituentAttention, constituent_prior, recorded_links
from synattn.models import (
    MaskedLM,
    MaskedLMConfig,
)
from tests.helpers.constituent import D, H, reference_links, reference_output, reference_prior
from tests.helpers.models import TINY, VOCAB


def make_layer(layer: int = 0, seed: int = 0):
    torch.manual_seed(seed)
    feature = ConstituentAttention(D, layer=layer)
    with torch.no_grad():
        feature.bilinear.mul_(4.0)
        feature.key_bias.normal_()
    return MultiheadAttention(D, H, features=[feature]).double().eval(), feature


def test_layer_equals_reference_with_padding():
    attn0, f0 = make_layer(0, seed=0)
    attn1, f1 = make_layer(1, seed=1)
    lengths = [5, 3, 1, 2]
    x = torch.randn(4, 5, D, dtype=torch.float64)
    pad = torch.arange(5)[None, :] >= torch.tensor(lengths)[:, None]
    carry = {}  # one forward: layer 0 hands a^0 to layer 1
    out0, _ = attn0(x, key_padding_mask=pad, carry=carry)
    out1, _ = attn1(out0, key_padding_mask=pad, carry=carry)
    a = recorded_links(carry)  # [B, 2, 4]
    assert a.shape == (4, 2, 4)
    for b, n in enumerate(lengths):
        ref0, a0 = reference_output(attn0, f0, x[b], n)
        ref1, a1 = reference_output(attn1, f1, out0[b], n, prior=a0)
        torch.testing.assert_close(out0[b, :n], ref0)
        torch.testing.assert_close(out1[b, :n], ref1)
        torch.testing.assert_close(a[b, 0, :n - 1], a0)
        torch.testing.assert_close(a[b, 1, :n - 1], a1)
        assert (a[b, :, n - 1:] == 0).all()  # edges touching padding are no links


def test_padding_does_not_change_the_sentence():
    attn, _ = make_layer()
    x = torch.randn(1, 4, D, dtype=torch.float64)
    alone, _ = attn(x)
    padded = torch.cat([x, torch.randn(1, 3, D, dtype=torch.float64)], dim=1)
    pad = torch.tensor([[False] * 4 + [True] * 3])
    out, extras = attn(padded, key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(out[:, :4], alone)
    assert (extras.probs[..., 4:] == 0).all() and (extras.probs[:, :, 4:] == 0).all()


def test_probs_are_prior_times_softmax_shared_across_heads():
    attn, feature = make_layer()
    x = torch.randn(2, 6, D, dtype=torch.float64)
    plain = MultiheadAttention(D, H).double().eval()
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if not k.startswith("features")})
    _, extras = attn(x, need_weights=True)
    _, base = plain(x, need_weights=True)
    ratio = extras.probs / base.probs  # [B, H, n, n] = C, the same in every head
    torch.testing.assert_close(ratio[:, 0], ratio[:, 1])
    for b in range(2):
        a = reference_links(feature, x[b], 6)
        torch.testing.assert_close(ratio[b, 0], reference_prior(a, 6))
    assert (extras.probs.sum(-1) < 1 + 1e-12).all()  # not renormalised


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=4), st.integers(0, 2 ** 31 - 1))
def test_prior_properties(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    a = torch.rand(len(lengths), max(n - 1, 0), generator=gen, dtype=torch.float64) ** 3
    a[a.abs() < 1e-12] = 1e-12
    valid = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    c = constituent_prior(a, valid)
    assert ((c >= 0) & (c <= 1)).all()
    torch.testing.assert_close(c, c.transpose(1, 2))
    for b, length in enumerate(lengths):
        cb = c[b]
        torch.testing.assert_close(cb[:length, :length], reference_prior(a[b], length))
        assert (cb.diagonal()[:length] == 1).all()
        assert (cb[length:] == 0).all() and (cb[:, length:] == 0).all()
        # a span that grows (to the right or to the left) never gets a larger prior
        for i in range(length):
            for j in range(i, length - 1):
                assert cb[i, j + 1] <= cb[i, j] + 1e-15
            for j in range(1, i + 1):
                assert cb[j - 1, i] <= cb[j, i] + 1e-15


def test_links_are_non_decreasing_across_layers_and_prior_stays_in_range():
    torch.manual_seed(3)
    layers = [MultiheadAttention(D, H, features=[ConstituentAttention(D, layer=i)]) for i in range(4)]
    x = torch.randn(3, 7, D)
    pad = torch.tensor([[False] * 7, [False] * 5 + [True] * 2, [False] * 2 + [True] * 5])
    carry = {}
    for attn in layers:
        out, extras = attn(x, key_padding_mask=pad, need_weights=True, carry=carry)
        x = x + out
        assert torch.isfinite(extras.probs).all()
    a = recorded_links(carry)  # [B, 4, 6]
    assert ((a >= 0) & (a <= 1)).all()
    assert (a[:, 1:] >= a[:, :-1]).all()
    assert (a[0] > 0).all()


def test_gradients_reach_links_of_every_layer():
    torch.manual_seed(4)
    features = [ConstituentAttention(D, layer=i) for i in range(2)]
    layers = [MultiheadAttention(D, H, features=[f]) for f in features]
    x = torch.randn(2, 5, D)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    carry = {}
    for attn in layers:
        x = x + attn(x, key_padding_mask=pad, carry=carry)[0]
    x.sum().backward()
    for f in features:
        grad = f.bilinear.grad
        assert grad is not None and grad.abs().sum() > 0 and torch.isfinite(grad).all()


def test_single_word_and_rejections():
    attn, _ = make_layer(0)
    out, extras = attn(torch.randn(2, 1, D, dtype=torch.float64), need_weights=True)
    assert torch.isfinite(out).all() and extras.probs.shape == (2, H, 1, 1)
    x = torch.randn(1, 4, D, dtype=torch.float64)
    with pytest.raises(ValueError, match="causal"):
        attn(x, causal=True)
    with pytest.raises(ValueError, match="self-attention"):
        attn(x, context=torch.randn(1, 3, D, dtype=torch.float64))
    with pytest.raises(ValueError, match="cache"):
        attn(x, cache=KVCache())
    later, _ = make_layer(2)
    with pytest.raises(ValueError, match="constituent layer 2 runs before layer 1"):
        later(x)  # a call on its own has a fresh carry: nothing below it ran
    with pytest.raises(ValueError, match="constituent layer 2 runs before layer 1"):
        later(x, carry={})


def test_original_code_diagonal_of_the_prior_by_hand():
    """The public Tree Transformer code puts 1e-9 on C's diagonal; the rest of C is unchanged."""
    a = torch.tensor([[0.5, 0.2, 0.0]], dtype=torch.float64)
    valid = torch.tensor([[True, True, True, False]])
    paper = constituent_prior(a, valid)
    original = constituent_prior(a, valid, diagonal=1e-9)
    expected = [[1e-9, 0.5, 0.1, 0.0], [0.5, 1e-9, 0.2, 0.0], [0.1, 0.2, 1e-9, 0.0], [0.0, 0.0, 0.0, 0.0]]
    for row, want in zip(original[0].tolist(), expected):
        assert row == pytest.approx(want, abs=1e-15)
    off = ~torch.eye(4, dtype=torch.bool)
    assert torch.equal(original[0][off], paper[0][off]) and paper[0, 0, 0] == 1.0 and paper[0, 3, 3] == 0.0


def test_original_diagonal_reaches_the_layer_from_the_model_config():
    from synattn.models import MaskedLM, MaskedLMConfig, StackConfig
    config = MaskedLMConfig(vocab_size=20, d_model=16, heads=2, ffn_dim=32,
                            encoder=StackConfig(layers=2, constituent=True, constituent_diagonal=1e-9))
    model = MaskedLM(config)
    features = [f for module in model.modules() if isinstance(f := module, ConstituentAttention)]
    assert len(features) == 2 and all(f.diagonal == 1e-9 for f in features)
    with pytest.raises(ValueError, match=r"encoder\.constituent_diagonal=0\.5, but encoder\.constituent is off"):
        MaskedLMConfig(vocab_size=20, d_model=16, heads=2, ffn_dim=32,
                       encoder=StackConfig(layers=2, constituent_diagonal=0.5))


def public_code_group_attention(scores, valid, prior):
    """The matrix form of ``GroupAttention.forward`` in Wang, Lee & Chen's public code (2019,
    attention.py), transcribed for scores ``[n, n]`` already divided by d / 2.

    Returns the links matrix (its superdiagonal is a^l) and C.
    """
    n = scores.shape[0]
    up = torch.diag(torch.ones(n - 1, dtype=torch.int64), 1)
    eye = torch.eye(n, dtype=torch.int64)
    down = torch.diag(torch.ones(n - 1, dtype=torch.int64), -1)
    tri = torch.ones(n, n, dtype=scores.dtype).triu()
    mask = valid[None, :].long() & (up + down)  # eos_mask & (a + c)
    neighbour = torch.softmax(scores.masked_fill(mask == 0, -1e9), dim=-1)
    neighbour = torch.sqrt(neighbour * neighbour.T + 1e-9)
    neighbour = prior + (1.0 - prior) * neighbour
    t = torch.log(neighbour + 1e-9).masked_fill(up == 0, 0).matmul(tri)
    g = tri.matmul(t).exp().masked_fill((tri.long() - eye) == 0, 0)
    return neighbour, g + g.T + neighbour.masked_fill(eye == 0, 1e-9)


def test_links_and_prior_equal_the_public_code_matrix_form():
    """Two layers over a padded batch: a^l is the superdiagonal of the public code's links matrix
    and C its g_attn between real positions (off the diagonal; the public code's diagonal is the
    links matrix's own, ≈ 0 like ``diagonal=1e-9``)."""
    torch.manual_seed(5)
    features = [ConstituentAttention(D, layer=i).double() for i in range(2)]
    for f in features:
        with torch.no_grad():
            f.bilinear.mul_(4.0)
            f.key_bias.normal_()
    lengths = [6, 4, 2]
    x = torch.randn(3, 6, D, dtype=torch.float64)
    valid = torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]
    prior = None
    for f in features:
        a = f.links(x, valid, prior)  # [B, 5]
        c = constituent_prior(a, valid)
        for b, n in enumerate(lengths):
            pair = x[b] @ f.bilinear @ x[b].T + (x[b] @ f.key_bias)[None, :]  # q_i · k_j
            theirs_prior = (torch.zeros(6, 6, dtype=torch.float64) if prior is None
                            else torch.diag(prior[b], 1) + torch.diag(prior[b], -1))
            links, g = public_code_group_attention(pair / (D / 2), valid[b], theirs_prior)
            # ours is clipped to 1 where theirs is sqrt(1 + 1e-9) (a word with one neighbour each side)
            torch.testing.assert_close(a[b, :n - 1], links.diagonal(1)[:n - 1], rtol=0, atol=1e-9)
            off = ~torch.eye(n, dtype=torch.bool)
            torch.testing.assert_close(c[b, :n, :n][off], g[:n, :n][off], rtol=1e-7, atol=2e-9)
            assert (g[:n, :n].diagonal() < 1e-3).all()
        prior = a


# ------------------------------------------------------------------------------------------------
# Tree Transformer in the masked LM


def test_masked_lm_exposes_hierarchical_links_that_ignore_padding():
    torch.manual_seed(1)
    config = MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB, encoder=dict(layers=3, constituent=True)))
    mlm = MaskedLM(config).eval()
    tokens = torch.randint(5, VOCAB, (2, 7))
    tokens[1, 4:] = PAD
    links = mlm(tokens).constituent_links["encoder"]  # [B, L, n − 1]
    assert links.shape == (2, 3, 6)
    assert ((links >= 0) & (links <= 1)).all()
    assert (links[:, 1:] >= links[:, :-1] - 1e-6).all()  # a^l ≥ a^{l−1}: the hierarchy
    assert (links[1, :, 3:] == 0).all()  # edges touching padding are no links
    alone = mlm(tokens[1:, :4]).constituent_links["encoder"]
    torch.testing.assert_close(alone[0], links[1, :, :3])
    assert not hasattr(mlm.encoder, "constituent_state")  # nothing kept between forwards


def test_masked_lm_with_constituent_attention_learns():
    torch.manual_seed(2)
    mlm = MaskedLM(MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB, encoder=dict(layers=2, constituent=True))))
    tokens = torch.arange(5, 13).repeat(4, 1)  # a fixed sentence: learnable from the context
    masked = tokens.clone()
    masked[:, 3] = 4
    optimizer = torch.optim.Adam(mlm.parameters(), lr=0.02)
    losses = []
    for _ in range(25):
        loss = F.cross_entropy(mlm(masked).logits[:, 3], tokens[:, 3])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
