"""synattn features inside Hugging Face ``transformers`` models (``pip install synattn[hf]``).

- :func:`attach` adds features (tree relations, specialized heads, a supervised head, the
  constituent prior, the BET(SG) pointer loss, segmentation / syntactic attention) to a loaded
  model through ``transformers``' attention-function interface; the model's weight names do not
  change, and a model whose features are all off computes exactly what it computed before.
- :class:`SyntaxEncoder` and :class:`SyntaxCollator` turn dependency trees and a fast tokenizer's
  ``word_ids()`` into the ``syntax_*`` inputs of a batch.
- :func:`generate` / :func:`use_syntax` generate with the features (standing syntax, cache rules).
- :func:`from_pretrained` loads a model saved with ``save_pretrained``, features included.

See docs/hf.md.
"""

from synattn.hf.align import SyntaxCollator, SyntaxEncoder, piece_heads, tokenize_trees
from synattn.hf.attention import IMPLEMENTATION, SynattnCall, synattn_attention
from synattn.hf.features import FEATURES, normalize_specs
from synattn.hf.generation import generate, use_syntax
from synattn.hf.model import SYNTAX_FIELDS, SynattnModule, attach, from_pretrained

__all__ = [
    "FEATURES", "IMPLEMENTATION", "SYNTAX_FIELDS", "SynattnCall", "SynattnModule",
    "SyntaxCollator", "SyntaxEncoder", "attach", "from_pretrained", "generate", "normalize_specs",
    "piece_heads", "synattn_attention", "tokenize_trees", "use_syntax",
]
