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


def test_a_line_that_says_nothing_new_is_left_out_up_to_a_quiet_minutes_line(capsys, clock):
    """The demo's runs report every few updates; polled every 2 s and printed every 30 s, the same
    update would print again and again with only its seconds changed (read as lines printed twice)."""
    with bar(1200, desc="training", unit="updates") as shown:
        for second in range(0, 901, 2):
            clock.now = float(second)
            shown.n = 25 * (second // 90)  # news every 90 s
            shown.set_postfix_str(f"baseline: update {shown.n:.0f}", refresh=False)
            shown.refresh()
        for second in range(902, 1500, 2):  # then stuck for ten minutes
            clock.now = float(second)
            shown.refresh()
    lines = capsys.readouterr().err.splitlines()
    said, when = zip(*(line.rsplit(", ", 1) for line in lines))
    # a line at the first interval, then one per piece of news, then one after 300 s of silence
    assert when == ("30 s", *(f"{t} s" for t in range(90, 901, 90)), "1200 s")
    assert len(set(said)) == len(said) - 1 and said[-1] == said[-2] == "training: 250/1200 updates (21%), " \
        "baseline: update 250"


def test_pace_leaves_the_start_out_and_durations_read_well():
    from synattn.progress import Pace, duration

    pace = Pace()
    assert pace.per_second is None and pace.seconds_for(10) is None
    pace.observe(10, 60.0)  # the first 10 updates took a minute (start-up)
    assert pace.per_second is None
    pace.observe(30, 70.0)
    assert pace.per_second == 2.0 and pace.seconds_for(100) == 50.0
    pace.observe(5, 3.0)  # a restart: measured again from there
    assert pace.per_second is None
    assert [duration(s) for s in (5, 89, 600, 7199, 7500)] == ["5 s", "89 s", "10 min", "2 h 00 min", "2 h 05 min"]


def test_training_records_end_with_the_time_to_go():
    from types import SimpleNamespace

    from synattn.train.progress import TrainInterval

    config = SimpleNamespace(max_steps=100, max_epochs=None, max_minutes=None)
    interval = TrainInterval(SimpleNamespace(), None, False, config)
    interval.pace.observe(10, 5.0)
    assert interval.seconds_to_go(10, 5.0) is None  # one record: no pace yet
    interval.pace.observe(20, 10.0)  # 2 updates/s
    assert interval.seconds_to_go(20, 10.0) == 40.0
    config.max_minutes = 0.5  # 20 s of training left: sooner
    assert interval.seconds_to_go(20, 10.0) == 20.0
    config.max_steps, config.max_minutes, config.max_epochs, interval.per_epoch = None, None, 3, 30
    assert interval.seconds_to_go(20, 10.0) == 35.0
