"""Ctrl-C (SIGINT) and SIGTERM of ``synattn train`` before its first scheduled checkpoint: the run
stops after the update under way with a checkpoint of it, and ``--resume`` continues from there.

The run is a real ``python -m synattn.cli train`` process on a tiny dataset, signalled once its log
shows that it trains; each test takes a few seconds (most of them the process's imports)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.train import read_log, resolve_checkpoint
from synattn.train.signals import StopSignals, TrainingStopped
from tests.helpers.cli import EN, FR

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("signals")
    for split, reps in (("train", 3), ("dev", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    return prepare(PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train"),
                                 "dev": str(tmp / "dev")}, parse_source=False, vocab_size=50))


def _config(tmp: Path, data) -> Path:
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "task": "mt", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0, "encoder": {"layers": 1},
                  "decoder": {"layers": 1}},
        # no checkpoint is scheduled before update 100,000: the interrupted run's is the signal's
        "train": {"max_tokens": 150, "max_steps": 10 ** 6, "max_epochs": 10 ** 6, "warmup_updates": 1,
                  "save_interval": 0, "save_interval_updates": 100_000, "validate_interval": 0,
                  "progress_bar": False, "tensorboard": False, "log_interval": 1},
        "eval": {"beam": 1, "bleu_sentences": 0}}))
    return path


def _environment() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_before_the_first_checkpoint_keeps_one_and_resume_continues(tmp_path, data, capsys, signum, code):
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "synattn.cli", "train", "--config", str(_config(tmp_path, data)),
                                "--run-dir", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=_environment())
    try:
        end = time.monotonic() + 120
        while len(read_log(run, "train")) < 3:  # it trains (a record per update)
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < end, "the run never started training"
            time.sleep(0.05)
        assert resolve_checkpoint(run) is None  # nothing scheduled has been saved
        process.send_signal(signum)
        err = process.communicate(timeout=120)[1]
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, err
    checkpoint = resolve_checkpoint(run)
    assert checkpoint is not None, err
    step = int(checkpoint.name.split("_")[1])
    by = "" if signum == signal.SIGINT else " by SIGTERM"
    assert f"stopped{by} at update {step}; its last checkpoint ({checkpoint.name}) is kept" in err, err
    assert "Traceback" not in err, err
    assert read_log(run, "train")[-1]["step"] == step  # the log ends at the checkpoint's update
    assert not list((run / "checkpoints").glob("*.tmp"))  # written whole, as every checkpoint
    assert main(["train", "--run-dir", str(run), "--resume", f"train.max_steps={step + 2}"]) == 0
    assert f"stopped by max_steps at step {step + 2}" in capsys.readouterr().err
    assert [r["step"] for r in read_log(run, "train")] == list(range(1, step + 3))  # each update once


def test_the_handlers_are_put_back_and_a_second_signal_stops_at_once():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not acted on
        time.sleep(0.01)
        assert signals.received == signal.SIGTERM
        with pytest.raises(TrainingStopped) as stopped:
            os.kill(os.getpid(), signal.SIGTERM)  # the second: at once
            time.sleep(1)
        assert stopped.value.signum == signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        with pytest.raises(KeyboardInterrupt):  # Python's own SIGINT handler, called after the checkpoint
            signals.stop()
    assert {s: signal.getsignal(s) for s in before} == before


def test_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals() as signals:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            assert signals.received is None
    finally:
        signal.signal(signal.SIGINT, before)
