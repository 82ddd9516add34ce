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
