"""Two processes racing for one dataset, and Ctrl-C: the dataset lock keeps ``prepare --force`` out
while a ``train`` process reads the dataset, and a ``train`` out while a ``prepare`` process writes
it; Ctrl-C of the command ends it with exit status 130 and one line, however early it comes.

The other process is a real one (``python -m synattn.cli`` or a script), started here and watched
through the files it writes; each test takes a few seconds."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from synattn.data.prepare import PrepareConfig, prepare
from synattn.errors import RunFailure
from tests.helpers.cli import EN, FR, digest, run_cli

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32",
                                reason="the dataset lock and Ctrl-C are POSIX's")

COMMAND = [sys.executable, "-m", "synattn.cli"]


def _environment() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1"}


def _wait_for(condition, process: subprocess.Popen, seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the other process ended first ({process.returncode}): "
                                 f"{process.communicate()[1][-2000:]}")
        assert time.monotonic() < end, "the other process never got there"
        time.sleep(0.05)


@pytest.fixture
def text(tmp_path):
    for split, reps in (("train", 3), ("dev", 1)):
        (tmp_path / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp_path / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    prepare(PrepareConfig(out=str(tmp_path / "data"), prefixes={"train": str(tmp_path / "train"),
                          "dev": str(tmp_path / "dev")}, parse_source=False, vocab_size=50))
    return tmp_path


def _prepare_argv(tmp, vocab):
    return ["prepare", "--train", str(tmp / "train"), "--dev", str(tmp / "dev"), "--no-parse-source",
            "--vocab-size", str(vocab), "-o", str(tmp / "data"), "--force"]


def _config(tmp, **train):
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "task": "mt", "data": str(tmp / "data"),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0, "encoder": {"layers": 1},
                  "decoder": {"layers": 1}},
        "train": {"max_tokens": 150, "max_steps": 2, "warmup_updates": 1, "progress_bar": False,
                  "tensorboard": False, "log_interval": 1, **train},
        "eval": {"beam": 1, "bleu_sentences": 0}}))
    return path


def test_prepare_force_is_refused_while_a_train_process_reads_the_dataset_and_ctrl_c_ends_it_with_130(text):
    config = _config(text, max_steps=10 ** 6, max_epochs=10 ** 6, max_minutes=5)
    train = subprocess.Popen([*COMMAND, "train", "--config", str(config), "--run-dir", str(text / "run")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_environment())
    try:
        log = text / "run" / "log.jsonl"
        _wait_for(lambda: log.is_file() and log.read_text().count("\n") >= 2, train)  # it trains: it reads
        before = digest(text / "data")
        code, err = run_cli(_prepare_argv(text, vocab=45))  # what another shell does meanwhile
        assert code == 1, err
        last = err.strip().splitlines()[-1]
        assert f"this prepared dataset is in use by process {train.pid} on" in last and "(synattn train" in last
        assert digest(text / "data") == before
    finally:
        train.send_signal(signal.SIGINT)  # Ctrl-C
        err = train.communicate(timeout=120)[1]
    assert train.returncode == 130, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1] == "synattn train: interrupted", err
    assert lines[-2].startswith("stopped at update "), err
    assert digest(text / "data") == before


# `synattn prepare --force --vocab-size 45` of the dataset, held once it has the lock and read its inputs
PAUSED_PREPARE = """
import pathlib, sys, time
import synattn.data.prepare as prepare

read = prepare.read_splits

def read_then_wait(cfg):  # the lock is held: the inputs are read, nothing written yet
    data = read(cfg)
    pathlib.Path(sys.argv[1]).write_text("reading done")
    while not pathlib.Path(sys.argv[2]).exists():
        time.sleep(0.02)
    return data

prepare.read_splits = read_then_wait
tmp = pathlib.Path(sys.argv[3])
prepare.prepare(prepare.PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train"),
                "dev": str(tmp / "dev")}, parse_source=False, vocab_size=45), force=True)
"""


def test_a_train_is_refused_while_a_prepare_process_writes_the_dataset(text):
    """``synattn train`` (and the studies' training, :func:`train_experiment`) started while
    ``prepare --force`` rewrites the dataset stop naming it, and read nothing; once it is done the
    dataset is the new one."""
    from synattn.train.experiment import ExperimentConfig
    from synattn.train.experiment_run import train_experiment

    paused, go = text / "paused", text / "go"
    writer = subprocess.Popen([sys.executable, "-c", PAUSED_PREPARE, str(paused), str(go), str(text)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_environment())
    try:
        _wait_for(paused.exists, writer)
        config = _config(text)
        code, err = run_cli(["train", "--config", str(config), "--run-dir", str(text / "run")])
        assert code == 1, err
        assert f"{text / 'data'}: this prepared dataset is in use by process {writer.pid} on" in err
        with pytest.raises(RunFailure, match=f"in use by process {writer.pid} on"):
            train_experiment(ExperimentConfig.from_yaml(config), text / "study-run")
        assert not (text / "run").exists() and not (text / "study-run").exists()
    finally:
        go.write_text("go on")
        err = writer.communicate(timeout=120)[1]
    assert writer.returncode == 0, err
    assert json.loads((text / "data" / "manifest.json").read_text())["config"]["vocab_size"] == 45


STARTING = """
import sys, time
sys.argv = ["synattn", "train"]  # the command's own process, as its script starts it
import synattn.cli  # (the command's handler of Ctrl-C is installed here, before the long imports)
print("importing", flush=True)
time.sleep(60)  # stands for the seconds of importing PyTorch and the subcommands
"""


def test_ctrl_c_while_the_command_starts_ends_it_with_130_and_one_line(tmp_path):
    """Before the command runs (while Python imports PyTorch), Ctrl-C used to end the process by the
    signal itself (exit status -2, with a traceback of the import)."""
    starting = subprocess.Popen([sys.executable, "-c", STARTING], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_environment(), cwd=tmp_path)
    assert starting.stdout.readline() == "importing\n"
    starting.send_signal(signal.SIGINT)
    out, err = starting.communicate(timeout=60)
    assert starting.returncode == 130 and err == "synattn: interrupted\n", (starting.returncode, err)


def test_ctrl_c_of_the_real_command_while_it_imports_ends_it_with_130(tmp_path):
    command = subprocess.Popen([*COMMAND, "train", "--config", "none.yaml"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=_environment(), cwd=tmp_path)
    time.sleep(0.3)  # PyTorch alone takes longer to import
    command.send_signal(signal.SIGINT)
    err = command.communicate(timeout=60)[1]
    assert command.returncode == 130 and "Traceback" not in err, (command.returncode, err)
    assert err.strip().splitlines()[-1] in ("synattn: interrupted", "synattn train: interrupted"), err


def test_the_handler_is_not_installed_in_a_program_that_imports_synattn():
    """A program (or a test) that imports the package keeps Python's own Ctrl-C."""
    import synattn.cli  # noqa: F401

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
