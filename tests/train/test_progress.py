"""Progress output: a bar on a terminal only; in a log file, one plain line per interval."""

from __future__ import annotations

import io
import sys

import pytest

from synattn import progress as progress_module
from synattn.progress import PlainProgress, bar, progress


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", fake)
    return fake


def test_off_a_terminal_progress_is_one_plain_line_per_interval(capsys, clock):
    """Redirected stderr gets no bar redraws (no carriage returns) and no stale "0%" line: short work
    prints nothing, long work a line each interval and a last one."""
    assert list(progress(range(5), desc="evaluate test", unit="batch")) == list(range(5))
    assert capsys.readouterr().err == ""

    def slow(n):
        for i in range(n):
            clock.now += 10.0  # 10 s per item
            yield i

    assert list(progress(slow(9), desc="evaluate test", total=9, unit="batch")) == list(range(9))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["evaluate test: 3/9 batch (33%), 30 s", "evaluate test: 6/9 batch (67%), 60 s",
                     "evaluate test: 9/9 batch (100%), 90 s"]


def test_the_bar_of_a_log_file_supports_what_the_callers_use(capsys, clock):
    with bar(600, desc="training", unit="s", leave=True, bar_format="ignored off a terminal") as shown:
        assert isinstance(shown, PlainProgress)
        for second in range(0, 601, 2):  # polled every 2 s, as the demo's side-by-side training is
            clock.now = float(second)
            shown.n = second
            shown.set_postfix_str(f"baseline: update {second // 4}", refresh=False)
            shown.refresh()
    err = capsys.readouterr().err
    assert "\r" not in err and len(err.splitlines()) == 20  # every 30 s, the last at the end
    assert err.splitlines()[-1] == "training: 600/600 s (100%), baseline: update 150, 600 s"
    disabled = bar(10, desc="x", enabled=False)
    disabled.update(3)
    disabled.close()
    assert capsys.readouterr().err == ""


def test_on_a_terminal_progress_is_a_tqdm_bar(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert list(progress(range(3), desc="parse", unit="sent")) == [0, 1, 2]
    assert "\r" in sys.stderr.getvalue() and "parse" in sys.stderr.getvalue()
    assert not isinstance(bar(3, desc="x"), PlainProgress)


def test_the_training_bar_is_drawn_on_a_terminal_only(monkeypatch):
    from synattn.train.progress import progress_bar

    assert progress_bar(10, 1, 0, 1, show=True).disable  # the suite's stderr is no terminal
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert not progress_bar(10, 1, 0, 1, show=True).disable
    assert progress_bar(10, 1, 0, 1, show=False).disable
