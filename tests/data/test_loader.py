"""Batches built in DataLoader workers (``train.num_workers``) are the batches of the loop's own
collation: tensor for tensor, in order, the syntax fields included, and a run trained (and resumed)
with workers repeats the run without them exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from synattn.data.batching import PreparedDataset, token_batches
from synattn.syntax.request import SyntaxRequest
from synattn.data.loader import collated
from synattn.data.prepare import PrepareConfig, prepare
from synattn.errors import ConfigError
from synattn.train import TrainConfig
from tests.helpers.treebank import CONLLU
from tests.helpers.training import Crash, CrashingTask, assert_same_run, config, make_trainer

WANTED = frozenset({"tree_dist", "traversal", "pos", "head_targets", "hints"})


def _same_batch(a, b) -> None:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), field.name
        elif field.name.endswith("syntax") and x is not None:
            for name in WANTED:
                u, v = getattr(x, name), getattr(y, name)
                assert (u is None and v is None) or torch.equal(u, v), f"{field.name}.{name}"
        else:
            assert x == y, field.name


def test_workers_give_the_batches_of_the_loop_with_their_syntax(tmp_path):
    (tmp_path / "t.conllu").write_text(CONLLU * 6)
    data = PreparedDataset(prepare(PrepareConfig(out=str(tmp_path / "d"), src_trees={"train": str(tmp_path / "t.conllu")},
                                                 tgt_lang=None, vocab_size=40)), "train")
    batches = token_batches(data.lengths(), 24, seed=1)
    request = SyntaxRequest(src=WANTED - {"hints"}, tgt=frozenset({"hints"}))
    here = list(collated(data, batches, request))
    before = torch.get_rng_state()
    in_workers = list(collated(data, batches, request, num_workers=2))
    assert torch.equal(torch.get_rng_state(), before)  # starting workers draws nothing from torch's generator
    assert len(here) == len(in_workers) == len(batches) > 3
    assert here[0].src_syntax.tree_dist is not None and here[0].tgt_syntax.hints is not None
    for a, b in zip(here, in_workers):
        _same_batch(a, b)


def test_a_run_with_workers_repeats_the_run_without_them_and_resumes_exactly(tmp_path):
    cfg = config(max_epochs=3, save_interval_updates=4)
    plain = make_trainer(tmp_path / "plain", cfg)
    plain.train()
    workers = dataclasses.replace(cfg, num_workers=2)
    cut = make_trainer(tmp_path / "cut", workers, task=CrashingTask(cfg.label_smoothing, 14))
    with pytest.raises(Crash):  # in the middle of epoch 2, its workers running ahead
        cut.train()
    resumed = make_trainer(tmp_path / "cut", workers, model_seed=1)
    resumed.train(resume=True)
    assert_same_run(plain, resumed)


def test_num_workers_is_checked():
    with pytest.raises(ConfigError, match=r"num_workers=-1 must be 0 \(off\) or positive"):
        TrainConfig.from_dict({"num_workers": -1})
    assert TrainConfig().num_workers == 0  # off unless asked for
    np.testing.assert_equal(TrainConfig.from_dict({"num_workers": 2}).num_workers, 2)
