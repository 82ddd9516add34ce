"""The tree-distance bias, a method added through the method registry alone
(synattn/methods/tree_distance_bias.py): ALiBi's slopes, the bias on a tree checked by hand, the
config, the syntax request and its clip, training, cached decoding and Hugging Face models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from synattn.attention import MultiheadAttention, SyntaxInputs
from synattn.data.batching import collate_examples
from synattn.methods.tree_distance_bias import TreeDistanceBias, alibi_slopes
from synattn.models import EncoderDecoderConfig, EncoderDecoderTransformer, MaskedLM, MaskedLMConfig
from synattn.train.experiment import ExperimentConfig, model_config
from synattn.train.tasks import MaskedLMTask, syntax_request_for
from synattn.trees.relations import MAX_DISTANCE, batch_relation_labels
from tests.helpers.attention import random_heads
from tests.helpers.paths import ROOT

TINY = dict(d_model=16, heads=4, ffn_dim=32, dropout=0.0)
VOCAB = 20

# words 1..4: word 1 is the root, word 2 hangs from 1, words 3 and 4 from 2
HEADS = np.array([[0, 1, 2, 2]])
DISTANCE = torch.tensor([[0, 1, 2, 2],   # d(i, j): arcs on the path between words i and j
                         [1, 0, 1, 1],
                         [2, 1, 0, 2],
                         [2, 1, 2, 0]], dtype=torch.float64)


def test_slopes_are_alibis_geometric_sequences():
    assert alibi_slopes(8) == [2.0 ** -k for k in range(1, 9)]
    assert alibi_slopes(4) == [2.0 ** -(2 * k) for k in range(1, 5)]
    # not a power of two: the slopes of 4 heads, then every other slope of 8 heads
    assert alibi_slopes(6) == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    assert alibi_slopes(1) == [2.0 ** -8]


def test_the_bias_is_minus_slope_times_tree_distance_on_a_small_tree():
    dist, _ = batch_relation_labels(HEADS, np.array([4]), max_distance=8)
    assert torch.equal(torch.as_tensor(dist)[0].double(), DISTANCE)
    torch.manual_seed(0)
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    syntax = SyntaxInputs(tree_dist=torch.as_tensor(dist))
    attn = MultiheadAttention(16, 4, features=[TreeDistanceBias(4, scale=0.5)]).double()
    plain = MultiheadAttention(16, 4).double()
    plain.load_state_dict(attn.state_dict(), strict=False)
    out, extras = attn(x, syntax=syntax, need_weights=True)
    # by hand: head h adds -0.5 * 4^-(h+1) * d(i, j) to the logits q_i . k_j / sqrt(d_k)
    q = attn.q_proj(x).view(1, 4, 4, 4).transpose(1, 2)
    k = attn.k_proj(x).view(1, 4, 4, 4).transpose(1, 2)
    slopes = torch.tensor([0.5 * 4.0 ** -(h + 1) for h in range(4)], dtype=torch.float64)
    logits = q @ k.transpose(-1, -2) / 2.0 - slopes[None, :, None, None] * DISTANCE
    torch.testing.assert_close(extras.probs, logits.softmax(-1))
    bias = (-slopes[:, None, None] * DISTANCE).expand(4, 4, 4)  # [B·H, n, m]
    expected, _ = plain(x, attn_mask=bias)
    torch.testing.assert_close(out, expected)


def test_scale_zero_is_plain_attention():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16)
    dist, _ = batch_relation_labels(np.stack([random_heads(np.random.default_rng(i), 5) for i in range(2)]),
                                    np.array([5, 5]))
    attn = MultiheadAttention(16, 4, features=[TreeDistanceBias(4, scale=0.0)])
    plain = MultiheadAttention(16, 4)
    plain.load_state_dict(attn.state_dict(), strict=False)
    torch.testing.assert_close(attn(x, syntax=SyntaxInputs(tree_dist=torch.as_tensor(dist)))[0], plain(x)[0])


def _mt(**stacks) -> EncoderDecoderTransformer:
    return EncoderDecoderTransformer(EncoderDecoderConfig.from_dict(
        dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **stacks)))


def test_config_places_it_and_asks_the_batches_for_tree_distances():
    model = _mt(encoder=dict(layers=3, tree_distance_bias=dict(layers=[1, 2])),
                decoder=dict(layers=2, tree_distance_bias={}))
    kinds = [[type(f) for f in layer.self_attn.features] for layer in model.encoder.layers]
    assert kinds == [[], [TreeDistanceBias], [TreeDistanceBias]]
    assert all(type(layer.self_attn.features[0]) is TreeDistanceBias for layer in model.decoder.layers)
    request = syntax_request_for(model.config)
    assert (request.src, request.tgt) == ({"tree_dist"}, {"tree_dist"})
    config = model.config.to_dict()
    assert config["encoder"]["tree_distance_bias"] == {"layers": [1, 2], "scale": 1.0}
    assert EncoderDecoderConfig.from_dict(config) == model.config


@pytest.mark.parametrize("stack, message", [
    (dict(tree_distance_bias=dict(scale=-1.0)), r"encoder\.tree_distance_bias\.scale=-1\.0 must be >= 0"),
    (dict(layers=2, tree_distance_bias=dict(layers=[2])),
     r"encoder\.tree_distance_bias\.layers has layer 2, out of range for encoder\.layers=2"),
    (dict(tree_distance_bias=dict(slope=1)), r"unknown key 'encoder\.tree_distance_bias\.slope'"),
])
def test_bad_settings_are_config_errors(stack, message):
    with pytest.raises(ValueError, match=message):
        EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, encoder=stack))


def test_masked_lm_with_the_bias_trains():
    torch.manual_seed(2)
    model = MaskedLM(MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB,
                                                   encoder=dict(layers=2, tree_distance_bias={}))))
    rng = np.random.default_rng(3)
    examples = []
    for _ in range(8):
        n = int(rng.integers(3, 9))
        examples.append({"src_ids": rng.integers(5, VOCAB, n).astype(np.int32), "src_heads": random_heads(rng, n)})
    task = MaskedLMTask(mask_id=4, vocab_size=VOCAB, prob=0.3, request=syntax_request_for(model.config))
    batch = collate_examples(examples, task.syntax_request())
    assert batch.src_syntax.tree_dist is not None
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for step in range(15):
        torch.manual_seed(step % 2)  # two fixed maskings
        loss, logs = task.loss(model, batch)
        optimizer.zero_grad()
        (loss / logs["sample_size"]).backward()
        optimizer.step()
        losses.append(float(logs["nll_loss"] / logs["ntokens"]))
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_cached_decoding_equals_full_recomputation():
    torch.manual_seed(5)
    model = _mt(encoder=dict(layers=1), decoder=dict(layers=2, tree_distance_bias={})).eval()
    heads = random_heads(np.random.default_rng(0), 5)
    shifted = np.concatenate([[0], np.where(heads > 0, heads + 1, 0)])  # <s> first, as an extra root
    dist, _ = batch_relation_labels(shifted[None], np.array([6]))
    syntax = SyntaxInputs(tree_dist=torch.as_tensor(dist))
    src = torch.randint(4, VOCAB, (1, 4))
    tgt = torch.randint(4, VOCAB, (1, 6))
    full = model(src, tgt, tgt_syntax=syntax).logits
    state = model.start_decoding(src)
    steps = [model.decode_step(tgt[:, t:t + 1], state, syntax).logits for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_hugging_face_models_get_it_from_the_registry():
    pytest.importorskip("transformers")
    import synattn.hf as sh
    from tests.helpers.hf_models import bert
    assert sh.FEATURES["tree_distance_bias"].defaults == {"scale": 1.0}
    assert sh.FEATURES["tree_distance_bias"].sides == ("encoder", "decoder")
    torch.manual_seed(0)
    plain = bert("model").eval()
    torch.manual_seed(0)
    model = bert("model").eval()
    sh.attach(model, [{"feature": "tree_distance_bias", "side": "encoder", "scale": 0.0}])
    ids = torch.randint(5, 50, (1, 4))
    dist = torch.as_tensor(batch_relation_labels(HEADS, np.array([4]))[0])
    out = model(input_ids=ids, syntax_tree_dist=dist).last_hidden_state
    torch.testing.assert_close(out, plain(input_ids=ids).last_hidden_state)
    torch.manual_seed(0)
    model = bert("model").eval()
    sh.attach(model, [{"feature": "tree_distance_bias", "side": "encoder"}])
    assert not torch.allclose(model(input_ids=ids, syntax_tree_dist=dist).last_hidden_state,
                              plain(input_ids=ids).last_hidden_state)


@pytest.mark.parametrize("stack, clip", [
    (dict(tree_distance_bias={}), MAX_DISTANCE),  # the default, as before the constant was shared
    (dict(tree_distance_bias={}, max_distance=3), 3),  # the stack's clip, without relations
    (dict(tree_distance_bias={}, relations=["tree_distance"], max_distance=5), 5),  # shared with them
])
def test_the_clip_is_the_stacks_max_distance(stack, clip):
    """The bias has no clip of its own: its labels are the stack's tree_dist, clipped at the stack's
    max_distance (docs/methods.md §1), so configs written before keep their labels."""
    model = MaskedLM(MaskedLMConfig.from_dict(dict(TINY, vocab_size=VOCAB, encoder=dict(layers=1, **stack))))
    request = syntax_request_for(model.config)
    assert request.src == {"tree_dist"} and request.max_distance == clip
    n = 12  # a chain: word k + 1 hangs from word k, so d(first word, word j) = j
    batch = collate_examples([{"src_ids": np.full(n, 5, np.int32), "src_heads": np.arange(n)}], request)
    first = batch.src_syntax.tree_dist[0, 0, :n]
    assert first.tolist() == [min(j, clip + 1) for j in range(n)]
    bias = model.encoder.layers[0].self_attn.features[-1]
    assert isinstance(bias, TreeDistanceBias)


def test_the_shipped_config_keeps_the_default_clip():
    exp = ExperimentConfig.from_yaml(ROOT / "configs" / "tree_distance_bias.yaml")
    config = model_config(exp, {"vocab_size": {"src": VOCAB, "tgt": VOCAB}}, {})
    assert MAX_DISTANCE == 8 and syntax_request_for(config).max_distance == MAX_DISTANCE
    assert config.encoder.max_distance == MAX_DISTANCE


def test_the_clip_is_checked_without_the_relations():
    with pytest.raises(ValueError, match=r"encoder\.max_distance=0 must be at least 1"):
        EncoderDecoderConfig.from_dict(dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                                            encoder=dict(tree_distance_bias={}, max_distance=0)))
