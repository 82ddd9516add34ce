"""Every option of ``synattn reproduce`` is checked before the study touches its folder: a refusal
is one line naming the option as it was typed, with exit status 2, and the folder (new, or holding
only a copied ``data/``) is left as it was, byte for byte."""

from __future__ import annotations

import argparse
import shutil
import time

import pytest

from synattn.cli.main import main
from synattn.cli.options import MAX_MINUTES, MAX_SEEDS, MAX_UPDATES
from synattn.reproduce import STUDIES, Budget, Context
from tests.reproduce.folders import tree_state


def _run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as stop:  # the parser's refusals
        code = stop.code
    return code, capsys.readouterr().err


def _only_data(folder):
    """A folder holding only a (stand-in) prepared dataset in ``data/``, its lock file included."""
    (folder / "data" / "train").mkdir(parents=True, exist_ok=True)
    (folder / "data" / ".synattn-dataset").write_text("a prepared dataset of synattn\n")
    (folder / "data" / ".synattn.lock").write_text("")
    (folder / "data" / "train" / "src.bin").write_bytes(bytes(range(256)))
    return folder


def assert_refused(argv: list[str], needle: str, tmp_path, capsys) -> str:
    """``synattn reproduce …argv -o FOLDER`` refused (2, one line holding ``needle``) for a new
    folder and for one holding only ``data/``, each left as it was."""
    line = ""
    for folder in (tmp_path / "new" / "out", _only_data(tmp_path / "copied")):
        before = tree_state(folder)
        code, err = _run(["reproduce", *argv, "-o", str(folder)], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith("synattn reproduce: error: ") and needle in lines[0], (needle, lines[0])
        assert tree_state(folder) == before, folder
        line = lines[0]
    assert not (tmp_path / "new").exists()
    return line


@pytest.mark.parametrize("argv, needle", [
    (["mt-syntax", "--pairs", "0"], "argument --pairs: must be a positive integer, got 0"),
    (["mt-syntax", "--pairs", "-1"], "argument --pairs:"),
    (["mt-syntax", "--test-sentences", "0"], "argument --test-sentences:"),
    (["mt-syntax", "--test-sentences", "-1"], "argument --test-sentences:"),
    (["structured-attention", "--examples", "0"], "argument --examples:"),
    (["structured-attention", "--examples", "-1"], "argument --examples:"),
    (["structured-attention", "--seeds", str(10**6)], "argument --seeds: must be at most 1,000 (seeds), got 1000000"),
    (["structured-attention", "--budget", "updates", str(10**12)],
     "--budget updates 1000000000000: must be at most 1,000,000,000 (updates)"),
    (["structured-attention", "--budget", "minutes", "1e308"], "--budget minutes 1e308: must be at most"),
    (["structured-attention", "--budget", "minutes", "nan"], "--budget minutes nan:"),
    (["structured-attention", "--minutes", "1e308"], "argument --minutes:"),
    (["structured-attention", "--minutes", "inf"], "argument --minutes:"),
    (["structured-attention", "--threads", str(10**5)], "argument --threads: must be at most 1,024"),
    (["structured-attention", "--jobs", str(10**5)], "argument --jobs: must be at most 256"),
])
def test_a_bad_common_option_is_refused_by_name_before_any_work(argv, needle, tmp_path, capsys):
    assert_refused([*argv, "--toy"], needle, tmp_path, capsys)


def test_the_treebank_options_are_checked_before_any_work(tmp_path, treebank, capsys):
    train, dev = (item.split("=", 1)[1] for item in treebank[1:])
    copy = shutil.copy(train, tmp_path / "copy.conllu")
    for study in ("supervised-head", "tree-transformer"):
        for trees, needle in (([f"train={train}", f"dev={train}"], f"train={train} and dev={train} are the same "
                                                                     "treebank"),
                              ([f"train={train}", f"dev={copy}"], "are the same treebank"),
                              ([f"train={train}", f"train={dev}", f"dev={dev}"], "train= is given twice"),
                              ([f"train={train}", f"dev={tmp_path / 'nope.conllu'}"], "nope.conllu: not a file"),
                              ([f"train={train}"], "--src-trees: missing dev=FILE"),
                              ([f"valid={dev}"], "expected train=FILE, dev=FILE or test=FILE")):
            assert_refused([study, "--toy", "--src-trees", *trees], needle, tmp_path, capsys)
    assert_refused(["tree-transformer", "--toy", *treebank, "--gold", str(tmp_path / "none.mrg")],
                   "--gold: " + str(tmp_path / "none.mrg") + ": not a file", tmp_path, capsys)
    assert_refused(["tree-transformer", "--toy", "--corpus", "ptb", *treebank], "--corpus ptb and --src-trees",
                   tmp_path, capsys)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from tests.helpers.hf_models import pretrained_folder

    return pretrained_folder(tmp_path_factory.mktemp("tiny-bert"))  # 2 layers of 4 heads


@pytest.mark.parametrize("options, needle", [
    (["--layer", "-1"], "argument --layer: must be 0 or more, got -1"),
    (["--head", "-1"], "argument --head: must be 0 or more, got -1"),
    (["--layer", "2"], "--layer 2: the model {model} has 2 layers (--layer 0 to 1)"),
    (["--layer", "99", "--head", "1"], "--layer 99: the model"),
    (["--layer", "1", "--head", "4"], "--head 4: the model {model} has 4 attention heads a layer (--head 0 to 3)"),
    (["--layer", "0", "--head", "1"], "--layer 0: the relpos arm puts relative positions in the layers below"),
    (["--lr", "0"], "argument --lr: must be positive, got 0"),
    (["--lr", "-1"], "argument --lr: must be positive"),
    (["--lr", "inf"], "argument --lr: must be a finite number"),
    (["--lr", "nan"], "argument --lr: must be a finite number"),
])
def test_the_pretrained_studys_head_and_rate_are_checked_against_the_model(options, needle, tiny_model, treebank,
                                                                          tmp_path, capsys):
    assert_refused(["pretrained-syntax", "--toy", "--model", str(tiny_model), *treebank, *options],
                   needle.format(model=tiny_model), tmp_path, capsys)


def test_the_pretrained_studys_checks_let_a_right_head_through(tiny_model, treebank):
    """(The refusals above can fail: the same check accepts the model's last layer and head, and
    layer 0 without the relpos arm.)"""
    study = STUDIES["pretrained-syntax"]
    for layer, head, arms in ((1, 3, None), (0, 0, ["finetuned", "frozen"])):
        args = argparse.Namespace(model=str(tiny_model), layer=layer, head=head, lr=None, toy=True,
                                  src_trees=treebank[1:])
        study.check(args, study.select(arms))


def test_an_arm_whose_config_does_not_read_is_refused_before_any_work(tmp_path, treebank, capsys, monkeypatch):
    """What the study's own checks miss, the arms' configs catch, before anything is prepared."""
    from synattn.reproduce.study import Arm

    study = STUDIES["supervised-head"]
    broken = Arm("supervised", {"encoder": {"supervised_head": {"layer": 99, "head": 0}}}, "out of range")
    monkeypatch.setattr(type(study), "arms", (study.arms[0], broken))
    line = assert_refused(["supervised-head", "--toy", *treebank], "the arm supervised's config:", tmp_path, capsys)
    assert "layer=99 is out of range" in line


def test_the_plan_of_the_largest_study_takes_well_under_a_second(tmp_path):
    """The most seeds of every arm of the largest study, on a folder of no runs yet: the checks of
    the plan (budgets, models of runs there) and its line."""
    from synattn.reproduce.runner import _time_to_go, check_budget, check_models

    study = STUDIES["mt-syntax"]
    arms = list(study.known_arms())
    ctx = Context(out=tmp_path, args=argparse.Namespace(), toy=True)
    started = time.perf_counter()
    for budget in (Budget(updates=MAX_UPDATES), Budget(minutes=MAX_MINUTES)):
        check_budget(ctx, arms, MAX_SEEDS, budget)
        check_models(study, ctx, arms, MAX_SEEDS, budget)
    said = _time_to_go(MAX_SEEDS * len(arms), MAX_MINUTES, 256)
    assert time.perf_counter() - started < 1.0
    assert said.startswith(" (at most ") and len(said) < 100, said
