"""A damaged run folder, wherever a run is read (translate, evaluate, train --resume): checkpoint
weights of another dtype or shape than the run's config, a weights or state file that is a named
pipe (never waited on), a log or manifest of garbage, the run's copy of its vocabulary gone, its
configs gone or garbage: each one line naming the file, exit 2, nothing left behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal

import pytest
from safetensors.torch import load_file, save_file

from tests.helpers.cli import digest, run_cli, sandbox

CHECKPOINT = "checkpoints/ckpt_000002"  # the last checkpoint of the tiny translation run


def _weights(run, change):
    path = run / CHECKPOINT / "model.safetensors"
    save_file({k: change(k, v) for k, v in load_file(path).items()}, path)


def _float64(run):
    _weights(run, lambda k, v: v.double() if v.is_floating_point() else v)


def _other_shape(run):
    _weights(run, lambda k, v: v[:-1] if k == "embed_source.embedding.weight" else v)


def _fifo(name):
    def damage(run):
        (run / name).unlink()
        os.mkfifo(run / name)
    return damage


def _write(name, data: bytes):
    def damage(run):
        (run / name).write_bytes(data)
    return damage


def _remove(name):
    def damage(run):
        path = run / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return damage


GARBAGE = b"\xff\xfe\x00garbage\x80\n"
TRANSLATE, EVALUATE, RESUME = "translate", "evaluate", "resume"
ALL = (TRANSLATE, EVALUATE, RESUME)

# case: (damage, the file named, what the line says, the commands that read the file)
CASES = {
    "float64 weights": (_float64, f"{CHECKPOINT}/model.safetensors", "is stored as F64", ALL),
    "weights of another shape": (_other_shape, f"{CHECKPOINT}/model.safetensors",
                                 "weight embed_source.embedding.weight has shape", ALL),
    "weights a named pipe": (_fifo(f"{CHECKPOINT}/model.safetensors"), f"{CHECKPOINT}/model.safetensors",
                             "not a regular file", ALL),
    "state a named pipe": (_fifo(f"{CHECKPOINT}/state.pt"), CHECKPOINT, "no last checkpoint found",
                           (RESUME,)),  # (a checkpoint without a regular state.pt is not one)
    "a log of garbage": (_write("log.jsonl", GARBAGE), "log.jsonl", "not valid UTF-8", (RESUME,)),
    "a log of JSON that is no record": (_write("log.jsonl", b'[1, 2]\n{"kind": "train", "step": 1}\n'),
                                        "log.jsonl:1", "not a JSON record", (RESUME,)),
    "a log a named pipe": (_fifo("log.jsonl"), "log.jsonl", "not a regular file", (RESUME,)),
    "a manifest of garbage": (_write("vocab/manifest.json", GARBAGE), "vocab/manifest.json", "JSON", ALL),
    "a manifest of a JSON list": (_write("vocab/manifest.json", b"[1, 2]"), "vocab/manifest.json",
                                  "JSON object", ALL),
    "the vocabulary gone": (_remove("vocab"), "vocab/manifest.json", "is missing (the run's copy of its tokenizers",
                            ALL),
    "the run's config gone": (_remove("config.yaml"), "", "config.yaml", ALL),
    "the run's config of garbage": (_write("config.yaml", GARBAGE), "config.yaml", "", ALL),
    "the checkpoint's config a JSON list": (_write(f"{CHECKPOINT}/config.json", b"[1, 2]"), f"{CHECKPOINT}/config.json",
                                            "expected a JSON object", (TRANSLATE, EVALUATE)),
}


def _argv(command, run, tiny_runs):
    return {TRANSLATE: ["translate", "--run", str(run), "-i", str(tiny_runs / "in.txt"), "--beam", "1"],
            EVALUATE: ["evaluate", "--run", str(run), "--split", "test"],
            RESUME: ["train", "--run-dir", str(run), "--resume", "train.max_steps=3"]}[command]


@contextlib.contextmanager
def _deadline(seconds):
    """Fails the test instead of hanging when a command waits on a named pipe."""
    def stop(*_):
        raise AssertionError(f"the command still ran after {seconds} s (waiting on a named pipe?)")
    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_run_is_refused_in_one_line_naming_the_file(case, tiny_runs):
    damage, name, needle, commands = CASES[case]
    for command in commands:
        with sandbox(tiny_runs) as box:
            run = shutil.copytree(tiny_runs / "mt", box / "run", ignore=shutil.ignore_patterns(".synattn.lock"))
            damage(run)
            before = digest(box)
            with _deadline(120):
                code, err = run_cli(_argv(command, run, tiny_runs))
            last = err.strip().splitlines()[-1]
            assert code == 2, (command, err)
            assert str(run / name if name else run) in last and needle in last, (command, last)
            assert digest(box) == before, f"{command} changed or left files"


def test_the_undamaged_run_and_a_log_with_a_cut_line_resume(tiny_runs):
    """(The refusals above can fail: each command succeeds on the undamaged copy, and resuming
    still skips a last line cut by a killed process.)"""
    with sandbox(tiny_runs) as box:
        run = shutil.copytree(tiny_runs / "mt", box / "run", ignore=shutil.ignore_patterns(".synattn.lock"))
        with open(run / "log.jsonl", "a", encoding="utf-8") as f:
            f.write('{"kind": "train", "st')
        for command in ALL:
            code, err = run_cli(_argv(command, run, tiny_runs))
            assert code == 0, (command, err)
        steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()]
        assert steps[-1] == 3 and steps == sorted(set(steps))  # (the cut line dropped, each update once)
