"""The switch between the compiled (numba) and the pure-PyTorch dynamic programs."""

from __future__ import annotations

import pytest
import torch

from synattn.structs import backend
from synattn.structs.backend import ENV_VAR, requested_backend, use_backend, use_numba

CPU = torch.zeros(1)
META = torch.empty(1, device="meta")  # stands for a tensor that is not on the CPU


@pytest.fixture
def numba_present(monkeypatch):
    monkeypatch.setattr(backend, "numba_available", lambda: True)


@pytest.fixture
def numba_absent(monkeypatch):
    monkeypatch.setattr(backend, "numba_available", lambda: False)


def test_default_is_auto_and_picks_numba_on_cpu_only(monkeypatch, numba_present):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert requested_backend() == "auto"
    assert use_numba(CPU)
    assert not use_numba(CPU, META)


def test_auto_without_numba_falls_back_to_torch(monkeypatch, numba_absent):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert not use_numba(CPU)


@pytest.mark.parametrize("value, expected", [("torch", False), (" Torch ", False), ("", True),
                                             ("auto", True), ("numba", True), ("reference", False)])
def test_environment_variable(monkeypatch, numba_present, value, expected):
    monkeypatch.setenv(ENV_VAR, value)
    assert use_numba(CPU) is expected


def test_unknown_name_is_an_error_naming_its_source(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match=ENV_VAR):
        requested_backend()
    with pytest.raises(ValueError, match="use_backend"):
        with use_backend("fast"):
            pass


def test_context_manager_nests_and_restores(monkeypatch, numba_present):
    monkeypatch.setenv(ENV_VAR, "torch")
    with use_backend("numba"):
        assert use_numba(CPU)
        with use_backend("torch"):
            assert not use_numba(CPU)
        assert use_numba(CPU)
    assert not use_numba(CPU)
    with pytest.raises(KeyError):
        with use_backend("auto"):
            raise KeyError("the block fails")
    assert requested_backend() == "torch"  # restored despite the error


def test_numba_asked_for_but_missing(numba_absent):
    with use_backend("numba"), pytest.raises(RuntimeError, match="pip install numba"):
        use_numba(CPU)


def test_numba_asked_for_on_another_device(numba_present):
    with use_backend("numba"), pytest.raises(RuntimeError, match="CPU tensors only"):
        use_numba(META)


def test_threads_follow_torch_and_leave_its_count_alone():
    numba = pytest.importorskip("numba")
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            used = backend.set_threads()
            assert used == numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)
            assert torch.get_num_threads() == threads  # (numba's OpenMP pool must not reset it)
        torch.set_num_threads(2)
        assert backend.set_threads(work=10, serial_below=100) == 1
        assert backend.set_threads(work=100, serial_below=100) == min(2, numba.config.NUMBA_NUM_THREADS)
    finally:
        torch.set_num_threads(before)


def test_as_array_is_a_detached_contiguous_view():
    x = torch.arange(6.0).reshape(2, 3).requires_grad_()
    a = backend.as_array(x)
    assert a.flags["C_CONTIGUOUS"] and a.shape == (2, 3)
    t = backend.as_array(x.detach().t())  # non-contiguous input: copied
    assert t.flags["C_CONTIGUOUS"] and (t == x.detach().t().numpy()).all()
