"""The syntax inputs of a batch, :mod:`synattn.syntax.inputs` (this path is kept for code written
against it)."""

from synattn.syntax.inputs import IGNORE_INDEX, SyntaxInputs, require_syntax  # noqa: F401
