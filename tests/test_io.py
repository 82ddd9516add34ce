"""Atomic writes never leave a half-written file and keep the previous version on failure."""

import pytest

from synattn.io import atomic_write


def test_atomic_write_replaces_only_on_success(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    with atomic_write(path) as f:
        f.write("first")
    assert path.read_text() == "first"
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write("half")
            raise RuntimeError("crash in the middle")
    assert path.read_text() == "first"
    assert [p.name for p in path.parent.iterdir()] == ["out.txt"]  # no temporary file left behind


def test_atomic_write_gives_usual_permissions(tmp_path):
    import os

    with atomic_write(tmp_path / "f.txt") as f:
        f.write("x")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_atomic_write_streams_into_a_device_or_pipe(tmp_path):
    """-o /dev/null as root replaced the device with a regular file (the temporary file renamed onto it)."""
    import os
    import stat
    import threading

    with atomic_write("/dev/null") as f:
        f.write("gone\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # still the device
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with atomic_write(fifo) as f:
        f.write("through the pipe\n")
    reader.join(10)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left
