"""The registry of syntax fields (synattn/syntax/fields.py): batches built by iterating it equal
the hand-written batching it replaced, field by field; SyntaxInputs holds registered fields only;
a request's settings are those the fields declare; and a method defined here, with a field of its
own clipped by a setting of its own, trains end to end through collate and a model without any
other file knowing about it."""

from __future__ import annotations

import importlib.util
import pickle
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch import nn

from synattn.attention import AttentionFeature, SyntaxInputs
from synattn.data.batching import collate_examples
from synattn.data.subwords import PAD
from synattn.methods import Method, methods, register, unregister
from synattn.models import MaskedLM, MaskedLMConfig
from synattn.syntax.fields import (
    IGNORE_INDEX,
    SyntaxField,
    TreeBatch,
    register_field,
    syntax_field,
    syntax_fields,
    unregister_field,
)
from synattn.syntax.inputs import require_syntax
from synattn.syntax.request import SyntaxRequest
from synattn.train.tasks import MaskedLMTask, syntax_request_for
from synattn.trees.relations import batch_relation_labels, batch_syntax_hints, distance_vocab, traversal_vocab
from tests.helpers.attention import random_heads
from tests.helpers.syntax_fields import piece_depths

ALL = frozenset({"tree_dist", "traversal", "pos", "deprel", "head_targets", "hints"})


# ------------------------------------------------------------------------------------------------
# the hand-written batching the registry replaced (synattn/data/batching.py::_syntax before), verbatim


def _pad(seqs, length, value, dtype=torch.long):
    out = np.full((len(seqs), length), value, dtype=np.int64)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = s
    return torch.as_tensor(out, dtype=dtype)


def _old_hints(heads, length, offset):
    shifted = np.zeros((len(heads), length), dtype=np.int64)
    lens = np.array([offset + len(h) for h in heads], dtype=np.int64)
    for b, h in enumerate(heads):
        shifted[b, offset: offset + len(h)] = np.where(h > 0, h + offset, 0)
    hints = batch_syntax_hints(shifted, lens)
    hints[np.arange(length)[None, :] >= lens[:, None]] = IGNORE_INDEX
    return torch.as_tensor(hints)


def _old_syntax(examples, side, wanted, length, offset, req, causal):
    heads = [e[f"{side}_heads"].astype(np.int64) for e in examples]
    out = {}
    if wanted & {"tree_dist", "traversal"}:
        shifted = np.zeros((len(heads), length), dtype=np.int64)
        lens = np.zeros(len(heads), dtype=np.int64)
        for b, h in enumerate(heads):
            shifted[b, offset: offset + len(h)] = np.where(h > 0, h + offset, 0)
            lens[b] = offset + len(h)
        dist, trav = batch_relation_labels(shifted, lens, req.max_distance, req.max_traversal)
        if offset:
            dist[:, :offset, :] = dist[:, :, :offset] = len(distance_vocab(req.max_distance)) - 1
            trav[:, :offset, :] = trav[:, :, :offset] = len(traversal_vocab(req.max_traversal)) - 1
        if "tree_dist" in wanted:
            out["tree_dist"] = torch.as_tensor(dist)
        if "traversal" in wanted:
            out["traversal"] = torch.as_tensor(trav)
    for name in ("pos", "deprel"):
        if name in wanted:
            column = f"{side}_upos" if name == "pos" else f"{side}_deprel"
            out[name] = _pad([np.concatenate([np.zeros(offset, np.int64), e[column]]) for e in examples],
                             length, PAD)
    if "head_targets" in wanted:
        targets = []
        for h in heads:
            k = np.arange(len(h))
            t = np.where(h > 0, h - 1, k) + offset
            if causal:
                t = np.where(t - offset > k, IGNORE_INDEX, t)
            targets.append(np.concatenate([np.full(offset, IGNORE_INDEX), t]))
        out["head_targets"] = _pad(targets, length, IGNORE_INDEX)
    if "hints" in wanted:
        out["hints"] = _old_hints(heads, length, offset)
    return out


def _examples(rng, count, target=True, max_len=9):
    examples = []
    for _ in range(count):
        example = {}
        for side in ("src", "tgt") if target else ("src",):
            n = int(rng.integers(1, max_len))
            example.update({f"{side}_ids": rng.integers(5, 30, n).astype(np.int32),
                            f"{side}_heads": random_heads(rng, n).astype(np.int16),
                            f"{side}_upos": rng.integers(1, 12, n).astype(np.int16),
                            f"{side}_deprel": rng.integers(1, 20, n).astype(np.int16)})
        examples.append(example)
    return examples


def _assert_same(syntax, expected):
    assert list(syntax.present()) == [f for f in ALL_ORDER if f in expected]
    for name, value in expected.items():
        got = getattr(syntax, name)
        assert got.dtype == value.dtype and got.shape == value.shape, name
        assert torch.equal(got, value), name


ALL_ORDER = ["tree_dist", "traversal", "pos", "deprel", "head_targets", "hints"]


@pytest.mark.parametrize("seed, max_distance, max_traversal", [(0, 8, 4), (1, 2, 2), (2, 1, 6)])
def test_collate_equals_the_hand_written_batching_field_by_field(seed, max_distance, max_traversal):
    rng = np.random.default_rng(seed)
    for count in (1, 3, 7):
        examples = _examples(rng, count)
        request = SyntaxRequest(src=ALL, tgt=ALL, max_distance=max_distance, max_traversal=max_traversal)
        batch = collate_examples(examples, request)
        n, m = batch.src.shape[1], batch.tgt_in.shape[1]
        _assert_same(batch.src_syntax, _old_syntax(examples, "src", ALL, n, 0, request, causal=False))
        _assert_same(batch.tgt_syntax, _old_syntax(examples, "tgt", ALL, m, 1, request, causal=True))
        some = SyntaxRequest(src=frozenset({"traversal", "head_targets"}), max_traversal=max_traversal)
        batch = collate_examples(examples, some)
        _assert_same(batch.src_syntax, _old_syntax(examples, "src", some.src, n, 0, some, causal=False))
        assert batch.tgt_syntax is None
        # a language model over <s> x: the hints of its input come from the source trees
        mono = [{k: v for k, v in e.items() if k.startswith("src")} for e in examples]
        batch = collate_examples(mono, SyntaxRequest(tgt=frozenset({"hints"})))
        _assert_same(batch.tgt_syntax, _old_syntax(mono, "src", {"hints"}, n, 1, SyntaxRequest(), causal=True))


def test_every_field_is_declared_once_with_its_shape_and_padding():
    assert [f.name for f in syntax_fields()] == ALL_ORDER
    assert {f.name: f.kind for f in syntax_fields()} == {"tree_dist": "pair", "traversal": "pair", "pos": "token",
                                                        "deprel": "token", "head_targets": "token",
                                                        "hints": "token"}
    request = SyntaxRequest(max_distance=3, max_traversal=2)
    assert syntax_field("tree_dist").pad_value(request) == len(distance_vocab(3)) - 1
    assert syntax_field("traversal").pad_value(request) == len(traversal_vocab(2)) - 1
    assert syntax_field("hints").pad_value(request) == IGNORE_INDEX
    assert syntax_field("pos").pad_value(request) == PAD
    with pytest.raises(KeyError, match="no syntax field 'depth'; registered: tree_dist, traversal"):
        syntax_field("depth")
    with pytest.raises(ValueError, match="kind 'triple'"):
        SyntaxField("x", "triple", 0, lambda trees: None)


def test_syntax_inputs_hold_registered_fields_only():
    dist = torch.zeros(2, 3, 3, dtype=torch.int8)
    hints = torch.tensor([[0, 0, 1], [0, 1, 1]])
    syntax = SyntaxInputs(hints=hints, tree_dist=dist, pos=None)
    assert list(syntax.present()) == ["tree_dist", "hints"]  # the registry's order
    assert syntax.pos is None and syntax.batch_size == 2 and syntax.hints is hints
    with pytest.raises(TypeError, match=r"unknown syntax field\(s\) \['depth'\]"):
        SyntaxInputs(depth=hints)
    with pytest.raises(AttributeError):
        syntax.depth
    with pytest.raises(AttributeError):
        syntax.depth = hints
    syntax.pos = hints
    assert list(syntax.present()) == ["tree_dist", "pos", "hints"]
    swapped = syntax.index_select(torch.tensor([1, 0]))
    assert torch.equal(swapped.hints, hints.flip(0)) and swapped.deprel is None
    copy = pickle.loads(pickle.dumps(syntax.to("cpu")))
    assert list(copy.present()) == list(syntax.present()) and torch.equal(copy.tree_dist, dist)
    with pytest.raises(ValueError, match="specialized heads needs syntax field 'deprel'"):
        require_syntax(syntax, "deprel", "specialized heads")


def test_a_builder_of_the_wrong_shape_is_named():
    spec = SyntaxField("wrong", "pair", 0, lambda trees: np.zeros((len(trees.heads), trees.length)))
    with _registered(spec):
        with pytest.raises(ValueError, match=r"syntax field 'wrong' \(pair\) was built with shape \[2, 4\], "
                                             r"expected \[2, 4, 4\]"):
            example = {"src_ids": np.array([5, 6, 7], np.int32), "src_heads": np.array([0, 1, 1], np.int16)}
            collate_examples([example, example], SyntaxRequest(src=frozenset({"wrong"})))
    with pytest.raises(ValueError, match="unknown syntax field"):
        collate_examples(_examples(np.random.default_rng(0), 2), SyntaxRequest(src=frozenset({"wrong"})))


# ------------------------------------------------------------------------------------------------
# a method with a field of its own, defined here and nowhere else


def _clipped_depth(trees: TreeBatch) -> list[np.ndarray]:
    """:func:`piece_depths` clipped at the request's ``max_depth`` (the field's own setting)."""
    return [np.minimum(depth, trees.request.max_depth) for depth in piece_depths(trees)]


DEPTH = SyntaxField("depth", "token", 0, _clipped_depth, setting="max_depth", default=4,
                    doc="each piece's depth in the dependency tree, clipped at max_depth")


class DepthBias(AttentionFeature):
    """Adds a learned ``w[h, min(depth_j, max_depth)]`` to the logits of key j in head h (the
    batch's depths are clipped at the stack's ``max_depth`` already: a batch has one)."""

    def __init__(self, heads: int, max_depth: int = 4):
        super().__init__()
        self.max_depth = max_depth
        self.weight = nn.Parameter(torch.zeros(heads, max_depth + 1))
        self.seen: list[torch.Tensor] = []

    def logit_bias(self, ctx):
        depth = require_syntax(ctx.syntax, "depth", "depth bias")[:, :ctx.key_length]  # [B, m]
        self.seen.append(depth)
        bias = self.weight[:, depth.clamp(max=self.max_depth)]  # [H, B, m]
        return bias.permute(1, 0, 2)[:, :, None, :].to(ctx.q.dtype)  # [B, H, 1, m]


class DepthBiasMethod(Method):
    """On in every encoder while registered (``StackConfig`` is made once, so it adds no setting)."""

    name = "depth_bias"
    sides = ("encoder",)
    order = 15
    fields_read = frozenset({"depth"})

    def options(self):
        return []

    def active(self, stack) -> bool:
        return True

    def layer_features(self, model, stack, site, shared):
        return [DepthBias(site.heads)]


@contextmanager
def _registered(field: SyntaxField, method: type[Method] | None = None):
    register_field(field)
    if method is not None:
        register(method)
    try:
        yield
    finally:
        if method is not None:
            unregister(method.name)
        unregister_field(field.name)


def test_a_method_with_its_own_field_trains_end_to_end():
    rng = np.random.default_rng(4)
    examples = _examples(rng, 6, target=False)
    examples[0].update(src_ids=np.array([7, 8, 9, 10], np.int32), src_heads=np.array([0, 1, 2, 2], np.int16))
    with pytest.raises(TypeError, match="no syntax field declares the setting"):
        SyntaxRequest(max_depth=2)
    with _registered(DEPTH, DepthBiasMethod):
        torch.manual_seed(0)
        config = MaskedLMConfig.from_dict(dict(d_model=16, heads=4, ffn_dim=32, dropout=0.0, vocab_size=30,
                                               encoder=dict(layers=2)))
        model = MaskedLM(config)
        biases = [f for layer in model.encoder.layers for f in layer.self_attn.features if isinstance(f, DepthBias)]
        assert len(biases) == 2
        request = syntax_request_for(config)
        assert request.src == {"depth"} and request.tgt == frozenset()
        assert request.max_depth == 4 and request.setting("max_depth") == 4  # the field's default
        config.encoder.max_depth = 2  # the stack's setting (a method declares it in its settings)
        request = syntax_request_for(config)
        assert request.max_depth == 2 and request.settings == {"max_depth": 2}
        task = MaskedLMTask(mask_id=4, vocab_size=30, prob=0.5, request=request)
        batch = collate_examples(examples, task.syntax_request())
        depth = batch.src_syntax.depth  # [B, n]: word 1 is the root, 2 hangs from 1, 3 and 4 from 2 (clipped at 2)
        n = batch.src.shape[1]
        assert depth.shape == (6, n) and depth[0, :6].tolist() == [1, 2, 2, 2, 0, 0][:min(6, n)]
        unclipped = collate_examples(examples, SyntaxRequest(src=frozenset({"depth"}), max_depth=9)).src_syntax.depth
        assert unclipped[0, :4].tolist() == [1, 2, 3, 3] and torch.equal(unclipped.clamp(max=2), depth)
        if importlib.util.find_spec("transformers") is not None:  # the Hugging Face aligner takes the setting too
            from synattn.hf.align import SyntaxEncoder
            from synattn.trees.dependency import DependencyTree

            tree = DependencyTree("a b c d".split(), np.array([0, 1, 2, 2]), ["x"] * 4, ["X"] * 4, ["_"] * 4)
            word_ids = [None, 0, 1, 2, 3, None]  # [CLS] a b c d [SEP]
            assert SyntaxEncoder(["depth"], max_depth=2).encode(tree, word_ids)["depth"].tolist() == [0, 1, 2, 2, 2, 0]
            assert SyntaxEncoder(["depth"]).encode(tree, word_ids)["depth"].tolist() == [0, 1, 2, 3, 3, 0]
        assert torch.equal(batch.src_syntax.index_select(torch.tensor([0])).depth, depth[:1])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        loss, logs = task.loss(model, batch)
        optimizer.zero_grad()
        (loss / logs["sample_size"]).backward()
        assert torch.isfinite(loss) and all(b.weight.grad.abs().sum() > 0 for b in biases)
        optimizer.step()
        assert all(bool(b.weight.abs().sum() > 0) for b in biases)
        assert all(torch.equal(b.seen[0], depth) for b in biases)  # the feature read the batch's field
    assert "depth_bias" not in [m.name for m in methods()] and "depth" not in [f.name for f in syntax_fields()]
    with pytest.raises(TypeError, match="unknown syntax field"):
        SyntaxInputs(depth=depth)
    assert torch.equal(batch.src_syntax.depth, depth)  # a batch built while it was registered keeps it


def test_a_request_holds_the_settings_its_fields_declare():
    """SyntaxRequest's settings are the mapping the fields declare (name and default), readable as
    attributes as before; a setting is declared with one default, and a default without a
    setting (or the reverse) is refused."""
    import dataclasses

    from synattn.syntax import declared_settings

    assert declared_settings() == {"max_distance": 8, "max_traversal": 4}
    request = SyntaxRequest(src=frozenset({"tree_dist"}), max_distance=3)
    assert (request.max_distance, request.max_traversal) == (3, 4) and request.settings == {"max_distance": 3}
    assert SyntaxRequest(max_distance=8, max_traversal=4) == SyntaxRequest()
    assert hash(SyntaxRequest(settings={"max_distance": 3})) == hash(SyntaxRequest(max_distance=3))
    assert pickle.loads(pickle.dumps(request)) == request  # (batches are collated in worker processes)
    assert dataclasses.replace(request, tgt=frozenset({"hints"})).max_distance == 3
    with pytest.raises(AttributeError, match="no setting 'max_depth'"):
        request.max_depth
    with pytest.raises(ValueError, match="a setting needs its default"):
        SyntaxField("x", "token", 0, lambda trees: None, setting="max_x")
    with pytest.raises(ValueError, match="defaults to 5, but another field declares it with 8"):
        register_field(SyntaxField("x", "token", 0, lambda trees: None, setting="max_distance", default=5))
    with pytest.raises(ValueError, match="must be an identifier other than"):
        register_field(SyntaxField("x", "token", 0, lambda trees: None, setting="src", default=5))
    assert "x" not in [f.name for f in syntax_fields()]
