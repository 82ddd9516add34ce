"""The syntax-field registry, :mod:`synattn.syntax.fields` (this path is kept for methods written
against it; docs/adding_a_method.md)."""

from synattn.syntax.fields import (  # noqa: F401
    IGNORE_INDEX,
    KINDS,
    SyntaxField,
    TreeBatch,
    build_field,
    is_field,
    register_field,
    syntax_field,
    syntax_fields,
    unregister_field,
)
