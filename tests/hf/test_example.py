"""The example script fine-tunes a tiny random model with a supervised head on a tiny CoNLL-U."""

import importlib.util
import json

import pytest
import torch

import synattn.hf as sh
from tests.helpers.hf_models import CONLLU, bert, wordpiece_tokenizer
from tests.helpers.paths import ROOT

SCRIPT = ROOT / "examples" / "hf_supervised_head.py"



def load_script():
    spec = importlib.util.spec_from_file_location("hf_supervised_head", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_fine_tunes_and_reports_uas(tmp_path, capsys):
    torch.manual_seed(0)
    bert().save_pretrained(tmp_path / "tiny")
    wordpiece_tokenizer().save_pretrained(tmp_path / "tiny")
    data = tmp_path / "toy.conllu"
    data.write_text(CONLLU, encoding="utf-8")
    result = load_script().main([
        "--model", str(tmp_path / "tiny"), "--train", str(data), "--dev", str(data),
        "--layer", "1", "--head", "2", "--epochs", "2", "--batch-size", "2", "--lr", "1e-3",
        "--output", str(tmp_path / "out")])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [row["epoch"] for row in lines] == [1, 2]
    assert 0.0 <= result["uas"] <= 1.0 and result["uas"] == lines[-1]["dev_uas"]
    model, info = sh.from_pretrained(
        __import__("transformers").AutoModel, tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert list(model.synattn.sites()) == ["encoder_1"]


def test_example_runs_offline_on_the_installed_minilm_by_default(tmp_path, capsys):
    from tests.helpers.hf_models import real_minilm

    real_minilm()
    data = tmp_path / "toy.conllu"
    data.write_text(CONLLU, encoding="utf-8")
    result = load_script().main(["--train", str(data), "--dev", str(data), "--layer", "4", "--epochs", "1",
                                 "--batch-size", "3"])
    assert 0.0 <= result["uas"] <= 1.0


def test_example_defaults_to_the_shipped_samples_and_never_reaches_a_hub():
    from synattn.errors import InputError
    from synattn.trees import read_conllu

    script = load_script()
    args = script.parse_args([])
    assert args.model == "all-MiniLM-L6-v2"
    assert len(read_conllu(args.train)) == 200 and len(read_conllu(args.dev)) == 50
    with pytest.raises(InputError, match="bert-base-cased.*nothing is ever downloaded|nothing is downloaded"):
        script.main(["--model", "bert-base-cased", "--epochs", "1"])  # a hub name: refused, not fetched
