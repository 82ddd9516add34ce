"""Each default of a setting is defined once and imported everywhere else (docs/architecture.md).

The tree-distance clip ``max_distance`` and the traversal clip ``max_traversal`` are defined in
:mod:`synattn.trees.relations` (the first step that needs them); the methods' other defaults in
their own module. The values are pinned here: the configs and results written so far rely on them.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from synattn.hf.align import SyntaxEncoder
from synattn.methods.constituent import CONSTITUENT_DIAGONAL, ConstituentConfig
from synattn.methods.cross_attention import MAX_SEGMENT, CrossAttentionConfig
from synattn.methods.relations import MAX_RELATIVE_POSITION, RelationsConfig
from synattn.models.config import StackConfig
from synattn.syntax.fields import declared_settings, syntax_field
from synattn.syntax.request import SyntaxRequest
from synattn.trees import relations
from synattn.trees._reference import reference_labels
from synattn.trees.stats import relation_statistics, treebank_statistics

PACKAGE = Path(__file__).resolve().parents[2] / "synattn"

SETTINGS = {"max_distance", "max_traversal", "max_relative_position", "cross_attention_max_segment",
            "constituent_diagonal"}
"""The settings whose defaults must be named constants, never literals."""

OPTIONS = {"--max-distance", "--max-traversal"}
"""Command-line options of the same settings (their ``default=``)."""

LITERAL_LEFT: dict[str, str] = {}
"""Files still writing a literal default, → why (only ever shrinks: an entry without a literal fails)."""


def parameter_default(function, name: str):
    return inspect.signature(function).parameters[name].default


def test_the_defaults_keep_their_values():
    assert (relations.MAX_DISTANCE, relations.MAX_TRAVERSAL) == (8, 4)
    assert (MAX_RELATIVE_POSITION, MAX_SEGMENT, CONSTITUENT_DIAGONAL) == (16, 4, 1.0)


def test_every_tree_distance_and_traversal_default_is_the_constant():
    distance = {
        "distance_vocab": parameter_default(relations.distance_vocab, "max_distance"),
        "batch_distance_labels": parameter_default(relations.batch_distance_labels, "max_distance"),
        "distance_labels": parameter_default(relations.distance_labels, "max_distance"),
        "batch_relation_labels": parameter_default(relations.batch_relation_labels, "max_distance"),
        "relation_statistics": parameter_default(relation_statistics, "max_distance"),
        "treebank_statistics": parameter_default(treebank_statistics, "max_distance"),
        "reference_labels": parameter_default(reference_labels, "max_distance"),
        "SyntaxEncoder": parameter_default(SyntaxEncoder, "max_distance"),
        "tree_dist field": syntax_field("tree_dist").default,
        "declared_settings": declared_settings()["max_distance"],
        "SyntaxRequest": SyntaxRequest().max_distance,
        "RelationsConfig": RelationsConfig().max_distance,
        "StackConfig": StackConfig().max_distance,
    }
    assert distance == dict.fromkeys(distance, relations.MAX_DISTANCE)
    traversal = {
        "traversal_vocab": parameter_default(relations.traversal_vocab, "max_traversal"),
        "batch_traversal_labels": parameter_default(relations.batch_traversal_labels, "max_traversal"),
        "traversal_labels": parameter_default(relations.traversal_labels, "max_traversal"),
        "batch_relation_labels": parameter_default(relations.batch_relation_labels, "max_traversal"),
        "relation_statistics": parameter_default(relation_statistics, "max_traversal"),
        "treebank_statistics": parameter_default(treebank_statistics, "max_traversal"),
        "reference_labels": parameter_default(reference_labels, "max_traversal"),
        "SyntaxEncoder": parameter_default(SyntaxEncoder, "max_traversal"),
        "traversal field": syntax_field("traversal").default,
        "SyntaxRequest": SyntaxRequest().max_traversal,
        "RelationsConfig": RelationsConfig().max_traversal,
        "StackConfig": StackConfig().max_traversal,
    }
    assert traversal == dict.fromkeys(traversal, relations.MAX_TRAVERSAL)


def test_the_methods_other_defaults_are_their_constants():
    stack = StackConfig()
    assert RelationsConfig().max_relative_position == stack.max_relative_position == MAX_RELATIVE_POSITION
    assert CrossAttentionConfig().cross_attention_max_segment == stack.cross_attention_max_segment == MAX_SEGMENT
    assert ConstituentConfig().constituent_diagonal == stack.constituent_diagonal == CONSTITUENT_DIAGONAL
    assert {f.name for f in dataclasses.fields(StackConfig)} >= SETTINGS


def literal_defaults(tree: ast.Module) -> list[int]:
    """The lines of ``tree`` giving one of :data:`SETTINGS` a literal default: a parameter default,
    a class attribute, a syntax field's ``default=`` beside ``setting=``, an option's ``default=``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            found += [d.lineno for a, d in pairs if a.arg in SETTINGS and isinstance(d, ast.Constant)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id in SETTINGS and isinstance(node.value, ast.Constant):
                found.append(node.lineno)
        elif isinstance(node, ast.Call):
            keywords = {k.arg: k.value for k in node.keywords}
            setting = keywords.get("setting")
            named = (isinstance(setting, ast.Constant) and setting.value in SETTINGS) or any(
                isinstance(a, ast.Constant) and a.value in OPTIONS for a in node.args)
            if named and isinstance(keywords.get("default"), ast.Constant):
                found.append(node.lineno)
    return found


def test_no_module_writes_a_literal_default():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = literal_defaults(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if lines:
            found[str(path.relative_to(PACKAGE.parent))] = lines
    unexpected = {name: lines for name, lines in found.items() if name not in LITERAL_LEFT}
    assert not unexpected, "literal defaults (import the constant instead): " + ", ".join(
        f"{name}:{line}" for name, lines in unexpected.items() for line in lines)
    assert not set(LITERAL_LEFT) - set(found), f"remove from LITERAL_LEFT: {sorted(set(LITERAL_LEFT) - set(found))}"


def test_the_literal_check_sees_each_form():
    source = ("def f(x, max_distance=8, *, max_traversal=4): pass\n"
              "class C:\n    max_relative_position: int = 16\n"
              "register_field(SyntaxField('t', 'pair', 0, None, setting='max_distance', default=8))\n"
              "p.add_argument('--max-traversal', type=int, default=4)\n"
              "def g(max_distance=MAX_DISTANCE): pass\nclass D:\n    max_distance: int = MAX_DISTANCE\n")
    assert sorted(literal_defaults(ast.parse(source))) == [1, 1, 3, 4, 5]
