"""The package's layering, read from its imports (docs/architecture.md, "Import order").

Every ``import`` of synattn by synattn -- at module level and inside functions -- is an arrow from
one module to another. Each module belongs to one step of the pipeline (its folder; a few top-level
modules belong to a step by their idea, the small shared ones to none). An arrow may go to an
earlier step, to its own step or to a shared module; an arrow to a later step, or a circle of
modules importing each other, fails the test naming ``file:line``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "synattn"

STEPS = ("trees", "syntax", "data", "structs", "attention", "methods", "models", "train", "generate", "hf",
         "evaluate", "viz", "reproduce", "cli")
"""The steps in pipeline order: a module imports only from its own step and the ones before it."""

SHARED = {"synattn", "synattn.errors", "synattn.io", "synattn.progress", "synattn.locks", "synattn.limits",
          "synattn.folders", "synattn.checkpoints", "synattn.config_io", "synattn.config_bounds",
          "synattn.weights_file", "synattn.option_types"}
"""Small top-level modules every step may import (they import only each other)."""

TOP_LEVEL_STEPS = {"synattn.runs": "train"}
"""Top-level modules that belong to a step: a run's own files (the experiment YAML is
``synattn/train/experiment.py``)."""

ALLOWED: dict[tuple[str, str], str] = {}
"""Known back-arrows still to remove, ``(importer, imported)`` → why it is still there (none now).
Only ever shrinks: a new back-arrow fails the test."""

ALLOWED_CYCLES: dict[frozenset[str], str] = {}
"""Known circles still to break, the modules of each → why it is still there (only ever shrinks)."""

CYCLES_INSIDE: dict[str, str] = {}
"""Packages whose inner circles are not checked yet, → why."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


@cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imports(module: str, with_typing: bool = True) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import of synattn in ``module`` (function-local ones too;
    those under ``if TYPE_CHECKING:`` unless ``with_typing`` is false: they run no code, so they make
    no circle, but a type from a later step is still a back-arrow). ``from a import b`` is an arrow
    to ``a.b`` when that is a module, else to ``a``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = parse(path)
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test).endswith("TYPE_CHECKING") for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only and not with_typing:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "synattn"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "synattn":
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.append((child if child in MODULES else target, node.lineno))
    return sorted(set(found), key=lambda item: item[1])


def step(module: str) -> str | None:
    """The step of ``module`` (None for a shared one)."""
    if module in SHARED:
        return None
    if module in TOP_LEVEL_STEPS:
        return TOP_LEVEL_STEPS[module]
    return module.split(".")[1]


def back_arrows() -> list[tuple[str, str, str]]:
    """``(file:line, importer, imported)`` for every import into a later step."""
    found = []
    for module in MODULES:
        own = step(module)
        for target, line in imports(module):
            theirs = step(target)
            if own is None and theirs is not None:
                found.append((f"{MODULES[module].relative_to(ROOT)}:{line}", module, target))
            elif own is not None and theirs is not None and STEPS.index(theirs) > STEPS.index(own):
                found.append((f"{MODULES[module].relative_to(ROOT)}:{line}", module, target))
    return found


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph = {module: sorted({t for t, _ in imports(module, with_typing=False) if t in MODULES and t != module})
             for module in MODULES}
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in graph[node]:
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_every_module_belongs_to_a_step():
    unknown = {module for module in MODULES if step(module) is not None and step(module) not in STEPS}
    assert not unknown, f"modules of no step (add them to STEPS, SHARED or TOP_LEVEL_STEPS): {sorted(unknown)}"


def test_shared_modules_import_only_shared_ones():
    bad = [(where, target) for where, module, target in back_arrows() if step(module) is None]
    assert not bad, "a shared module imports a step: " + "; ".join(f"{w} imports {t}" for w, t in bad)


def test_no_import_runs_back_up_the_pipeline():
    bad = [f"{where}: {module} imports {target} (step {step(target)} comes after {step(module)})"
           for where, module, target in back_arrows() if (module, target) not in ALLOWED]
    assert not bad, f"{len(bad)} imports into a later step:\n" + "\n".join(bad)


def test_the_allowed_back_arrows_still_exist():
    """An allowed entry whose import is gone must leave the list (so the list only shrinks)."""
    present = {(module, target) for _, module, target in back_arrows()}
    assert not set(ALLOWED) - present, f"remove from ALLOWED: {sorted(set(ALLOWED) - present)}"


def test_no_import_cycle():
    found = [component for component in cycles() if frozenset(component) not in ALLOWED_CYCLES
             and not any(all(m.startswith(p + ".") for m in component) for p in CYCLES_INSIDE)]
    lines = []
    for component in found:
        members = set(component)
        lines.append(" -> ".join(component) + "; arrows: " + ", ".join(
            f"{MODULES[m].relative_to(ROOT)}:{line} -> {t}" for m in component for t, line in imports(m)
            if t in members and t != m))
    assert not found, f"{len(found)} import cycles:\n" + "\n".join(lines)


def test_the_allowed_cycles_still_exist():
    gone = set(ALLOWED_CYCLES) - {frozenset(component) for component in cycles()}
    assert not gone, f"remove from ALLOWED_CYCLES: {[sorted(c) for c in gone]}"


def test_docs_give_the_same_order():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    match = re.search(r"Import order[^:]*:\s*((?:`?\w+`?\s*→\s*)+`?\w+`?)", text)
    assert match, "docs/architecture.md has no 'Import order: a → b → …' line"
    assert tuple(s.strip(" `\n") for s in match.group(1).split("→")) == STEPS


def test_the_checker_sees_a_back_arrow_and_a_cycle(tmp_path, monkeypatch):
    """The checks fail on a made-up package with one back-arrow and one circle."""
    pkg = tmp_path / "synattn"
    for name, text in {"__init__.py": "", "trees/__init__.py": "", "cli/__init__.py": "",
                       "trees/a.py": "def f():\n    from synattn.cli import b\n",
                       "cli/b.py": "from synattn.cli.c import x\n",
                       "cli/c.py": "from . import b\nx = 1\n"}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "MODULES", {module_name(p): p for p in sorted(pkg.rglob("*.py"))})
    assert back_arrows() == [("synattn/trees/a.py:2", "synattn.trees.a", "synattn.cli.b")]
    assert cycles() == [["synattn.cli.b", "synattn.cli.c"]]


def private_imports() -> list[str]:
    """``file:line: name from module`` for every private name (``_x``, not a dunder) that a module
    imports from a module of another step: what a step offers the others is public."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("synattn."):
                continue
            source = node.module if node.module in MODULES else node.module.rpartition(".")[0]
            if step(source) == step(module) and step(module) is not None:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} from {node.module}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_step_imports_another_steps_private_names():
    found = private_imports()
    assert not found, "private names imported from another step (make them public where they belong):\n" + \
        "\n".join(found)


NAMES_TRANSFORMERS = {"synattn.train.libraries": "the one table of other libraries, read by the core"}
"""The modules outside ``hf/`` whose code spells the string "transformers", → why."""


def test_only_hf_and_the_library_table_name_transformers():
    """A transformers model is reached through :mod:`synattn.train.libraries` (docstrings aside)."""
    found = []
    for module, path in MODULES.items():
        if module.startswith("synattn.hf") or module in NAMES_TRANSFORMERS:
            continue
        tree = parse(path)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        found += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and re.search(r"\btransformers\b", node.value)]
        found += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, (ast.Import, ast.ImportFrom))
                  and any(name.split(".")[0] == "transformers"
                          for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                       else [node.module or ""]))]
    assert not found, "outside hf/, code names transformers: " + ", ".join(found)


# ------------------------------------------------------------------------------------------------
# the tests' own imports: shared pieces live in tests/helpers/ (tests/README.md)


def is_test_module(name: str) -> bool:
    """A module a test file must not import: a test module (``test_*``) or a ``conftest``, however
    spelled (``test_x``, ``tests.cli.test_x``, ``conftest``)."""
    last = name.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def imports_of_test_modules(tests: Path) -> list[str]:
    """``file:line: module`` for every import, at module level or in a function, of a test module or
    a conftest by a ``.py`` file under ``tests`` (relative imports resolved from the file's folder)."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        package = ".".join(path.relative_to(tests.parent).parent.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{path.relative_to(tests.parent)}:{node.lineno}: {name}" for name in names
                      if is_test_module(name)]
    return found



def test_no_test_module_imports_another():
    found = imports_of_test_modules(ROOT / "tests")
    assert not found, "test modules imported by other files (move what they share to tests/helpers/):\n" + \
        "\n".join(found)


def test_the_test_import_checker_sees_every_spelling(tmp_path):
    """The check fails on made-up tests that import a test module or a conftest in four ways."""
    for name, text in {"tests/__init__.py": "", "tests/helpers/__init__.py": "",
                       "tests/helpers/ok.py": "from tests.helpers import ok\nimport tests.helpers.ok\n",
                       "tests/a/__init__.py": "", "tests/a/test_x.py": "from tests.helpers.ok import f\n",
                       "tests/a/test_y.py": "from test_x import f\ndef g():\n    from . import test_x\n",
                       "tests/b/test_z.py": "import tests.a.test_x\nfrom conftest import EN\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert imports_of_test_modules(tmp_path / "tests") == [
        "tests/a/test_y.py:1: test_x", "tests/a/test_y.py:3: tests.a.test_x",
        "tests/b/test_z.py:1: tests.a.test_x", "tests/b/test_z.py:2: conftest"]


# ------------------------------------------------------------------------------------------------
# file size: no Python file over MAX_LINES lines (split a longer one along a seam of its own)

MAX_LINES = 450
SOURCE_FOLDERS = ("synattn", "benchmarks", "tests", "scripts", "examples")


def python_files(root: Path, folders: tuple[str, ...] = SOURCE_FOLDERS) -> list[Path]:
    """The ``.py`` files under ``folders`` of ``root`` that git tracks or would track (untracked
    but not ignored); without git (an unpacked sdist), every ``.py`` file there."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                                 *folders], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for folder in folders for p in (root / folder).rglob("*.py")
                      if "__pycache__" not in p.parts)
    names = {name for name in listed.decode().split("\0") if name.endswith(".py")}
    return sorted(root / name for name in names if (root / name).is_file())  # (not deleted ones)


def long_files(root: Path, limit: int = MAX_LINES) -> list[str]:
    """``path: lines`` for every file of :func:`python_files` longer than ``limit`` lines."""
    counts = {path: len(path.read_bytes().splitlines()) for path in python_files(root)}
    return [f"{path.relative_to(root)}: {n}" for path, n in counts.items() if n > limit]


def test_no_python_file_is_over_the_line_limit():
    found = long_files(ROOT)
    assert not found, f"files over {MAX_LINES} lines (split each along a seam of its own):\n" + "\n".join(found)


def test_the_line_limit_counts_tracked_and_untracked_files_not_ignored_ones(tmp_path):
    """In a made-up git repository: a tracked and an untracked file over the limit are named, an
    ignored one, a file at the limit and a file outside the folders are not."""
    for name, lines in {"synattn/tracked.py": 6, "tests/new.py": 7, "tests/at_limit.py": 5,
                        "tests/build/ignored.py": 9, "docs/other.py": 9, "tests/notes.txt": 9}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n" * lines)
    (tmp_path / ".gitignore").write_text("build/\n")
    try:
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
        subprocess.run(["git", "add", "synattn/tracked.py"], cwd=tmp_path, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    assert long_files(tmp_path, limit=5) == ["synattn/tracked.py: 6", "tests/new.py: 7"]
