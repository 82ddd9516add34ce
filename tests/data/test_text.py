"""Plain-text reading: bad lines are reported with file and line, or skipped and counted."""

import pytest

from synattn.data.text import SkipReport, read_lines
from synattn.errors import DataError


def test_good_file(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("Hello  world\nsecond line \n", encoding="utf-8")
    assert read_lines(f) == [(1, "Hello world"), (2, "second line")]


@pytest.mark.parametrize("content, line, cause", [
    (b"ok\n\nok\n", 2, "empty line"),
    (b"ok\nbad \xff byte\n", 2, "not valid UTF-8"),
    (b"a b c d e\n", 1, "more than the limit of 3"),
])
def test_bad_lines_raise_with_location(tmp_path, content, line, cause):
    f = tmp_path / "bad.txt"
    f.write_bytes(content)
    with pytest.raises(DataError) as err:
        read_lines(f, max_words=3)
    assert err.value.line == line and str(f) in str(err.value) and cause in str(err.value)
    assert str(err.value).startswith(f"{f}:{line}")


def test_skip_reports_what_it_skipped(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_bytes(b"one\n\n\xfe\ntwo\n")
    report = SkipReport()
    assert read_lines(f, on_error="skip", report=report) == [(1, "one"), (4, "two")]
    assert [line for line, _ in report.skipped] == [2, 3]
    assert "skipped 2 line(s)" in report.summary(f)
