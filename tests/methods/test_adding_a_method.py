"""docs/adding_a_method.md, followed: the page's own blocks add its example method,
``tree_distance_buckets``, to a copy of synattn (the method's file, the three lines of
``StackConfig``, its config) and nothing else; a fresh interpreter on that copy builds a model from
the config, runs a forward and backward pass and checks the method's effect and gradient. The files
the page tells a user to touch are counted, each is one the worked example ``tree_distance_bias``
touched, and the docs a method needs a row in have one for every registered method."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import yaml

from synattn.hf import FEATURES
from synattn.methods import methods
from tests.helpers.paths import ROOT

DOC = ROOT / "docs" / "adding_a_method.md"
FILES_A_METHOD_TOUCHES = 8
"""The files the page's table lists: a file added to the procedure is added there, and here."""
PLACEHOLDER, EXAMPLE, TOY = "your_method", "tree_distance_bias", "tree_distance_buckets"

_ROW = re.compile(r"^\| (\d+) \| `([^`]+)` \|", re.M)
_BLOCK = re.compile(r"^<!--(?: long:)? (?P<path>[\w.]+/[\w/.]+): [^\n]*-->\n```(?P<lang>\w+)\n(?P<code>.*?)^```",
                    re.M | re.S)


def listed() -> list[str]:
    """The files of the page's table, in its order (checking that the rows are numbered 1, 2, …)."""
    rows = _ROW.findall(DOC.read_text(encoding="utf-8"))
    assert [int(number) for number, _ in rows] == list(range(1, len(rows) + 1)), rows
    return [path for _, path in rows]


def file_blocks() -> dict[str, tuple[str, str]]:
    """The page's blocks that give a file of the example (``<!-- PATH: … -->`` before the fence):
    path → (language, code)."""
    found = [(m["path"], m["lang"], m["code"]) for m in _BLOCK.finditer(DOC.read_text(encoding="utf-8"))]
    assert len({path for path, _, _ in found}) == len(found), "two blocks give one file"
    return {path: (lang, code) for path, lang, code in found}


def apply_diff(text: str, diff: str, where: str) -> str:
    """``text`` with the ``+`` lines of ``diff`` put where its hunks (split by ``@@``) put them: each
    hunk's context lines (`` ``) must stand, one after the other, exactly once in ``text``."""
    for hunk in re.split(r"^@@[^\n]*\n", diff, flags=re.M):
        lines = hunk.splitlines()
        assert all(line[:1] in (" ", "+") for line in lines), f"{where}: not a context or '+' line in {lines}"
        old = "".join(line[1:] + "\n" for line in lines if line.startswith(" "))
        new = "".join(line[1:] + "\n" for line in lines)
        assert old and ("\n" + text).count("\n" + old) == 1, f"{where}: the page's context {old!r} is not once in it"
        text = ("\n" + text).replace("\n" + old, "\n" + new)[1:]
    return text


def test_the_page_lists_the_files_a_method_touches():
    files = listed()
    assert len(files) == len(set(files)) == FILES_A_METHOD_TOUCHES, files
    stated = re.search(r"The files a new method touches, \*\*(\d+) files\*\*, (\d+) of them code", DOC.read_text())
    assert stated, "the page no longer states how many files a method touches"
    assert int(stated[1]) == len(files) and int(stated[2]) == sum(path.startswith("synattn/") for path in files)


def test_the_worked_example_touched_every_listed_file():
    for path in listed():
        file = ROOT / path.replace(PLACEHOLDER, EXAMPLE)
        assert file.is_file(), f"{path}: the worked example has no {file.relative_to(ROOT)}"
        if PLACEHOLDER not in path:  # a shared file: the example's lines or rows are in it
            assert EXAMPLE in file.read_text(encoding="utf-8"), f"{path} does not name {EXAMPLE}"


def test_every_method_has_its_keys_in_attention_md_and_its_row_in_hf_md():
    attention = (ROOT / "docs" / "attention.md").read_text(encoding="utf-8")
    hf = (ROOT / "docs" / "hf.md").read_text(encoding="utf-8")
    for m in methods():
        assert re.search(rf"`{m.name}[`:]|^\s*{m.name}:", attention, re.M), f"docs/attention.md: no keys of {m.name}"
    assert [name for name in FEATURES if f"\n| `{name}` |" not in hf] == [], "docs/hf.md: features without a row"


SCRIPT = r"""
import dataclasses, sys, typing
from pathlib import Path

import numpy as np
import torch

import synattn
assert Path(synattn.__file__).parent == Path.cwd() / "synattn", synattn.__file__  # the copy

from synattn.data.batching import collate_examples
from synattn.hf import FEATURES
from synattn.methods import methods
from synattn.methods.tree_distance_buckets import TreeDistanceBuckets
from synattn.models import StackConfig
from synattn.models.config import undeclared
from synattn.train.experiment import ExperimentConfig
from synattn.train.tasks import TranslationTask, syntax_request_for

# the three lines declare the registry's settings, in its order; synattn.hf offers the method
assert undeclared() == []
hints = typing.get_type_hints(StackConfig)
declared = [(f.name, hints[f.name]) for f in dataclasses.fields(StackConfig)][1:]
assert declared == [(o.name, o.type) for m in methods() for o in m.options()], declared
assert FEATURES["tree_distance_buckets"].defaults == {"buckets": 4}

SMALL = ["model.d_model=16", "model.ffn_dim=32", "model.dropout=0.0", "model.encoder.layers=2",
         "model.decoder.layers=1"]

def build(*more):
    exp = ExperimentConfig.from_yaml(sys.argv[1], overrides=SMALL + list(more))
    torch.manual_seed(0)
    return exp.kind.model(exp.model_config({"vocab_size": {"src": 24, "tgt": 24}}, {})).eval()

model, plain = build(), build("model.encoder.tree_distance_buckets=null")
features = [f for layer in model.encoder.layers for f in layer.self_attn.features]
assert [type(f) for f in features] == [TreeDistanceBuckets] * 2, features
assert features[0].weight.shape == (model.config.heads, 4)
request = syntax_request_for(model.config)
assert request.src == {"tree_dist"} and syntax_request_for(plain.config).src == set()

rng = np.random.default_rng(0)
def tree(n):  # word 1 the root, every other word hangs from an earlier one
    return np.array([0] + [int(rng.integers(1, i + 1)) for i in range(1, n)])
examples = [{"src_ids": rng.integers(4, 24, n).astype(np.int32), "src_heads": tree(n),
             "tgt_ids": rng.integers(4, 24, n + 1).astype(np.int32)} for n in (5, 7, 3)]
batch = collate_examples(examples, request)
assert batch.src_syntax.tree_dist is not None

def logits(m, syntax=True):
    return m(batch.src, batch.tgt_in, src_syntax=batch.src_syntax if syntax else None).logits

def copy_into_plain():
    unexpected = plain.load_state_dict(model.state_dict(), strict=False).unexpected_keys
    assert sorted(unexpected) == ["encoder.layers.0.self_attn.features.0.weight",
                                  "encoder.layers.1.self_attn.features.0.weight"], unexpected

# zero weights: plain attention
copy_into_plain()
torch.testing.assert_close(logits(model), logits(plain, syntax=False))
# its gradient flows: every bucket of every head, in both layers
loss, _ = TranslationTask(0.1, request).loss(model, batch)
loss.backward()
for f in features:
    assert f.weight.grad is not None and (f.weight.grad != 0).all(), f.weight.grad
# one step: the logits move away from plain attention's, and only the method's weights make the difference
torch.optim.SGD(model.parameters(), lr=1.0).step()
copy_into_plain()
assert (logits(model) - logits(plain, syntax=False)).abs().max() > 1e-3
with torch.no_grad():
    for f in features:
        f.weight.zero_()
torch.testing.assert_close(logits(model), logits(plain, syntax=False))
print("ok")
"""


def test_the_page_s_method_added_to_a_copy_of_synattn_trains(tmp_path):
    blocks = file_blocks()
    method_file, stack_config = f"synattn/methods/{TOY}.py", "synattn/models/config.py"
    config_file = f"configs/{TOY}.yaml"
    code_files = {path.replace(PLACEHOLDER, TOY) for path in listed() if path.startswith("synattn/")}
    assert set(blocks) == code_files | {config_file} and code_files == {method_file, stack_config}, sorted(blocks)
    assert [lang for lang, _ in map(blocks.get, (method_file, stack_config, config_file))] == ["python", "diff", "yaml"]

    shutil.copytree(ROOT / "synattn", tmp_path / "synattn", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / method_file).write_text(blocks[method_file][1], encoding="utf-8")
    original = (ROOT / stack_config).read_text(encoding="utf-8")
    changed = apply_diff(original, blocks[stack_config][1], stack_config)
    assert len(changed.splitlines()) - len(original.splitlines()) == 3, "the page promises three lines"
    (tmp_path / stack_config).write_text(changed, encoding="utf-8")

    config = yaml.safe_load((ROOT / "configs" / "baseline.yaml").read_text(encoding="utf-8"))
    change = yaml.safe_load(blocks[config_file][1])
    for key, value in change["model"].items():  # the page's stacks replace the baseline's
        config["model"][key] = value
    (tmp_path / "configs").mkdir()
    (tmp_path / config_file).write_text(yaml.safe_dump(config), encoding="utf-8")

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / config_file)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
