"""Every error line of ``synattn`` is one line a terminal cannot be driven by: control characters of a
path, an override, a YAML key or an argument are shown escaped, long values are cut; the environment
variables it reads are checked when it starts, and thread counts are bounded."""

from __future__ import annotations

import pytest

from synattn.cli.main import SUBCOMMANDS, main
from synattn.errors import LINE_LIMIT, WORD_LIMIT, one_line

#: Characters that must never reach the terminal raw: escape, bell, backspace, carriage return and
#: the other C0 controls, DEL, C1 controls, the line and paragraph separators, a bidi override.
CONTROLS = ["\x1b[2J", "\x1b]0;title\x07", "\x08", "\r", "\x1e", "\x1c", "\x7f", "\x85", "\x9b31m", "\u2028",
            "\u2029", "\u202e", "\x0b", "\x0c"]

COMMANDS = {module.__name__.rsplit(".", 1)[1].removesuffix("_cmd") for module in SUBCOMMANDS}


def _error(argv: list[str], capsys, code: int = 2) -> str:
    """The one error line of ``synattn argv`` (exit status ``code``), checked to hold no character a
    terminal acts on."""
    capsys.readouterr()
    try:
        got = main(argv)
    except SystemExit as stop:
        got = stop.code
    err = capsys.readouterr().err
    lines = [line for line in err.split("\n") if line]  # (split on \n only: the check is that nothing else breaks it)
    assert got == code, (got, err[-500:])
    assert "Traceback" not in err
    last = lines[-1]
    assert last.startswith(f"synattn {argv[0]}: error: " if argv[0] in COMMANDS else "synattn: error: "), last
    assert ": error: " in last and sum(": error: " in line for line in lines) == 1, err[-500:]
    assert all(c.isprintable() for c in last), repr(last)
    return last


def test_one_line_escapes_controls_cuts_long_values_and_keeps_printable_text():
    for control in CONTROLS:
        shown = one_line(f"key 'a{control}b': unknown")
        assert shown.isprintable(), repr(shown)
        assert shown.startswith("key 'a") and shown.endswith("b': unknown")
    assert one_line("é → ± ≤ “quoted” 日本") == "é → ± ≤ “quoted” 日本"  # printable text stays as it is
    assert one_line("two\nlines\t and  spaces") == "two lines and spaces"  # line breaks of a message
    assert one_line("ok\rerror") == "ok\\rerror"  # (a carriage return would overwrite the line)
    assert one_line("\x1b") == "\\x1b" and one_line("\u202e") == "\\u202e" and one_line("\udcff") == "\\udcff"
    long = one_line("-o " + "x" * 120_000 + ": File name too long")
    assert len(long) < WORD_LIMIT + 40 and long.startswith("-o xxx") and long.endswith("x: File name too long")
    head, rest = long.split("…(")
    left, tail = rest.split(" characters left out)…")
    assert len(head) + int(left.replace(",", "")) + len(tail) == len("-o ") + 120_000 + len(": File name too long")
    many = one_line(" ".join(["word"] * 10_000))
    assert len(many) <= LINE_LIMIT and many.startswith("word word")


@pytest.mark.parametrize("control", CONTROLS)
def test_a_path_with_control_characters_is_echoed_escaped(control, tmp_path, capsys):
    path = str(tmp_path / f"bad{control}name.conllu")
    for argv in (["stats", path], ["train", "--config", path], ["parse", path, "-o", str(tmp_path / "out.conllu")],
                 ["reproduce", "supervised-head", "--toy", "--src-trees", f"train={path}", "-o", str(tmp_path / "s")]):
        line = _error(argv, capsys)
        assert f"bad{ascii(control)[1:-1]}name" in line, (control, line)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("control", CONTROLS)
def test_an_override_or_a_yaml_key_with_control_characters_is_echoed_escaped(control, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"task: mt\ndata: {tmp_path / 'data'}\ntrain: {{max_steps: 1}}\n")
    shown = ascii(control)[1:-1]
    line = _error(["train", "--config", str(config), f"model.x{control}y=1"], capsys)
    assert f"model.x{shown}y" in line, line
    escaped = control.encode("unicode_escape").decode("ascii")  # as YAML writes it in double quotes
    for where in ("model: {{{key}: 1}}", "{key}: 1"):
        config.write_text(f"task: mt\ndata: {tmp_path / 'data'}\ntrain: {{max_steps: 1}}\n"
                          + where.format(key=f'"x{escaped}y\\0"') + "\n")
        line = _error(["train", "--config", str(config)], capsys)
        # (a line break to str.split may be shown as the space the config's message makes it)
        assert f"x{shown}y\\x00" in line or control.isspace() and "x y\\x00" in line, line


def test_an_argument_of_120000_characters_is_a_short_line_with_status_2(tmp_path, capsys):
    long = "x" * 120_000
    for argv in (["train", "--config", long], ["stats", long], ["reproduce", "structured-attention", "--toy", "-o",
                                                                 str(tmp_path / long[:200]) + long],
                 ["reproduce", "mt-syntax", "--arms", long], ["reproduce", "mt-syntax", "--pairs", long],
                 ["train", "--config", long, f"model.{long}=1"], [f"bogus-{long}"], ["--threads", long, "train"],
                 ["train", "--config", "x.yaml", f"--{long}"]):
        line = _error(argv, capsys)
        assert len(line) < 1000, (argv[:2], len(line))
    assert not any(p.name.startswith("xxx") for p in tmp_path.iterdir())


def test_an_unknown_structs_backend_is_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SYNATTN_STRUCTS_BACKEND", "garbage\x1b[2J")
    line = _error(["train", "--config", str(tmp_path / "missing.yaml")], capsys)
    assert "SYNATTN_STRUCTS_BACKEND='garbage\\x1b[2J': not a structs backend; choose one of auto, torch" in line
    for command in (["evaluate", "--run", str(tmp_path)],
                    ["reproduce", "structured-attention", "--toy", "-o", str(tmp_path / "study")]):
        assert "SYNATTN_STRUCTS_BACKEND=" in _error(command, capsys)
    monkeypatch.setenv("SYNATTN_STRUCTS_BACKEND", " Torch ")  # a name the backend takes: the command goes on
    assert "--config" in _error(["train", "--config", str(tmp_path / "missing.yaml")], capsys)


@pytest.mark.parametrize("value, traceback", [("1", True), ("true", True), ("YES", True), (" on ", True),
                                              ("", False), ("0", False), ("false", False), ("No", False),
                                              ("off", False)])
def test_synattn_debug_is_on_or_off(value, traceback, tmp_path, capsys, monkeypatch):
    from synattn.errors import UsageError

    monkeypatch.setenv("SYNATTN_DEBUG", value)
    argv = ["train", "--config", str(tmp_path / "missing.yaml")]
    if traceback:
        with pytest.raises(UsageError, match="no such file"):
            main(argv)
    else:
        assert "--config" in _error(argv, capsys)


@pytest.mark.parametrize("value", ["2", "debug", "maybe", "1 1", "\x1b[2J"])
def test_any_other_synattn_debug_is_a_one_line_error(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SYNATTN_DEBUG", value)
    line = _error(["train", "--config", str(tmp_path / "missing.yaml")], capsys)
    assert line.startswith("synattn train: error: SYNATTN_DEBUG=") and "expected 1, true, yes or on" in line
    assert "--config" not in line  # refused before the command reads anything


@pytest.mark.parametrize("argv", [["--threads", "100000", "train", "--config", "x.yaml"],
                                  ["--threads", "0", "stats", "x.conllu"],
                                  ["demo", "--threads", str(10**9)],
                                  ["reproduce", "structured-attention", "--toy", "--threads", "1025"]])
def test_an_enormous_thread_count_is_refused_by_name(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (were it not refused, its outputs would go there)
    line = _error(argv, capsys)
    assert ("argument --threads: must be at most 1,024 (threads" in line
            or "argument --threads: must be a positive integer, got 0" in line), line
