"""Fuzzing the ``synattn`` command in-process: hypothesis-generated argument lists, damaged dataset
files, outputs aimed at inputs, and ``synattn train`` with bad configs and overrides. The only
acceptable outcomes are success or a one-line error (exit 1 or 2, no traceback), and no file outside
the command's output touched. (Damaged checkpoints: tests/cli/test_damaged_checkpoints.py.)

Every example runs in a fresh sandbox folder (the working directory): outputs are named inside
it; inputs are the shared tiny runs and dataset (``tiny_runs``), which must stay byte-identical.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from synattn.cli.main import build_parser, main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.models.config import (
    EncoderDecoderConfig,
    SpecializedHeadsConfig,
    StackConfig,
    SupervisedHeadConfig,
    SyntacticAttentionConfig,
)
from synattn.train import TrainConfig
from synattn.train.experiment import EvalConfig
from tests.helpers.cli import DAMAGE, EN, FR, FUZZ, FUZZ_CASES, FUZZ_SCALE, count_case, damage, digest, run_cli, sandbox

COMMANDS = ("translate", "evaluate", "induce", "viz", "stats", "prepare")
OUTPUTS = {"-o", "--output", "--out", "--json", "--hypotheses", "--out-prefix", "--plot"}
SKIPPED = {"--help", "-h", "--corpus"}  # --corpus reads a whole built-in corpus: too slow here
NUMBERS = ["-5", "0", "1", "2", "3", "7", "1000000", "nan", "inf", "-inf", "abc", "1e3", "0.5", "-0", "",
           "100000", "1000000000", str(10 ** 30)]
SPLITS = ["train", "test", "dev", "nosuch", "../x", "cache", "a/b", ".h", "train=x"]
SANDBOX_OUT = ["out", "out.txt", "sub/dir/out.txt", "sub/", ".", "x.json", "x.png"]
# Examples per fuzzer: a handful by default (the suite stays fast); SYNATTN_FUZZ_EXAMPLES=500 for a
# deep run.
SCALE = FUZZ_SCALE


def _options(command: str) -> list[tuple[str, bool]]:
    """(option, takes a value) of a subcommand."""
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    out = []
    for action in sub.choices[command]._actions:
        for option in action.option_strings:
            if option not in SKIPPED:
                out.append((option, action.nargs != 0))
    return out


@st.composite
def argv_of(draw, tiny: Path):
    command = draw(st.sampled_from(COMMANDS))
    files = [str(tiny / n) for n in ("in.txt", "data", "mt", "mlm", "other", "data/manifest.json",
                                     "mt/checkpoints/ckpt_000002", "mt/config.yaml", "test")]
    anything = st.sampled_from(files + NUMBERS + SPLITS + ["missing.txt", "../escape", "-", "/dev/null"])
    run = st.sampled_from([str(tiny / "mt")] * 4 + [str(tiny / "mlm"), str(tiny / "data"), "nowhere"])
    argv = [command]
    if command in ("translate", "evaluate", "induce", "viz"):
        argv += ["--run", draw(run)]
        if command != "evaluate":
            argv += draw(st.sampled_from([["-i", str(tiny / "in.txt")], ["--split", draw(st.sampled_from(SPLITS))],
                                          ["-i", draw(anything)]]))
        if command == "viz":
            argv += ["-o", draw(st.sampled_from(SANDBOX_OUT))]
        if command == "translate":
            argv += ["--beam", draw(st.sampled_from(["1", "2", "0", "-1", "50"]))]
        if command == "evaluate":
            argv += ["--no-translate"] if draw(st.booleans()) else ["--beam", "1"]
    elif command == "stats":
        argv += [draw(st.sampled_from([str(tiny / "in.txt"), "missing.conllu", str(tiny / "data"), "/dev/null"]))]
    elif command == "prepare":
        argv += ["-o", draw(st.sampled_from(SANDBOX_OUT)), "--no-parse-source", "--vocab-size", "40"]
        argv += draw(st.sampled_from([["--train", str(tiny / "train")], ["--train", str(tiny / "test"),
                                      "--dev", draw(anything)], ["--src-trees", f"{draw(st.sampled_from(SPLITS))}=x"],
                                      ["--train", str(tiny / "train") + ".tsv"]]))
    for option, takes_value in draw(st.lists(st.sampled_from(_options(command)), max_size=3)):
        argv.append(option)
        if takes_value:
            argv.append(draw(st.sampled_from(SANDBOX_OUT) if option in OUTPUTS else anything))
    return argv


@settings(max_examples=SCALE or 25, **FUZZ)
@given(data=st.data())
def test_fuzz_argument_lists(tiny_runs, data):
    argv = data.draw(argv_of(tiny_runs))
    with sandbox(tiny_runs):
        run_cli(argv)
    count_case("argument lists")


def _mutate_json(data: bytes, seed: int) -> bytes:
    rng = __import__("random").Random(seed)
    obj = json.loads(data)
    keys = list(obj)
    if not keys:
        return rng.choice([b"[", b"[]", b'{"src_upos": 3}', b'{"src_upos": [1, 2]}'])
    key = rng.choice(keys)
    choice = rng.randrange(4)
    if choice == 0:
        del obj[key]
    elif choice == 1:
        obj[key] = rng.choice([None, 0, -1, "x", [], {}, "../../etc/passwd", {"src": "../x"}])
    elif choice == 2 and isinstance(obj[key], dict) and obj[key]:
        sub = rng.choice(list(obj[key]))
        obj[key][sub] = rng.choice([None, -1, "../x", [1], "nosuch.model"])
    else:
        return b"[" + data
    return json.dumps(obj).encode()


@settings(max_examples=SCALE or 10, **FUZZ)
@given(name=st.sampled_from(["manifest.json", "manifest.json", "labels.json", "spm.src.model", "test/src_ids.data.npy",
                             "test/src_ids.offsets.npy", "test/tgt_word.data.npy", "test/tgt.txt", ".synattn-dataset",
                             "train/src_ids.data.npy", "train/tgt_ids.offsets.npy", "train/src_word.data.npy"]),
       how=DAMAGE, position=st.floats(0, 1), seed=st.integers(0, 2 ** 16))
def test_fuzz_damaged_datasets(tiny_runs, name, how, position, seed):
    with sandbox(tiny_runs) as box:
        data = box / "data"
        shutil.copytree(tiny_runs / "data", data)
        path = data / name
        raw = path.read_bytes()
        path.write_bytes(_mutate_json(raw, seed) if name.endswith(".json") and seed % 2 else
                         damage(raw, how, position, seed))
        run_cli(["evaluate", "--run", str(tiny_runs / "mt"), "--data", str(data), "--split", "test",
                 "--no-translate"])
        run_cli(["translate", "--run", str(tiny_runs / "mt"), "--data", str(data), "--split", "test",
                 "--beam", "1", "-o", "t.txt"])
        # training on it: checked before anything is written; the run directory already has a
        # checkpoint, so a dataset that passes every check stops at "already has checkpoints"
        (box / "run" / "checkpoints" / "ckpt_000001").mkdir(parents=True)
        config = yaml.safe_load((tiny_runs / "mt.yaml").read_text())
        (box / "exp.yaml").write_text(yaml.safe_dump({**config, "data": str(data)}))
        code, _ = run_cli(["train", "--config", "exp.yaml", "--run-dir", "run"])
        assert code != 0 and not (box / "run" / "vocab").exists()
        run_cli(["prepare", "--train", str(tiny_runs / "train"), "--no-parse-source", "--vocab-size", "40",
                 "-o", str(data)])
    count_case("damaged datasets")


# outputs aimed at what the command reads, at folders it did not make, at the home folder: every
# command refuses (exit 1 or 2, one line) and nothing changes: inputs, the user's folder, the home folder
CLASHES = ["mine", "home", "T/data", "T/mt", "T/mt/vocab", "T/mt/checkpoints", "."]


@st.composite
def clashing_argv(draw):
    run = ["--run", "T/mt"]
    if draw(st.booleans()):  # a command that writes a file, aimed at one it reads (a run's, a dataset's)
        of_run = ["T/data/test/tgt.txt", "T/mt/config.yaml", "T/mt/vocab/spm.src.model"]
        reader = draw(st.sampled_from(["translate", "induce", "evaluate-json", "evaluate-hyp", "parse", "stats"]))
        target = draw(st.sampled_from({"parse": ["in.txt", "link.txt"], "stats": ["a.conllu"]}.get(
            reader, of_run + (["in.txt", "link.txt"] if reader in ("translate", "induce") else []))))
        return {"translate": ["translate", *run, "-i", "in.txt", "--beam", "1", "-o", target],
                "induce": ["induce", *run, "-i", "in.txt", "-o", target],
                "evaluate-json": ["evaluate", *run, "--split", "test", "--no-translate", "--json", target],
                "evaluate-hyp": ["evaluate", *run, "--split", "test", "--beam", "1", "--hypotheses", target],
                "parse": ["parse", "in.txt", "-o", target],
                "stats": ["stats", "a.conllu", "--plot", target]}[reader]
    target = draw(st.sampled_from(CLASHES))  # a command that fills a folder, aimed at one it did not make
    writer = draw(st.sampled_from(["viz", "train", "prepare", "prepare-force", "corpus", "reproduce"]))
    if writer == "prepare-force" and target == "T/data":
        target = "T/mt"  # --force replacing a prepared dataset is what it is for
    return {"viz": ["viz", *run, "-i", "in.txt", "-o", target],
            "train": ["train", "--config", "T/mt.yaml", "--run-dir", target],
            "prepare": ["prepare", "--train", "train", "--no-parse-source", "--vocab-size", "40", "-o", target],
            "prepare-force": ["prepare", "--train", "mine/train", "--no-parse-source", "--vocab-size", "40",
                              "-o", target, "--force"],
            "corpus": ["corpus", "ptb", "-o", target + "/"],
            "reproduce": ["reproduce", "structured-attention", "--toy", "-o", target]}[writer]


@settings(max_examples=SCALE or 25, **FUZZ)
@given(argv=clashing_argv())
def test_fuzz_outputs_onto_inputs_and_foreign_folders(tiny_runs, monkeypatch, argv):
    from tests.helpers.cli import CONLLU

    with sandbox(tiny_runs) as box:
        (box / "in.txt").write_text("dogs bark at night\n")
        (box / "link.txt").symlink_to(box / "in.txt")
        (box / "a.conllu").write_text(CONLLU)
        for name, text in (("mine/notes.txt", "mine"), ("home/notes.txt", "mine"), ("train.en", "dogs bark\n" * 9),
                           ("train.fr", "chiens\n" * 9), ("mine/train.en", "dogs\n" * 9),
                           ("mine/train.fr", "chiens\n" * 9)):
            (box / name).parent.mkdir(parents=True, exist_ok=True)
            (box / name).write_text(text)
        monkeypatch.setenv("HOME", str(box / "home"))
        before = digest(box)
        argv = [a.replace("T/", f"{tiny_runs}/") for a in argv]
        code, err = run_cli(argv)
        assert code in (1, 2), (argv, err)
        assert digest(box) == before, argv  # (the sandbox checks that the tiny runs are unchanged)
    monkeypatch.undo()
    count_case("outputs onto inputs and foreign folders")


# ------------------------------------------------------------------------------------------------
# synattn train with bad configs and arguments, in-process with capsys. The run directory already
# has an (empty) checkpoint, so a config that passes every check stops at the "already has
# checkpoints" error, or with ``--resume`` at loading the checkpoint, instead of training: the
# fuzzing exercises every check that runs before training, which is where every config mistake
# must be caught.

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
                     "task: mt\ndata: DATA\nmodel: {encoder: {relations: [tree_distance], "
                     "max_distance: 1000000000}}\n"]),
    st.text(max_size=30))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "train.en").write_text("\n".join(EN[:3] * 3) + "\n")
    (tmp / "train.fr").write_text("\n".join(FR[:3] * 3) + "\n")
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
        if lines[0] == "known keys:":  # an unknown key's section, listed (indented) before the error line
            lines = [line for line in lines[1:] if not line.startswith("  ")]
        assert len(lines) == 1 and lines[0].startswith("synattn train: error: "), (argv, err)
    return err


@settings(max_examples=FUZZ_SCALE or 150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.lists(OVERRIDE, min_size=1, max_size=3))
@example(overrides=["model.encoder.supervised_head=0"])  # a method section given as a number (was a traceback)
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


def test_fuzz_case_counts():
    """Runs last (after tests/cli/test_damaged_checkpoints.py too): how many cases the fuzzers tried
    (shown with -rP)."""
    print(f"fuzz cases: {FUZZ_CASES} = {sum(FUZZ_CASES.values())}")
    assert all(count > 0 for count in FUZZ_CASES.values())


def test_an_unknown_argument_with_a_line_break_character_stays_on_one_line(capsys):
    with pytest.raises(SystemExit) as stop:  # found by the fuzzer: '\x1e' is a line break to str.splitlines
        main(["train", "--config", "x.yaml", "-\x1e"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("synattn train: error: unrecognized arguments: '-\\x1e'"), err
