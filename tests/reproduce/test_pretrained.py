"""``synattn reproduce pretrained-syntax`` end to end at toy size: a tiny random pretrained model
(config, weights, WordPiece tokenizer) stands in for all-MiniLM-L6-v2; one test runs the real
weights when their package is installed."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from synattn.cli.main import main  # noqa: E402
from tests.helpers.hf_models import CONLLU, pretrained_folder, real_minilm  # noqa: E402


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ps_treebank")
    paths = {}
    for split, reps in (("train", 6), ("dev", 2), ("test", 1)):
        paths[split] = folder / f"{split}.conllu"
        paths[split].write_text(CONLLU * reps, encoding="utf-8")
    return paths


def _args(out, treebank, model, *more):
    return ["reproduce", "pretrained-syntax", "--toy", "--seeds", "1", "-o", str(out), "--model", str(model),
            "--layer", "1", "--head", "1", "--src-trees", *[f"{s}={p}" for s, p in treebank.items()], *more]


def test_the_study_probes_trains_scores_and_resumes(tmp_path, treebank, capsys):
    model = pretrained_folder(tmp_path / "tiny")
    out = tmp_path / "ps"
    assert main(_args(out, treebank, model)) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and list(results["runs"]) == ["probe", "finetuned", "frozen", "relpos"]
    probe = results["runs"]["probe"]["1"]
    assert probe["train_step"] == 0 and probe["head"].endswith("(best on dev)")
    heads = np.asarray(probe["all_heads_dev"]["encoder"])  # [L, H, 2]
    assert heads.shape == (2, 4, 2) and probe["uas_dev"] == pytest.approx(100 * heads[..., 0].max())
    assert 0 <= probe["clark_dev"] <= 100 and "uas_test" in probe
    assert set(probe["probe_dev"]["relations"]) >= {"det", "nsubj"}
    for arm in ("finetuned", "frozen", "relpos"):
        run = results["runs"][arm]["1"]
        assert run["train_step"] == 6 and run["head"] == "encoder_1.parse"
        assert 0 <= run["uas_dev"] <= 100 and 0 <= run["uas_test_tree"] <= 100
    configs = {p.stem for p in (out / "configs").iterdir()}
    assert configs == {"finetuned", "frozen", "relpos"}  # the probe trains nothing
    frozen = (out / "configs" / "frozen.yaml").read_text()
    assert "freeze: true" in frozen and "mlm: false" in frozen
    relpos = __import__("yaml").safe_load((out / "configs" / "relpos.yaml").read_text())["model"]["features"]
    assert relpos[0] == {"feature": "relations", "relations": ["sequential"], "layers": [0],
                         "max_relative_position": 16}  # below layer 1
    readme = (out / "README.md").read_text()
    assert "Δ UAS dev % vs probe" in readme and "Clark et al. (2019)" in readme and "| det |" in readme
    assert (out / "plots" / "probe_heads_dev.png").stat().st_size > 0
    # rerun: nothing is trained or scored again
    scored = (out / "runs" / "finetuned" / "seed1" / "metrics.json").stat().st_mtime_ns
    assert main(_args(out, treebank, model)) == 0
    assert (out / "runs" / "finetuned" / "seed1" / "metrics.json").stat().st_mtime_ns == scored


def test_the_study_on_the_real_minilm(tmp_path, treebank, capsys):
    real_minilm()
    out = tmp_path / "ps"
    args = _args(out, treebank, "all-MiniLM-L6-v2", "--arms", "finetuned")
    for option in ("--layer", "--head"):  # the study's defaults: the head its sweeps chose
        i = args.index(option)
        del args[i:i + 2]
    assert main(args) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert list(results["runs"]) == ["probe", "finetuned"]
    probe = results["runs"]["probe"]["1"]
    assert np.asarray(probe["all_heads_dev"]["encoder"]).shape == (6, 12, 2)
    assert probe["uas_dev"] > 30  # pretrained heads attach words far above chance on these short sentences
    assert results["runs"]["finetuned"]["1"]["head"] == "encoder_5.parse"
    config = (out / "configs" / "finetuned.yaml").read_text()
    assert "head: 10" in config, config


def test_a_wrong_model_is_one_line_before_anything_is_prepared(tmp_path, treebank, capsys):
    out = tmp_path / "ps"
    assert main(_args(out, treebank, tmp_path / "no-model")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--model" in err[-1] and "nothing is downloaded" in err[-1]
    assert not (out / "data").exists()
