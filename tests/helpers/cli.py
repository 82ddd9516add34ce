"""Running the ``synattn`` command in-process in a throw-away working directory, with the checks
every hostile-input test makes: exit status 0, 1 or 2, a failure is one error line (no traceback),
and nothing outside the sandbox is touched."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, Phase, strategies as st

from synattn.cli.main import main

#: Cases the fuzzers tried in this session, by fuzzer (printed by the last test of tests/cli/test_fuzz.py).
FUZZ_CASES: dict[str, int] = {}
#: Examples per fuzzer: the fuzzer's own default (the suite stays fast), or SYNATTN_FUZZ_EXAMPLES
#: for a deep run.
FUZZ_SCALE = int(os.environ.get("SYNATTN_FUZZ_EXAMPLES", "0")) or None

#: The fuzzers' settings: no deadline, no health checks, no shrinking (a failing example is printed
#: as found; shrinking runs of the command takes minutes).
FUZZ = dict(deadline=None, suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.reuse, Phase.generate))


def damage(data: bytes, how: str, position: float, seed: int) -> bytes:
    """``data`` damaged ``how`` (one of :data:`DAMAGE`, or ``nan`` for a safetensors file): cut at
    ``position`` (0-1), emptied, zeroed, random bytes, 8 flipped bits, 64 random bytes appended."""
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


def count_case(fuzzer: str) -> None:
    FUZZ_CASES[fuzzer] = FUZZ_CASES.get(fuzzer, 0) + 1


def digest(folder: Path) -> dict[str, str]:
    """SHA-1 of every file under ``folder`` (lock files left out: taking a lock is not a change)."""
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".synattn.lock"}


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Runs ``synattn argv`` in-process; returns (exit status, stderr) after checking the outcome:
    status 0, 1 or 2, no traceback, and on failure a last line ``synattn CMD: error: ...`` that is
    the only error line (argparse's usage lines may come before it)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse: a usage error (2)
            code = exit_.code
    text = err.getvalue()
    assert "Traceback" not in text, text
    assert code in (0, 1, 2), (argv, code, text)
    if code:
        last = text.strip().splitlines()[-1] if text.strip() else ""
        assert last.startswith(f"synattn {argv[0]}: error: "), (argv, text)
        assert len([line for line in text.splitlines() if ": error: " in line]) == 1, text
    return code, text


@contextlib.contextmanager
def sandbox(protected: Path):
    """A fresh working directory; afterwards, ``protected`` and the sandbox's parent are unchanged."""
    before = digest(protected)
    with tempfile.TemporaryDirectory(prefix="synattn-sandbox-") as outer:
        folder = Path(outer) / "box"  # the working directory; its parent must stay as it is
        folder.mkdir()
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(cwd)
            for path in folder.rglob("*"):  # read-only folders made by a test can be removed
                if path.is_dir():
                    path.chmod(0o755)
        assert os.listdir(outer) == ["box"]
    assert digest(protected) == before


# ------------------------------------------------------------------------------------------------
# the tiny parallel text and the tiny trained runs of the ``tiny_runs`` fixture (tests/conftest.py)

EN = ["the cat sat on the mat", "dogs bark at night", "a bird sings in the old tree",
      "we walked home slowly", "the children played outside all day", "rain fell on the roof"]
FR = ["le chat était assis", "les chiens aboient la nuit", "un oiseau chante dans le vieil arbre",
      "nous sommes rentrés lentement", "les enfants ont joué dehors", "la pluie tombait sur le toit"]
MODEL = {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0}
TRAIN = {"max_tokens": 200, "max_steps": 2, "warmup_updates": 1, "progress_bar": False, "tensorboard": False}
#: Four copies of a two-word tree, for the commands that read CoNLL-U.
CONLLU = ("1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n") * 4


def train_tiny(tmp: Path, name: str, task: str, model: dict) -> Path:
    """``synattn train`` of a 2-step run ``tmp/name`` of ``task`` on the dataset ``tmp/data``."""
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"task": task, "data": str(tmp / "data"), "model": {**MODEL, **model},
                                      "train": TRAIN, "eval": {"beam": 2, "bleu_sentences": 0}}))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp / name)]) == 0
    return tmp / name
