"""Self-contained run directories: the tokenizers and label vocabularies a run was trained with,
and a fingerprint of its dataset.

``synattn train`` copies what is needed to read and write text with the model into ``RUN/vocab``::

    RUN/vocab/
      manifest.json       the dataset's manifest, plus "dataset": its fingerprint (below)
      spm.src.model       the sentencepiece model(s) (spm.joint.model for a joint vocabulary)
      spm.tgt.model
      labels.json         POS and dependency-label vocabularies
      detok.tgt.json      how the target's tokens are written as text (synattn.data.detok), when
                          the parser tokenized it

so ``RUN/vocab`` reads like the vocabulary part of a prepared folder (``Translator(model,
RUN/vocab)``, ``Sentences.from_text``), from any directory and after the dataset has moved. The
fingerprint records the dataset's absolute path, its settings key and the SHA-256 of each of those
files; a dataset whose files differ (prepared again, or another one) is refused with
:class:`synattn.errors.ConfigError` by :func:`check_dataset` wherever a run meets its data again
(``--resume``, ``evaluate``, a split in ``translate``/``induce``/``viz``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
import shutil
from pathlib import Path

from synattn.checkpoints import CHECKPOINTS, SNAPSHOTS
from synattn.errors import ConfigError, InputError, RunFailure
from synattn.folders import FolderKind, mark
from synattn.io import atomic_write, file_digest, real_folder, refuse_link, remove_path

VOCAB = "vocab"
MANIFEST = "manifest.json"
LABELS = "labels.json"


def _run_before_markers(folder: Path) -> bool:
    """A run directory of a version that wrote no marker: checkpoints, the run's vocabulary, or
    the ``config.yaml`` the trainer writes (an ``experiment`` section)."""
    if (folder / "checkpoints").is_dir() or run_vocab(folder) is not None:
        return True
    try:
        with open(folder / "config.yaml", encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    return re.search(r"^experiment:", head, re.MULTILINE) is not None


RUN = FolderKind(".synattn-run", "a run directory of 'synattn train'", made_before_markers=_run_before_markers)
"""A run directory (:mod:`synattn.folders`): its marker is written with the run's vocabulary."""


def _manifest(folder: Path) -> dict:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"data: {folder} is not a prepared dataset (no {MANIFEST}); run 'synattn prepare' "
                          "first") from None
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"data: {folder / MANIFEST} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise InputError(f"is not a dataset manifest (a JSON object), it holds a {type(data).__name__}; "
                         "prepare the dataset again", str(folder / MANIFEST))
    return data


def vocab_files(manifest: dict) -> list[str]:
    """The files of a prepared folder that a model's inputs and outputs depend on."""
    return sorted(set(manifest["spm"].values()) | set((manifest.get("detok") or {}).values())) + [LABELS]


def fingerprint(folder: str | Path) -> dict:
    """The fingerprint of a prepared dataset: path, settings key, SHA-256 of its vocabulary files.

    Raises:
        InputError: the manifest has no ``spm`` mapping of sentencepiece file names (damaged).
    """
    folder = Path(folder).resolve()
    manifest = _manifest(folder)
    spm = manifest.get("spm") if isinstance(manifest, dict) else None
    if not isinstance(spm, dict) or not all(isinstance(name, str) for name in spm.values()):
        raise InputError(f"the manifest has no 'spm' mapping of sentencepiece files (got {spm!r}); prepare "
                         "the dataset again", str(folder / MANIFEST))
    files = {}
    for name in vocab_files(manifest):
        path = folder / name
        files[name] = file_digest(path) if path.exists() else None
    return {"path": str(folder), "key": manifest.get("key"), "files": files}


def run_vocab(run: str | Path) -> Path | None:
    """``RUN/vocab`` when the run has one (runs of older versions do not).

    Raises:
        InputError: the run is marked as one (it was written with its copy) and has checkpoints, but
            its copy is gone: its tokenizers cannot be told from a dataset prepared again since.
    """
    folder = Path(run) / VOCAB
    if (folder / MANIFEST).is_file():
        return folder
    if (Path(run) / RUN.marker).is_file() and any((Path(run) / CHECKPOINTS).glob("ckpt_*")):
        raise InputError("is missing (the run's copy of its tokenizers and labels, written when it started): "
                         "which vocabulary its weights were trained with is unknown; copy the run's vocab "
                         "folder back, or train a new run", str(folder / MANIFEST))
    return None


def run_fingerprint(run: str | Path) -> dict | None:
    """The fingerprint of the dataset ``run`` was trained on (None for runs without ``vocab``)."""
    folder = run_vocab(run)
    return None if folder is None else _manifest(folder).get("dataset")


def check_dataset(run: str | Path, folder: str | Path) -> None:
    """Raises :class:`ConfigError` when ``folder`` is not the dataset ``run`` was trained on (its
    tokenizers or label vocabularies differ); does nothing for runs without a fingerprint."""
    saved = run_fingerprint(run)
    if saved is None:
        return
    check_run_copies(run, saved)
    now = fingerprint(folder)
    changed = [name for name, digest in saved["files"].items() if now["files"].get(name) != digest]
    if changed:
        raise ConfigError(f"data: {now['path']} is not the dataset run {run} was trained on ({', '.join(changed)} "
                          f"differ from the run's copies in {Path(run) / VOCAB}; it was prepared again or is "
                          f"another dataset); give the original with --data (it was {saved['path']}) or "
                          "train a new run")


def check_run_copies(run: str | Path, saved: dict | None = None) -> None:
    """Raises :class:`InputError` naming the file when a copy in ``RUN/vocab`` is not the file it
    was copied from (by the SHA-256 the fingerprint recorded): damaged or replaced since."""
    saved = saved if saved is not None else run_fingerprint(run)
    if saved is None:
        return
    folder = Path(run) / VOCAB
    for name, digest in saved["files"].items():
        if digest is None:
            continue
        try:
            same = file_digest(folder / name) == digest
        except OSError:
            same = False
        if not same:
            raise InputError(f"the run's copy of {name} is not the file it was copied from (damaged, replaced or "
                             f"missing); copy {Path(saved['path']) / name} there again if that dataset is "
                             "unchanged, or train a new run", str(folder / name))


def save_run_vocab(run: str | Path, folder: str | Path) -> Path:
    """Copies the tokenizers, labels and manifest of dataset ``folder`` into ``RUN/vocab`` with the
    dataset's fingerprint (written into a temporary folder and renamed into place; removed when
    the copy fails, e.g. on a full disk).

    Raises:
        RunFailure: the copy cannot be written (naming ``RUN/vocab`` and the cause).
        InputError: ``RUN/vocab`` is a symbolic link (nothing is written).
    """
    run, folder = Path(run), Path(folder)
    manifest = _manifest(folder)
    try:
        return _save_run_vocab(run, folder, manifest)
    except OSError as err:
        cause = (err.strerror or str(err)).removeprefix("cannot write: ")  # (an atomic write's own words)
        if err.errno == errno.ENOSPC and "disk full" not in cause:
            cause += " (is the disk full?)"
        raise RunFailure(f"{run / VOCAB}: cannot write the run's copy of the tokenizers: {cause}") from None


def _save_run_vocab(run: Path, folder: Path, manifest: dict) -> Path:
    target, tmp, old = run / VOCAB, run / (VOCAB + ".tmp"), run / (VOCAB + ".del")
    refuse_link(target, "folder")
    remove_path(tmp)  # of a killed copy (a link there is removed, never followed)
    try:
        real_folder(tmp)
        for name in vocab_files(manifest):
            if (folder / name).exists():
                with open(folder / name, "rb") as src, atomic_write(tmp / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        manifest["dataset"] = fingerprint(folder)
        with atomic_write(tmp / MANIFEST) as f:
            f.write(json.dumps(manifest, indent=1) + "\n")
        remove_path(old)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk leaves no half-made copy behind
            remove_path(tmp)
        raise
    with contextlib.suppress(OSError):
        remove_path(old)
    mark(run, RUN)
    return target


RUN_FILES = (CHECKPOINTS, SNAPSHOTS, VOCAB, "tensorboard", "log.jsonl", "config.yaml", RUN.marker)
"""What ``train`` writes into or removes from a run directory (besides its scratch names, whose links
are removed as links)."""


def check_run_links(run: str | Path) -> None:
    """Raises :class:`InputError` naming the first of :data:`RUN_FILES` in ``run`` that is a symbolic
    link: training writes into those and removes old checkpoints, and never through a link."""
    for name in RUN_FILES:
        refuse_link(Path(run) / name, "folder" if name in (CHECKPOINTS, SNAPSHOTS, VOCAB, "tensorboard") else "file")


def dataset_of(run: str | Path, data: str | Path | None = None) -> Path:
    """The prepared dataset of ``run``: ``data`` when given, else the path its fingerprint (or,
    for older runs, its ``config.yaml``) records; checked against the run's fingerprint."""
    if data is None:
        saved = run_fingerprint(run)
        if saved is not None:
            data = saved["path"]
        else:
            from synattn.config_io import parse_yaml

            data = parse_yaml((Path(run) / "config.yaml").read_text(encoding="utf-8"))["experiment"]["data"]
    folder = Path(data)
    if not (folder / MANIFEST).is_file():
        raise ConfigError(f"data: {folder} (the dataset of run {run}) is not there or not prepared; give "
                          "the dataset with --data")
    check_dataset(run, folder)
    return folder
