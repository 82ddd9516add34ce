"""The Tree Transformer a-values travel with each forward pass (docs/methods.md §3): a whole
encoder against a sentence-by-sentence reference, and forwards that interleave (a forward nested
inside another, two forwards before one backward with activation checkpointing) computing what
they compute alone."""

from __future__ import annotations

import pytest
import torch

from synattn.attention import SyntaxMultiheadAttention, bind_syntax
from synattn.methods.constituent import ConstituentAttention, ConstituentState, recorded_links
from synattn.models import MaskedLM, MaskedLMConfig
from tests.helpers.constituent import D, H, reference_output

PAD = 0


def tree_transformer(norm: str = "post", layers: int = 3, seed: int = 0) -> MaskedLM:
    torch.manual_seed(seed)
    config = MaskedLMConfig.from_dict(dict(vocab_size=20, d_model=D, heads=H, ffn_dim=16, dropout=0.0,
                                           norm=norm, encoder=dict(layers=layers, constituent=True)))
    model = MaskedLM(config).double().eval()
    with torch.no_grad():  # sharper links than at initialisation
        for layer in model.encoder.layers:
            layer.self_attn.features[0].bilinear.mul_(4.0)
            layer.self_attn.features[0].key_bias.normal_()
    return model


def tokens_and_lengths(seed: int, lengths: list[int]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, 20, (len(lengths), max(lengths)), generator=gen)
    for b, n in enumerate(lengths):
        tokens[b, n:] = PAD
    return tokens


def reference_encoder(model: MaskedLM, tokens: torch.Tensor, lengths: list[int]):
    """Each sentence alone, layer by layer: the attention from the pair-by-pair reference of
    ``tests/attention/test_constituent.py`` with a^{l−1} handed explicitly from one layer to the next.

    Returns the encoder states (one ``[n, d]`` per sentence) and links (``[layers, n − 1]``).
    """
    x = model.embed(tokens)
    states, links = [], []
    for b, n in enumerate(lengths):
        h, prior, record = x[b, :n], None, []
        for layer in model.encoder.layers:
            attn = layer.self_attn
            inp = layer.self_norm(h) if layer.pre_norm else h
            out, a = reference_output(attn, attn.features[0], inp, n, prior)
            h = h + out if layer.pre_norm else layer.self_norm(h + out)
            h = h + layer.ffn(layer.ffn_norm(h)) if layer.pre_norm else layer.ffn_norm(h + layer.ffn(h))
            prior = a
            record.append(a)
        states.append(model.encoder.final_norm(h))
        links.append(torch.stack(record))
    return states, links


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_outputs_links_and_gradients_equal_the_sentence_by_sentence_reference(norm):
    model = tree_transformer(norm)
    lengths = [6, 4, 1, 2]
    tokens = tokens_and_lengths(0, lengths)
    padding = tokens == PAD
    h, extras = model.encoder(model.embed(tokens), padding)
    links = extras.constituent_links["encoder"]  # [B, L, n − 1]
    states, ref_links = reference_encoder(model, tokens, lengths)
    assert links.shape == (4, 3, 5)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(h[b, :n], states[b])
        torch.testing.assert_close(links[b, :, :n - 1], ref_links[b])
        assert (links[b, :, n - 1:] == 0).all()
    # gradients of one scalar of the outputs and links, through every layer's prior
    weights = torch.randn_like(h)
    params = [p for p in model.parameters()]
    got = torch.autograd.grad((h * weights * ~padding[..., None]).sum() + links.pow(2).sum(), params,
                              allow_unused=True)
    loss = sum((s * weights[b, :n]).sum() + a.pow(2).sum()
               for b, (n, s, a) in enumerate(zip(lengths, states, ref_links)))
    want = torch.autograd.grad(loss, params, allow_unused=True)
    names = [name for name, _ in model.named_parameters()]
    assert any("features" in name for name, g in zip(names, got) if g is not None)
    for name, p, g, w in zip(names, params, got, want):
        zero = torch.zeros_like(p)
        torch.testing.assert_close(zero if g is None else g, zero if w is None else w, msg=name)


def test_a_forward_nested_inside_another_leaves_both_unchanged():
    """A hook that runs the model on another batch in the middle of a forward (a probe, a
    teacher): the outer forward still reads its own a^{l−1}, and the inner one gets its own."""
    model = tree_transformer()
    first, second = tokens_and_lengths(1, [5, 3]), tokens_and_lengths(2, [4, 4, 2])
    alone_first, alone_second = model(first), model(second)
    inner, started = [], []

    def probe(module, args, output):
        if not started:  # once: the nested forward runs this hook too
            started.append(True)
            with torch.no_grad():
                inner.append(model(second))

    handle = model.encoder.layers[1].register_forward_hook(probe)
    try:
        outer = model(first)
    finally:
        handle.remove()
    for got, want in ((outer, alone_first), (inner[0], alone_second)):
        torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)
        torch.testing.assert_close(got.constituent_links["encoder"], want.constituent_links["encoder"],
                                   rtol=0, atol=0)


def test_two_forwards_give_the_gradients_of_separate_ones():
    model = tree_transformer()
    first, second = tokens_and_lengths(3, [5, 5]), tokens_and_lengths(4, [5, 2])

    def grads(losses):
        model.zero_grad()
        sum(losses).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    def loss(tokens):
        out = model(tokens)
        return out.logits.pow(2).mean() + out.constituent_links["encoder"].sum()

    together = grads([loss(first), loss(second)])
    a, b = grads([loss(first)]), grads([loss(second)])
    for got, one, two in zip(together, a, b):
        torch.testing.assert_close(got, one + two)


def test_no_module_keeps_tensors_or_link_records_between_forwards():
    model = tree_transformer()
    model(tokens_and_lengths(5, [4, 3]))
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            values = value.values() if isinstance(value, dict) else [value]
            for v in values:
                assert not isinstance(v, (torch.Tensor, ConstituentState)), f"{name}.{attr}"


def test_torch_style_layers_share_the_carry_of_their_bind_syntax_block():
    torch.manual_seed(6)
    layers = [SyntaxMultiheadAttention(D, H, batch_first=True, features=[ConstituentAttention(D, i)])
              for i in range(3)]
    x = torch.randn(2, 5, D)
    carry, want = {}, x
    for layer in layers:
        want = want + layer.attention(want, carry=carry)[0]
    with bind_syntax(None):
        got = x
        for layer in layers:
            got = got + layer(got, got, got, need_weights=False)[0]
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert recorded_links(carry).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="constituent layer 1 runs before layer 0"):
        layers[1](x, x, x)  # outside a block every call has its own carry


# transformers 5 renames gradient_checkpointing_enable to activation_checkpointing_enable
@pytest.mark.filterwarnings("ignore:.*is deprecated and will be removed in v6")
def test_hf_checkpointed_forwards_before_one_backward_give_the_separate_gradients():
    """Activation checkpointing recomputes each layer in the backward pass; with two forwards
    before one backward, each recomputation must read the a-values of its own forward."""
    pytest.importorskip("transformers")
    import synattn.hf as sh
    from tests.helpers.hf_models import bert

    torch.manual_seed(0)
    model = bert(num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).double().train()
    sh.attach(model, [{"feature": "constituent"}])
    with torch.no_grad():
        for site in model.synattn.sites().values():
            site.features[0].bilinear.mul_(4.0)
            site.features[0].key_bias.normal_()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    gen = torch.Generator().manual_seed(1)
    batches = [dict(input_ids=torch.randint(5, 50, (2, 6), generator=gen),
                    labels=torch.randint(0, 2, (2, 6), generator=gen)) for _ in range(2)]

    def grads(which):
        model.zero_grad()
        sum(model(**batches[i]).loss for i in which).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    together, first, second = grads([0, 1]), grads([0]), grads([1])
    assert any(n.startswith("synattn.") for n in together)
    for n in together:
        torch.testing.assert_close(together[n], first[n] + second[n], msg=n)
    model(**batches[1])
    assert model.synattn.constituent_links().shape == (2, 2, 5)
