"""Fuzzing the ``synattn`` command in-process: hypothesis-generated argument lists, damaged
checkpoints and damaged dataset files. The only acceptable outcomes are success or a one-line
error (exit 1 or 2, no traceback), and no file outside the command's output touched.

Every example runs in a fresh sandbox folder (the working directory): outputs are named inside
it; inputs are the shared tiny runs and dataset (``tiny_runs``), which must stay byte-identical.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from synattn.cli.main import build_parser
from tests.helpers.cli import FUZZ_CASES, FUZZ_SCALE, count_case, digest, run_cli, sandbox

COMMANDS = ("translate", "evaluate", "induce", "viz", "stats", "prepare")
OUTPUTS = {"-o", "--output", "--out", "--json", "--hypotheses", "--out-prefix", "--plot"}
SKIPPED = {"--help", "-h", "--corpus"}  # --corpus reads a whole built-in corpus: too slow here
NUMBERS = ["-5", "0", "1", "2", "3", "7", "1000000", "nan", "inf", "-inf", "abc", "1e3", "0.5", "-0", "",
           "100000", "1000000000", str(10 ** 30)]
SPLITS = ["train", "test", "dev", "nosuch", "../x", "cache", "a/b", ".h", "train=x"]
SANDBOX_OUT = ["out", "out.txt", "sub/dir/out.txt", "sub/", ".", "x.json", "x.png"]
# Examples per fuzzer: a handful by default (the suite stays fast); SYNATTN_FUZZ_EXAMPLES=500 for a
# deep run. No shrinking: a failing example is printed as found (shrinking CLI runs takes minutes).
SCALE = FUZZ_SCALE
FUZZ = dict(deadline=None, suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.reuse, Phase.generate))


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


def _damage(data: bytes, how: str, position: float, seed: int) -> bytes:
    rng = __import__("random").Random(seed)
    cut = int(len(data) * position)
    if how == "truncate":
        return data[:cut]
    if how == "zero":
        return b""
    if how == "zeros":
        return bytes(len(data))
    if how == "random":
        return bytes(rng.randrange(256) for _ in range(max(len(data), 1)))
    if how == "flip":
        out = bytearray(data)
        for _ in range(8):
            if out:
                k = rng.randrange(len(out))
                out[k] ^= 1 << rng.randrange(8)
        return bytes(out)
    if how == "nan":  # a well-formed safetensors file whose weights hold NaN (a diverged run)
        from safetensors.torch import load, save

        tensors = load(data)
        floats = sorted(k for k, v in tensors.items() if v.is_floating_point())
        name = floats[seed % len(floats)]
        tensors[name].view(-1)[seed % tensors[name].numel()] = float("nan")
        return save(tensors)
    return data + bytes(rng.randrange(256) for _ in range(64))  # "append"


DAMAGE = st.sampled_from(["truncate", "zero", "zeros", "random", "flip", "append"])


@settings(max_examples=SCALE or 8, **FUZZ)
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
        path.write_bytes(_damage(path.read_bytes(), how, position, seed))
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
                         _damage(raw, how, position, seed))
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
            "prepare-force": ["prepare", "--train", "mine/train", "--no-parse-source", "--vocab-size", "40", "-o", target,
                              "--force"],
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
                           ("train.fr", "chiens\n" * 9), ("mine/train.en", "dogs\n" * 9), ("mine/train.fr", "chiens\n" * 9)):
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


def test_fuzz_case_counts():
    """Runs last (after test_cli_fuzz too): how many cases the fuzzers tried (shown with -rP)."""
    print(f"fuzz cases: {FUZZ_CASES} = {sum(FUZZ_CASES.values())}")
    assert all(count > 0 for count in FUZZ_CASES.values())
