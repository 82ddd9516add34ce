"""The syntax a batch carries, computed once from the stored trees: the registry of syntax fields
(:mod:`synattn.syntax.fields`: each field's shape, padding and batch builder) and
:class:`SyntaxInputs`, the fields of one batch side (:mod:`synattn.syntax.inputs`). Data batching
builds them, attention features and the Hugging Face adapter read them.
"""

from synattn.syntax.fields import (IGNORE_INDEX, SyntaxField, TreeBatch, build_field, is_field, register_field,
                                   syntax_field, syntax_fields, unregister_field)
from synattn.syntax.inputs import SyntaxInputs, require_syntax

__all__ = ["IGNORE_INDEX", "SyntaxField", "SyntaxInputs", "TreeBatch", "build_field", "is_field", "register_field",
           "require_syntax", "syntax_field", "syntax_fields", "unregister_field"]
