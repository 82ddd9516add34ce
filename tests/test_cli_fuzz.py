"""Fuzzing ``synattn train`` in-process with bad configs and arguments: every outcome is an exit
status of 0, 1 or 2, and a failure is exactly one line on standard error, never a traceback.

The run directory already has an (empty) checkpoint, so a config that passes every check stops at
the "already has checkpoints" error, or with ``--resume`` at loading the checkpoint, instead of
training: the fuzzing exercises every check that runs before training, which is where every config
mistake must be caught.
"""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.experiment import EvalConfig
from synattn.models.config import (EncoderDecoderConfig, SpecializedHeadsConfig, StackConfig,
                                   SupervisedHeadConfig, SyntacticAttentionConfig)
from synattn.train import TrainConfig
from tests.helpers.cli import FUZZ_SCALE, count_case

EN = ["the cat sat on the mat", "dogs bark at night", "a bird sings in the old tree"]
FR = ["le chat était assis", "les chiens aboient la nuit", "un oiseau chante dans le vieil arbre"]


def _keys(cls, prefix: str) -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        out.append(prefix + f.name)
        hint = typing.get_type_hints(cls)[f.name]
        for arg in (hint, *typing.get_args(hint)):
            if dataclasses.is_dataclass(arg):
                out += _keys(arg, f"{prefix}{f.name}.")
    return out


KEYS = (["task", "data", "model", "train", "eval", "extra"] + _keys(EncoderDecoderConfig, "model.")
        + _keys(TrainConfig, "train.") + _keys(EvalConfig, "eval.")
        + [f"model.encoder.{k}" for k in ("bogus", "supervised_head.bogus")] + ["model.decoder.layers.x"])
assert "model.encoder.supervised_head.layer" in KEYS and "model.encoder.syntactic_attention.tree" in KEYS
assert {StackConfig, SupervisedHeadConfig, SpecializedHeadsConfig, SyntacticAttentionConfig}

def alias_bomb(levels: int = 10, width: int = 9) -> str:
    """A flow-style YAML value of ``width ** levels`` integers in a few hundred characters."""
    text = "&l0 [" + ", ".join(["1"] * width) + "]"
    for i in range(1, levels):
        text = f"&l{i} [{text}" + f", *l{i - 1}" * (width - 1) + "]"
    return text


HUGE = ["100000", "1000000000", "1000000000000", "1e12", str(2 ** 63), str(10 ** 40)]
"""Sizes far beyond memory: refused naming the option, never an allocator's traceback or a hang."""

VALUES = st.one_of(
    st.integers(-3, 12).map(str), st.sampled_from(["0", "-1", "1e9", "2.5", ".nan", ".inf", "-.inf", "1e-3"]),
    st.sampled_from(HUGE), st.just(alias_bomb()),
    st.sampled_from(["true", "false", "null", "~", "[]", "{}", "[1, 2]", "[tree_distance]", "[sequential, bogus]",
                     "{layer: 1}", "{layer: 9, head: 0}", "{source: pos}", "{tree: other}", "pre", "gelu", "sg",
                     "sf", "segmentation", "mt", "lm", "mlm", "auto", "cuda", "wide", "'4'", "[", "{a: ", ": :",
                     "'unterminated", "\t", "- a\n- b", "!!python/object:os.system ls"]),
    st.text(max_size=6))

OVERRIDE = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUES),
    st.sampled_from(["model", "=1", "model..heads=2", ".x=1", "model.=3", "train.lr", "a.b.c.d=1"]),
    st.text(max_size=12))

FILES = st.one_of(
    st.sampled_from(["", "- a\n- b\n", "42\n", "task: [\n", "\xff", "task: mt\n", "data: x\n", "{}\n",
                     "task: mt\ndata: 5\n", "task: mt\ndata: DATA\nmodel: 3\n", "task: mt\ndata: DATA\ntrain: []\n",
                     # a key given twice; an alias bomb in a value and in a section; sizes beyond memory
                     "task: mt\ntask: lm\ndata: DATA\n", "task: mt\ndata: DATA\nmodel: {heads: 2, heads: 4}\n",
                     f"task: mt\ndata: DATA\nmodel: {{d_model: {alias_bomb()}}}\n",
                     f"task: mt\ndata: DATA\ntrain: {alias_bomb()}\n",
                     "task: mt\ndata: DATA\nmodel: {d_model: 1000000000, heads: 1}\n",
                     "task: mt\ndata: DATA\nmodel: {encoder: {relations: [tree_distance], max_distance: 1000000000}}\n"]),
    st.text(max_size=30))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "train.en").write_text("\n".join(EN * 3) + "\n")
    (tmp / "train.fr").write_text("\n".join(FR * 3) + "\n")
    data = prepare(PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train")},
                                 parse_source=False, vocab_size=40))
    run = tmp / "run"
    (run / "checkpoints" / "ckpt_000001").mkdir(parents=True)  # never trains: "already has checkpoints"
    config = tmp / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "task": "mt", "data": str(data),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder": {"layers": 2}, "decoder": {"layers": 1}},
        "train": {"max_steps": 1, "progress_bar": False, "tensorboard": False}}))
    return tmp, data, run, config


def _check(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors (e.g. an override that starts with '-'):
        err = capsys.readouterr().err  # its usage line, then one error line
        assert stop.code == 2 and re.match(r"synattn( train)?: error: ", err.splitlines()[-1]), err
        return err
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code in (0, 1, 2), (argv, code, err)
    if code:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("synattn train: error: "), (argv, err)
    return err


@settings(max_examples=FUZZ_SCALE or 150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.lists(OVERRIDE, min_size=1, max_size=3))
def test_fuzzed_overrides(setup, capsys, overrides):
    _, _, run, config = setup
    _check(capsys, ["train", "--config", str(config), "--run-dir", str(run), *overrides])
    count_case("config overrides")


@settings(max_examples=FUZZ_SCALE or 60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=FILES, overrides=st.lists(OVERRIDE, max_size=2), data_option=st.sampled_from([None, "DATA", "missing"]),
       resume=st.booleans())
def test_fuzzed_config_files_and_options(setup, capsys, text, overrides, data_option, resume):
    tmp, data, run, _ = setup
    path = tmp / "fuzzed.yaml"
    path.write_bytes(text.replace("DATA", str(data)).encode("utf-8", "surrogatepass")
                     if "\xff" not in text else b"task: \xff\n")
    argv = ["train", "--config", str(path), "--run-dir", str(run), *overrides]
    if data_option:
        argv[3:3] = ["--data", str(data) if data_option == "DATA" else str(tmp / "missing")]
    if resume:  # the checkpoint is empty: a config that passes every check fails to load it
        argv.insert(1, "--resume")
    _check(capsys, argv)
    count_case("config files and options")
