"""TrainConfig validation and YAML, the inverse-sqrt schedule, label smoothing, BERT masking."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from synattn.errors import InputError
from synattn.syntax.inputs import IGNORE_INDEX
from synattn.train import TrainConfig, build_optimizer, inverse_sqrt_factor, label_smoothed_nll, mask_tokens
from synattn.train.tasks import FIRST_REGULAR_ID


@pytest.mark.parametrize("change, message", [
    (dict(max_tokenz=10), r"unknown key 'max_tokenz'"),
    (dict(lr="5e-4"), r"lr: expected float, got str"),
    (dict(bf16=1), r"bf16: expected bool, got int"),
    (dict(update_freq=1.5), r"update_freq: expected int, got float"),
    (dict(betas=0.9), r"betas: expected a list"),
    (dict(update_freq=0), r"update_freq=0 must be at least 1"),
    (dict(max_epochs=None), r"set at least one of max_epochs, max_steps, max_minutes"),
    (dict(betas=[0.9]), r"betas=\[0.9\] must be two numbers"),
    (dict(label_smoothing=1.0), r"label_smoothing=1.0 must be in \[0, 1\)"),
    (dict(device="tpu"), r"device='tpu'"),
    (dict(save_interval_updates=-1), r"save_interval_updates=-1 must be 0 \(off\) or positive"),
    (dict(snapshot_interval_updates=-2), r"snapshot_interval_updates=-2 must be 0 \(off\) or positive"),
])
def test_config_rejects_bad_values_naming_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(change)


def test_config_yaml_round_trip_and_file_errors(tmp_path):
    config = TrainConfig.from_dict(dict(max_tokens=123, lr=0.001, betas=[0.8, 0.9], max_steps=7, keep_last_n=None))
    config.to_yaml(tmp_path / "t.yaml")
    assert TrainConfig.from_yaml(tmp_path / "t.yaml") == config
    (tmp_path / "bad.yaml").write_text("max_tokens: 10\nclip: 1.0\n")
    with pytest.raises(InputError, match=r"bad\.yaml: unknown key 'clip'"):
        TrainConfig.from_yaml(tmp_path / "bad.yaml")


def _vaswani_rate(step: int, warmup: int, d_model: int = 512) -> float:
    """Vaswani et al. 2017, eq. (3): d^-0.5 · min(step^-0.5, step · warmup^-1.5)."""
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("warmup", [1, 4, 10])
def test_inverse_sqrt_schedule_follows_vaswani_scaled_to_the_peak(warmup):
    config = TrainConfig.from_dict(dict(lr=0.2, warmup_updates=warmup, max_steps=30))
    model = torch.nn.Linear(2, 1)
    optimizer, scheduler = build_optimizer(model, config)
    peak = _vaswani_rate(warmup, warmup)
    for step in range(1, 31):  # the rate used by update `step`
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.2 * _vaswani_rate(step, warmup) / peak, rel=1e-9)
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        scheduler.step()
    assert inverse_sqrt_factor(5, 0) == 1.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 7), st.integers(2, 9), st.floats(0.0, 0.5), st.integers(0, 10_000))
def test_label_smoothed_nll_matches_torch_cross_entropy(batch, length, vocab, epsilon, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=g) * 3
    target = torch.randint(0, vocab, (batch, length), generator=g)
    target[torch.rand(batch, length, generator=g) < 0.3] = IGNORE_INDEX
    loss, nll = label_smoothed_nll(logits, target, epsilon)
    flat_logits, flat_target = logits.reshape(-1, vocab), target.reshape(-1)
    expected = F.cross_entropy(flat_logits, flat_target, label_smoothing=epsilon, reduction="sum")
    expected_nll = F.cross_entropy(flat_logits, flat_target, reduction="sum")
    if (target == IGNORE_INDEX).all():  # torch gives NaN for an empty sum's mean parts only; ours is 0
        assert loss == 0 and nll == 0
        return
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll, expected_nll, rtol=1e-5, atol=1e-5)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5), st.integers(1, 12), st.integers(6, 30), st.integers(0, 10_000), st.booleans())
def test_mask_tokens_only_touches_chosen_maskable_positions(batch, length, vocab, seed, mask_inside):
    g = torch.Generator().manual_seed(seed)
    mask_id = vocab - 1 if mask_inside else vocab  # a mask id inside or just past the sampled range
    vocab_size = vocab if mask_inside else vocab + 1
    tokens = torch.randint(0, vocab_size, (batch, length), generator=g)
    maskable = torch.rand(batch, length, generator=g) < 0.7
    inputs, targets = mask_tokens(tokens, maskable, mask_id, vocab_size, prob=0.5,
                                  generator=torch.Generator().manual_seed(seed))
    again = mask_tokens(tokens, maskable, mask_id, vocab_size, prob=0.5, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(inputs, again[0]) and torch.equal(targets, again[1])
    chosen = targets != IGNORE_INDEX
    assert not (chosen & ~maskable).any()
    assert torch.equal(targets[chosen], tokens[chosen])
    assert torch.equal(inputs[~chosen], tokens[~chosen])
    changed = chosen & (inputs != tokens) & (inputs != mask_id)  # random replacements
    assert ((inputs[changed] >= FIRST_REGULAR_ID) & (inputs[changed] < vocab_size)).all()


def test_mask_tokens_proportions_are_15_percent_then_80_10_10():
    n = 400_000
    tokens = torch.randint(FIRST_REGULAR_ID, 50, (1, n))
    inputs, targets = mask_tokens(tokens, torch.ones(1, n, dtype=torch.bool), mask_id=50, vocab_size=51,
                                  generator=torch.Generator().manual_seed(0))
    chosen = targets != IGNORE_INDEX
    k = int(chosen.sum())
    assert abs(k / n - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n)
    masked = int((inputs[chosen] == 50).sum())
    kept = int((inputs[chosen] == tokens[chosen]).sum())
    random_replaced = k - masked - kept
    # a random replacement equals the original with probability 1/45: expected kept share 0.1 + 0.1/45
    for count, p in ((masked, 0.8), (kept, 0.1 + 0.1 / 45), (random_replaced, 0.1 - 0.1 / 45)):
        assert abs(count / k - p) < 4 * math.sqrt(p * (1 - p) / k)
    assert not (inputs == 50)[~chosen].any()
