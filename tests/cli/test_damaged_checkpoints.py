"""Damaged checkpoints, refused with one line naming the file (exit 2) wherever a run is loaded: to
translate, evaluate, induce or resume. Files cut, emptied or of random bytes; weights with NaN (a run
that diverged) named with the tensor, instead of 100 empty translations or perplexity inf; a pickle
that would run code never unpickled; and a fuzzer of every damage on every file of a checkpoint.
A failed command leaves nothing behind in its working folder (tests/helpers/cli.py's sandbox)."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
import yaml
from hypothesis import given, settings, strategies as st
from safetensors.torch import load_file, save_file

from synattn.cli.main import main
from synattn.errors import InputError
from synattn.evaluate.runner import load_run
from tests.helpers.cli import DAMAGE, FUZZ, FUZZ_SCALE, count_case, damage, digest, run_cli, sandbox

CHECKPOINT = "checkpoints/ckpt_000002"  # the last checkpoint of the tiny translation run


def _copy(tiny_runs, box):
    """``box/run``: a copy of the tiny translation run (``tiny_runs/mt``)."""
    shutil.copytree(tiny_runs / "mt", box / "run", ignore=shutil.ignore_patterns(".synattn.lock"))
    return box / "run"


# ------------------------------------------------------------------------------------------------
# files cut, emptied, random; a pickle that would run code


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt", "config.json"])
@pytest.mark.parametrize("how", ["truncate", "zero", "random"])
def test_damaged_checkpoint_files_are_one_line_errors(tiny_runs, name, how):
    """Translating reads the weights and the model config (not state.pt); resuming builds the model
    from the experiment config (not config.json) and reads the weights and state.pt."""
    with sandbox(tiny_runs) as box:
        run = _copy(tiny_runs, box)
        path = run / CHECKPOINT / name
        data = path.read_bytes()
        path.write_bytes({"truncate": data[: len(data) // 2], "zero": b"",
                          "random": bytes((i * 7919 + 13) % 256 for i in range(len(data)))}[how])
        for argv, reads in ((["translate", "--run", str(run), "-i", str(tiny_runs / "in.txt"), "--beam", "1"],
                             name != "state.pt"),
                            (["train", "--run-dir", str(run), "--resume", "train.max_steps=3"],  # the run's own config
                             name != "config.json")):
            before = digest(box)
            code, err = run_cli(argv)
            if reads:
                assert code == 2 and str(path.parent) in err.strip().splitlines()[-1], err
                assert sorted(set(digest(box)) - set(before)) == [], f"the failed command left files: {argv}"
            else:
                assert code == 0, err


def test_a_pickled_state_that_would_run_code_is_not_loaded(tiny_runs):
    with sandbox(tiny_runs) as box:
        run = _copy(tiny_runs, box)
        torch.save({"step": 2, "hook": os.system}, run / CHECKPOINT / "state.pt")
        before = digest(box)
        code, err = run_cli(["train", "--run-dir", str(run), "--resume", "train.max_steps=3"])
        assert code == 2, err
        assert "cannot read this checkpoint (UnpicklingError: not a tensors-only file); delete it" in \
            err.strip().splitlines()[-1], err
        assert sorted(set(digest(box)) - set(before)) == []


def test_a_pickle_named_model_safetensors_is_named(tmp_path):
    import torch

    from synattn.errors import InputError
    from synattn.models import EncoderDecoderTransformer
    from synattn.models.config import EncoderDecoderConfig
    from synattn.models.pretrained import PretrainedModel

    config = EncoderDecoderConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=8, heads=2, ffn_dim=8)
    EncoderDecoderTransformer(config).save_pretrained(tmp_path)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "model.safetensors")
    with pytest.raises(InputError, match=r"model\.safetensors: not a safetensors file \(.*header"):
        PretrainedModel.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------------------------
# weights with NaN

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


def test_resuming_weights_that_are_not_finite_is_a_run_failure(tiny_runs):
    with sandbox(tiny_runs) as box:
        run = _copy(tiny_runs, box)
        path = run / CHECKPOINT / "model.safetensors"
        save_file({k: v.float().fill_(float("nan")).to(v.dtype) for k, v in load_file(path).items()}, path)
        code, err = run_cli(["train", "--run-dir", str(run), "--resume", "train.max_steps=3"])  # the run's own config
        assert code == 1 and "the gradient norm is nan at update 3" in err.strip().splitlines()[-1], err


# ------------------------------------------------------------------------------------------------
# every damage on every file of a checkpoint


@settings(max_examples=FUZZ_SCALE or 8, **FUZZ)
@given(name=st.sampled_from(["model.safetensors", "state.pt", "config.json", "../last", "../../config.yaml"]),
       how=DAMAGE, position=st.floats(0, 1), seed=st.integers(0, 2 ** 16), resume=st.integers(0, 3),
       nan=st.booleans())
def test_fuzz_damaged_checkpoints(tiny_runs, name, how, position, seed, resume, nan):
    with sandbox(tiny_runs) as box:
        run = box / "run"
        shutil.copytree(tiny_runs / "mt", run)
        if nan:  # the weights hold NaN: translate and evaluate refuse them, naming file and tensor
            name, how = "model.safetensors", "nan"
        path = (run / "checkpoints" / "ckpt_000002" / name).resolve()
        path.write_bytes(damage(path.read_bytes(), how, position, seed))
        code, err = run_cli(["translate", "--run", str(run), "-i", str(tiny_runs / "in.txt"), "--beam", "1",
                             "-o", "t.txt"])
        assert not nan or (code == 2 and "holds NaN" in err and not (box / "t.txt").exists()), err
        code, err = run_cli(["evaluate", "--run", str(run), "--split", "test", "--no-translate"])
        assert not nan or (code == 2 and "holds NaN" in err), err
        if resume == 0:  # a quarter of the cases: resuming costs a training step
            config = yaml.safe_load((tiny_runs / "mt" / "config.yaml").read_text())["experiment"]
            config["train"]["max_steps"] = 3
            (box / "exp.yaml").write_text(yaml.safe_dump(config))
            run_cli(["train", "--config", "exp.yaml", "--run-dir", str(run), "--resume"])
    count_case("damaged checkpoints")
