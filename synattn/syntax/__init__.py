"""The syntax a batch carries, computed once from the stored trees: the registry of syntax fields
(:mod:`synattn.syntax.fields`: each field's shape, padding, batch builder and the setting its labels
depend on), :class:`SyntaxRequest`, the fields a model asks for and their settings
(:mod:`synattn.syntax.request`), and :class:`SyntaxInputs`, the fields of one batch side
(:mod:`synattn.syntax.inputs`). Data batching builds them, attention features and the Hugging Face
adapter read them.
"""

from synattn.syntax.fields import (
    IGNORE_INDEX,
    SyntaxField,
    TreeBatch,
    build_field,
    declared_settings,
    is_field,
    register_field,
    syntax_field,
    syntax_fields,
    unregister_field,
)
from synattn.syntax.inputs import SyntaxInputs, require_syntax
from synattn.syntax.request import SyntaxRequest

__all__ = ["IGNORE_INDEX", "SyntaxField", "SyntaxInputs", "SyntaxRequest", "TreeBatch", "build_field",
           "declared_settings", "is_field", "register_field", "require_syntax", "syntax_field", "syntax_fields",
           "unregister_field"]
