"""The measuring tools of ``benchmarks/`` (nothing here is timed): the count of device operations
per call (``device.device_ops``), the speed-up's spread over paired rounds (``harness``) and
results passed back from a child process (``harness.run_in_child``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from synattn.structs import DependencyCRF
from synattn.structs.backend import numba_available, use_backend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from device import count_launches, device_ops  # noqa: E402
from harness import Timed, format_spread, progress, ratio_spread, run_in_child  # noqa: E402


def test_count_launches_counts_a_known_op_sequence_exactly():
    x = torch.randn(4, 5)
    assert count_launches(lambda: (x + 1).exp().sum()) == 3  # add, exp, sum
    assert count_launches(lambda: x.t().contiguous()) == 1  # one copy, the transpose is a view
    assert count_launches(lambda: x.view(20).unsqueeze(0).expand(3, 20)) == 0  # views only
    assert count_launches(lambda: x.sum().item()) == 2  # the sum and the copy to the host
    assert count_launches(lambda: torch.zeros(3) + x[0, :3]) == 2  # fill, add
    assert count_launches(lambda: None) == 0


def _eisner_marginals(n: int):
    scores = torch.randn(2, n + 1, n + 1, generator=torch.Generator().manual_seed(n))

    def marginals():
        with torch.no_grad():
            return DependencyCRF(scores, torch.tensor([n, max(1, n - 2)])).marginals
    return marginals


def test_torch_path_eisner_marginals_launches_grow_with_n():
    with use_backend("torch"):
        counts = [count_launches(_eisner_marginals(n)) for n in (4, 8, 16)]
    assert counts[0] < counts[1] < counts[2]
    # a fixed number of operations per span width: the count grows linearly with N
    assert counts[2] - counts[1] >= 2 * (counts[1] - counts[0]) - 4


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
def test_numba_eisner_marginals_are_one_compiled_call_whatever_n():
    with use_backend("numba"):
        ops = [device_ops(_eisner_marginals(n)) for n in (4, 16)]
    assert [o["numba"] for o in ops] == [1, 1]
    assert ops[0]["total"] == ops[1]["total"]


def test_ratio_spread_is_taken_round_by_round():
    ours = Timed([1.0, 2.0, 4.0])
    others = {"torch path": Timed([9.0, 9.0, 9.0]),  # (not a peer: left out)
              "torch-struct": Timed([2.0, 2.0, 2.0]), "supar": Timed([3.0, 8.0, 1.0]),
              "other": "fail: RuntimeError: x"}
    # faster peer per round: 2, 2, 1 -> ratios 2, 1, 0.25
    assert ratio_spread(ours, others) == (1.0, 0.25, 2.0, 3)
    assert format_spread(ratio_spread(ours, others)) == "1.0x [0.2-2.0] 3"
    assert ratio_spread(ours, {"supar": 6.0}) == (6.0 / 2.0, 3.0, 3.0, 0)  # a single value: no spread
    assert ratio_spread(ours, {"supar": "hang"}) is None
    assert float(ours) == 2.0


# --- child processes (module-level functions: the child imports them) ---------------------------

def _tensor_sum(x):
    progress("summing")
    return {"sum": x.sum(), "x": x * 2}


def _raises():
    raise ValueError("the peer's LU failed\non two lines")


def _stalls():
    progress("stalling")
    time.sleep(120)


def _dies():
    os._exit(3)


@pytest.mark.slow
def test_run_in_child_passes_tensors_back_through_a_file():
    result = run_in_child(_tensor_sum, (torch.arange(6.0),), timeout=60)
    assert result.status == "ok", result.error
    assert result.value["sum"].item() == 15.0
    torch.testing.assert_close(result.value["x"], torch.arange(6.0) * 2)


@pytest.mark.slow
def test_run_in_child_reports_errors_hangs_and_deaths_as_what_they_are():
    failed = run_in_child(_raises, (), timeout=60)
    assert failed.status == "fail"
    assert failed.error.startswith("ValueError: the peer's LU failed on two lines")
    assert failed.label(30).startswith("fail: ValueError") and len(failed.label(30)) == 30
    hung = run_in_child(_stalls, (), timeout=1)
    assert hung.status == "hang" and "stalling" in hung.error and hung.running == "stalling"
    died = run_in_child(_dies, (), timeout=60)
    assert died.status == "fail" and "exited with status 3 without a result" in died.error
