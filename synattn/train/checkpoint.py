"""Checkpoints: one directory per checkpoint, present only when complete (fairseq's habit).

Layout under ``RUN/checkpoints``::

    ckpt_000120/          model.safetensors (+ config.json for synattn models), state.pt
    ckpt_000240/
    last                  one line: the name of the newest checkpoint directory
    best                  one line: the checkpoint with the lowest validation loss

A checkpoint is written into ``ckpt_NNNNNN.tmp/`` (every file flushed to disk), then renamed to
``ckpt_NNNNNN/``; only then is ``last`` (and ``best``) atomically rewritten to point at it, and
older directories beyond ``keep_last_n`` are pruned (renamed to ``*.del`` first, then deleted).
So a process killed at any moment leaves ``last`` pointing at a complete checkpoint, and a
directory named ``ckpt_NNNNNN`` is always complete. Leftovers of a killed save (``*.tmp``,
``*.del``) are removed by the next save.

Snapshots (``train.snapshot_interval_updates``) are the weights alone of every N-th update, for
evaluating a run along its training, never pruned and never resumed from; a run that starts or
resumes deletes the snapshots of the updates it has not made yet (they belong to an attempt that
was killed, and the run writes them again)::

    RUN/snapshots/ckpt_000500/   model.safetensors (+ config.json)

Weights are safetensors; the training state (optimizer, scheduler, counters, RNG states) holds
only tensors and plain Python values, so it loads with ``torch.load(weights_only=True)``:
loading never unpickles arbitrary objects. A synattn model's checkpoint directory is also a
``save_pretrained`` directory (``PretrainedModel.from_pretrained(resolve_checkpoint(run))``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import cast

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from synattn.checkpoints import (  # noqa: F401 (the layout's names, read here too)
    CHECKPOINTS,
    NAME,
    POINTERS,
    SNAPSHOTS,
    STATE,
    WEIGHTS,
    checkpoint_name,
    checkpoint_step,
    list_checkpoints,
    read_pointer,
    resolve_checkpoint,
)
from synattn.errors import InputError
from synattn.io import atomic_write, open_regular, real_folder, refuse_link, remove_path
from synattn.models.pretrained import mismatch_summary
from synattn.weights_file import check_against


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    """Removes a directory so that no partly deleted one keeps a checkpoint's name (links are
    removed as links, never followed)."""
    doomed = path.with_name(path.name + ".del")
    _remove_quietly(doomed)
    os.rename(path, doomed)
    _remove_quietly(doomed)


def _remove_quietly(path: Path) -> None:
    try:
        remove_path(path)
    except OSError:
        pass


def _write_weights(model: nn.Module, folder: Path) -> None:
    from synattn.train.libraries import library_of_model

    owner = library_of_model(model)
    if owner is not None and owner.save is not None:  # another library's model, saved its way
        owner.save(model, folder)
        return
    save_pretrained = getattr(model, "save_pretrained", None)
    if save_pretrained is not None:
        save_pretrained(folder)  # config.json + model.safetensors
    else:
        save_model(model, str(folder / WEIGHTS))


def save_checkpoint(folder: str | Path, step: int, model: nn.Module, state: dict, *,
                    is_best: bool = False, keep_last_n: int | None = None) -> Path:
    """Writes a checkpoint atomically, moves the pointers, prunes old checkpoints.

    Args:
        folder: the ``checkpoints`` folder of a run.
        step: the number of updates done (names the directory).
        model: the (unwrapped) model; its weights go to ``model.safetensors``.
        state: training state of tensors and plain Python values (``torch.save``'d).
        is_best: also point ``best`` at this checkpoint.
        keep_last_n: numbered checkpoints to keep (the ones ``last``/``best`` point at are
            always kept); None keeps all.

    Returns:
        The checkpoint directory.
    """
    folder = real_folder(folder)  # never a link: nothing outside the run is written or pruned
    _remove_leftovers(folder)
    def write(tmp: Path) -> None:
        _write_weights(model, tmp)
        torch.save(state, tmp / STATE)

    final = _write_complete(folder / checkpoint_name(step), write)
    for which in ("last", "best") if is_best else ("last",):
        with atomic_write(folder / which) as f:
            f.write(final.name + "\n")
    prune_checkpoints(folder, keep_last_n)
    return final


def save_snapshot(folder: str | Path, step: int, model: nn.Module) -> Path:
    """Writes the model's weights alone (no training state) as ``folder/ckpt_NNNNNN``, atomically
    (a temporary directory renamed when complete); a snapshot already there is replaced."""
    folder = real_folder(folder)
    return _write_complete(folder / checkpoint_name(step), lambda tmp: _write_weights(model, tmp))


def _remove_leftovers(folder: Path) -> None:
    """Removes what a killed write or deletion left in ``folder`` (``*.tmp``, ``*.del``)."""
    for stale in list(folder.glob("*.tmp")) + list(folder.glob("*.del")):
        _remove_quietly(stale)


def _write_complete(final: Path, write) -> Path:
    """Makes the directory ``final`` with what ``write(tmp)`` puts in a temporary sibling, every
    file flushed to disk before the rename, so that ``final`` never exists half written; a
    directory already named ``final`` (left by an earlier, interrupted attempt, never pointed to)
    is replaced."""
    tmp = final.with_name(final.name + ".tmp")
    _remove_quietly(tmp)  # of a killed write
    tmp.mkdir()
    try:
        write(tmp)
        for file in tmp.iterdir():
            _fsync(file)
        _fsync(tmp)
        if final.exists() or final.is_symlink():
            _discard(final)
        os.rename(tmp, final)
    except BaseException:
        _remove_quietly(tmp)  # a full disk leaves no half-written checkpoint behind
        raise
    _fsync(final.parent)
    return final


def drop_snapshots_after(folder: str | Path, step: int) -> list[Path]:
    """Deletes the snapshots of updates after ``step`` and the leftovers of killed writes: a run
    that starts (``step`` 0) or resumes at ``step`` writes those updates again, and with other
    settings (a smaller ``max_steps``) the old ones would outlive the run. Returns the deleted
    snapshots."""
    folder = Path(folder)
    refuse_link(folder, "folder")
    if not folder.is_dir():
        return []
    _remove_leftovers(folder)
    doomed = [p for p in list_checkpoints(folder) if checkpoint_step(p) > step]
    for path in doomed:
        _discard(path)
    return doomed


def prune_checkpoints(folder: str | Path, keep_last_n: int | None) -> list[Path]:
    """Deletes numbered checkpoints beyond the newest ``keep_last_n`` (never ``last``/``best``).

    Returns:
        The deleted directories.
    """
    folder = Path(folder)
    refuse_link(folder, "folder")
    if keep_last_n is None:
        return []
    protected = {read_pointer(folder, which) for which in POINTERS}
    doomed = [p for p in list_checkpoints(folder)[:-keep_last_n] if p not in protected]
    for path in doomed:
        _discard(path)
    return doomed


def load_checkpoint(path: str | Path, model: nn.Module | None = None, which: str = "last",
                    map_location: str | torch.device = "cpu") -> dict:
    """Loads a checkpoint's training state, and its weights into ``model`` (strictly).

    Args:
        path: a run directory, its ``checkpoints`` folder or a checkpoint directory.
        model: the (unwrapped) model to load the weights into; None loads the state only.
        which: ``"last"`` or ``"best"``.
        map_location: where the state's tensors go.

    Returns:
        The training state (see :meth:`synattn.train.Trainer.state_dict`).

    Raises:
        InputError: no checkpoint there, or weights that do not fit ``model``.
    """
    directory = resolve_checkpoint(path, which)
    if directory is None:
        raise InputError(f"no {which} checkpoint found", str(path))
    if model is not None:
        check_against(directory / WEIGHTS, model)  # a pipe, float64 or mis-shaped weights: refused by name
        try:
            load_model(model, str(directory / WEIGHTS), strict=True)  # copies into the params' devices
        except (RuntimeError, FileNotFoundError) as error:
            raise InputError(f"weights do not fit the model: {mismatch_summary(error)}",
                             str(directory / WEIGHTS)) from None
    with os.fdopen(open_regular(directory / STATE, os.O_RDONLY, what="training state"), "rb") as f:
        state = torch.load(f, map_location=map_location, weights_only=True)  # (never a pipe: no hang)
    state["path"] = str(directory)
    return state


def check_no_nan(model: nn.Module, weights: str | Path) -> None:
    """Refuse loaded weights that hold NaN (a run that diverged saves them): a model with them
    translates to empty lines and evaluates to perplexity inf, silently.

    Raises:
        InputError: naming ``weights`` (the file) and the first tensor with NaN, and how many.
    """
    bad = [name for name, tensor in model.state_dict().items()
           if tensor.is_floating_point() and bool(torch.isnan(tensor).any())]
    if bad:
        more = f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else ""
        raise InputError(f"tensor {bad[0]} holds NaN{more}: the weights are damaged (did training "
                         "diverge?); use another checkpoint", str(weights))


def rng_state() -> dict:
    """The states of Python's, NumPy's and torch's (CPU and CUDA) global generators, as tensors."""
    version, internal, gauss = random.getstate()
    # (the legacy tuple form, get_state's default)
    name, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    return {
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64),
                   "gauss": gauss},
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Restores the generators saved by :func:`rng_state`."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state((npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"],
                         npy["has_gauss"], npy["cached"]))
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
