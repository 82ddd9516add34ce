"""Weights with NaN (a run that diverged) are refused where a checkpoint is loaded to translate or
evaluate, naming the file and the tensor, instead of 100 empty translations or perplexity inf."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from synattn.cli.main import main
from synattn.errors import InputError
from synattn.evaluate.runner import load_run


@pytest.fixture
def nan_run(tiny_runs, tmp_path):
    run = tmp_path / "mt"
    shutil.copytree(tiny_runs / "mt", run)
    weights = next((run / "checkpoints").glob("ckpt_*/model.safetensors"))
    tensors = load_file(str(weights))
    name = sorted(k for k, v in tensors.items() if v.is_floating_point())[0]
    tensors[name][0] = float("nan")
    save_file(tensors, str(weights))
    return run, weights, name


def test_load_run_names_the_file_and_the_tensor(nan_run):
    run, weights, name = nan_run
    with pytest.raises(InputError, match=rf"^{weights}: tensor {name} holds NaN: the weights are damaged"):
        load_run(run, "last")


@pytest.mark.parametrize("command", [["translate", "-i", "{inputs}/in.txt", "-o", "{tmp}/out.txt"],
                                     ["evaluate", "--split", "test"]])
def test_translate_and_evaluate_exit_2(nan_run, tiny_runs, tmp_path, capsys, command):
    run, weights, name = nan_run
    argv = [a.format(inputs=tiny_runs, tmp=tmp_path) for a in command]
    assert main([argv[0], "--run", str(run), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert f"{weights}: tensor {name} holds NaN" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.txt").exists()


def test_clean_weights_load(tiny_runs):
    model = load_run(tiny_runs / "mt", "last")[0]
    assert all(not torch.isnan(t).any() for t in model.state_dict().values() if t.is_floating_point())
