"""Tasks on the synattn models: the losses against direct computations, syntax requests, and short
end-to-end runs on datasets made by ``prepare``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from synattn.attention import SyntaxInputs
from synattn.data.batching import PreparedDataset, collate
from synattn.data.prepare import PrepareConfig, prepare
from synattn.data.subwords import BOS, EOS, PAD
from synattn.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    LanguageModelConfig,
    MaskedLM,
    MaskedLMConfig,
    PretrainedModel,
    TransformerLM,
)
from synattn.train import (
    LanguageModelTask,
    MaskedLMTask,
    Trainer,
    TranslationTask,
    mask_tokens,
    read_log,
    resolve_checkpoint,
    syntax_request_for,
    task_for,
)
from tests.helpers.training import VOCAB, SyntheticPairs, config

TINY = dict(d_model=16, heads=2, ffn_dim=32, dropout=0.0)


def _mt(**stacks) -> EncoderDecoderTransformer:
    data = dict(TINY, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, num_pos_tags=6,
                encoder=dict(layers=2, relations=["tree_distance", "traversal"], max_distance=3,
                             max_traversal=2, specialized_heads=dict(source="pos", heads=[1]),
                             supervised_head=dict(layer=1, head=0)),
                decoder=dict(layers=2, relations=["sequential"], supervised_head=dict(layer=0, head=1, weight=0.5)))
    data.update(stacks)
    return EncoderDecoderTransformer(EncoderDecoderConfig.from_dict(data))


class Monolingual(SyntheticPairs):
    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"src_ids": self.src[i]}


def test_syntax_request_follows_the_model_config():
    request = syntax_request_for(_mt().config)
    assert request.src == {"tree_dist", "traversal", "pos", "head_targets"} and request.tgt == {"head_targets"}
    assert (request.max_distance, request.max_traversal) == (3, 2)
    assert syntax_request_for(_mt(encoder=dict(layers=1), decoder=dict(layers=1)).config).src == set()
    clash = _mt(decoder=dict(layers=1, relations=["tree_distance"], max_distance=5)).config
    with pytest.raises(ValueError, match=r"encoder\.max_distance=3 and decoder\.max_distance=5"):
        syntax_request_for(clash)
    lm = LanguageModelConfig.from_dict(dict(vocab_size=VOCAB, **TINY,
                                            decoder=dict(layers=1, supervised_head=dict(layer=0))))
    with pytest.raises(ValueError, match="head_targets, but batches of monolingual text"):
        syntax_request_for(lm)


def test_translation_loss_is_smoothed_ce_plus_every_auxiliary_loss():
    model = _mt().eval()
    data = SyntheticPairs(6)
    batch = collate(data, np.arange(6))
    g = torch.Generator().manual_seed(0)
    n, m = batch.src.shape[1], batch.tgt_in.shape[1]
    batch.src_syntax = SyntaxInputs(tree_dist=torch.randint(0, 5, (6, n, n), generator=g),
                                    traversal=torch.randint(0, 5, (6, n, n), generator=g),
                                    pos=torch.randint(0, 6, (6, n), generator=g),
                                    head_targets=torch.randint(0, n, (6, n), generator=g))
    batch.tgt_syntax = SyntaxInputs(head_targets=torch.randint(0, m, (6, m), generator=g))
    loss, logs = TranslationTask(0.1, syntax_request_for(model.config)).loss(model, batch)
    out = model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax, tgt_syntax=batch.tgt_syntax)
    tokens = int((batch.tgt_out != PAD).sum())
    ce = F.cross_entropy(out.logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD,
                         label_smoothing=0.1, reduction="sum")
    assert set(out.losses) == {"encoder.1.parse", "decoder.0.parse"}
    expected = ce + tokens * (out.losses["encoder.1.parse"] + out.losses["decoder.0.parse"])
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    assert logs["ntokens"] == logs["sample_size"] == tokens
    torch.testing.assert_close(logs["aux/decoder.0.parse"], tokens * out.losses["decoder.0.parse"].detach())


def test_language_model_loss_equals_scoring_each_prefix_alone():
    torch.manual_seed(0)
    model = TransformerLM(LanguageModelConfig.from_dict(dict(vocab_size=VOCAB, **TINY, decoder=dict(layers=2)))).eval()
    data = Monolingual(5)
    loss, logs = LanguageModelTask().loss(model, collate(data, np.arange(5)))
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(5):
            words = data[i]["src_ids"].tolist()
            for t, gold in enumerate(words + [EOS]):  # P(gold | <s> words[:t]) from the prefix alone
                prefix = torch.tensor([[BOS] + words[:t]])
                nll -= torch.log_softmax(model(prefix).logits[0, -1], -1)[gold].item()
                count += 1
    assert logs["ntokens"] == count
    assert float(logs["nll_loss"]) == pytest.approx(nll, rel=1e-5)
    assert float(loss.detach()) == pytest.approx(nll, rel=1e-5)  # no smoothing by default


def test_masked_lm_loss_is_ce_at_the_masked_positions():
    torch.manual_seed(0)
    model = MaskedLM(MaskedLMConfig.from_dict(dict(vocab_size=VOCAB + 1, mask_id=VOCAB, **TINY,
                                                   encoder=dict(layers=1)))).eval()
    batch = collate(Monolingual(8, max_len=20), np.arange(8))
    task = MaskedLMTask(VOCAB, VOCAB + 1, prob=0.3)
    torch.manual_seed(11)
    loss, logs = task.loss(model, batch)
    torch.manual_seed(11)  # the same draws again
    maskable = ~batch.src_padding & (batch.src != EOS)
    inputs, targets = mask_tokens(batch.src, maskable, VOCAB, VOCAB + 1, prob=0.3)
    chosen = targets != -100
    assert 0 < int(chosen.sum()) == logs["ntokens"] and not (chosen & ~maskable).any()
    expected = F.cross_entropy(model(inputs).logits[chosen], targets[chosen], reduction="sum")
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def test_task_for_picks_the_task_and_checks_special_ids():
    assert isinstance(task_for(_mt()), TranslationTask)
    lm = TransformerLM(LanguageModelConfig.from_dict(dict(vocab_size=VOCAB, **TINY, decoder=dict(layers=1))))
    assert isinstance(task_for(lm), LanguageModelTask)
    mlm = MaskedLM(MaskedLMConfig.from_dict(dict(vocab_size=VOCAB + 1, mask_id=VOCAB, **TINY, encoder=dict(layers=1))))
    assert isinstance(task_for(mlm), MaskedLMTask)
    clash = MaskedLM(MaskedLMConfig.from_dict(dict(vocab_size=VOCAB, mask_id=EOS, **TINY, encoder=dict(layers=1))))
    with pytest.raises(ValueError, match=r"mask_id=3 must be an id of its own"):
        task_for(clash)
    padded = TransformerLM(LanguageModelConfig.from_dict(dict(vocab_size=VOCAB, pad_id=1, **TINY,
                                                              decoder=dict(layers=1))))
    with pytest.raises(ValueError, match="model pad_id=1, but prepared data pads with 0"):
        task_for(padded)


WORDS = "the a dog cat sees runs big small red house tree old new sky".split()


def _write_corpus(folder, name: str, count: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(count)]
    (folder / f"{name}.en").write_text("\n".join(lines) + "\n")
    (folder / f"{name}.fr").write_text("\n".join(" ".join(reversed(s.upper().split())) for s in lines) + "\n")
    return str(folder / name)


def test_translation_end_to_end_on_a_prepared_dataset(tmp_path):
    prefixes = {"train": _write_corpus(tmp_path, "train", 60, 0), "dev": _write_corpus(tmp_path, "dev", 10, 1)}
    folder = prepare(PrepareConfig(out=str(tmp_path / "data"), prefixes=prefixes, parse_source=False, vocab_size=40))
    train, dev = PreparedDataset(folder, "train"), PreparedDataset(folder, "dev")
    sizes = train.manifest["vocab_size"]
    model = EncoderDecoderTransformer(EncoderDecoderConfig.from_dict(dict(
        src_vocab_size=sizes["src"], tgt_vocab_size=sizes["tgt"], **TINY, encoder=dict(layers=1),
        decoder=dict(layers=1))))
    trainer = Trainer(model, task_for(model), config(max_epochs=2, max_tokens=200, lr=0.003), train, tmp_path / "run",
                      valid_data=dev, run_config={"model": model.config.to_dict()})
    result = trainer.train()
    loaded = PretrainedModel.from_pretrained(resolve_checkpoint(tmp_path / "run")).eval()
    batch = collate(dev, np.arange(4))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch.src, batch.tgt_in).logits, model(batch.src, batch.tgt_in).logits)
    assert result.step > 1 and result.best_valid_loss is not None


CONLLU = ("1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tunbelievable\tx\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
          "3\thappened\tx\tVERB\tVBD\t_\t0\troot\t_\t_\n4\tyesterday\tx\tNOUN\tNN\t_\t3\tobl\t_\t_\n\n"
          "1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")


def test_tree_aware_masked_lm_end_to_end_on_a_prepared_treebank(tmp_path):
    (tmp_path / "t.conllu").write_text(CONLLU * 6)
    folder = prepare(PrepareConfig(out=str(tmp_path / "data"), src_trees={"train": str(tmp_path / "t.conllu")},
                                   tgt_lang=None, vocab_size=30))
    train = PreparedDataset(folder, "train")
    size, tags = train.manifest["vocab_size"]["src"], train.manifest["labels"]["src_upos"]
    model = MaskedLM(MaskedLMConfig.from_dict(dict(
        vocab_size=size + 1, mask_id=size, num_pos_tags=tags, **TINY,
        encoder=dict(layers=2, relations=["tree_distance"], max_distance=3,
                     specialized_heads=dict(source="pos", heads=[1]), supervised_head=dict(layer=1)))))
    trainer = Trainer(model, task_for(model), config(max_steps=3, max_tokens=64), train, tmp_path / "run")
    result = trainer.train()
    records = read_log(tmp_path / "run", "train")
    assert result.step == 3 and all(r["aux/encoder.1.parse"] > 0 for r in records)  # the parse loss is trained
