"""Where the attention modules of a Hugging Face model are, by architecture family.

Each pattern matches the dotted name of a module that calls the attention function of
``config._attn_implementation`` (``transformers.AttentionInterface``) and says which side it is:
encoder self-attention, decoder self-attention or cross-attention. A module name may carry any
prefix (``bert.``, ``model.``, ``transformer.``), so task heads (``...ForTokenClassification``,
``...LMHeadModel``, ``...ForConditionalGeneration``) are covered too.

Covered and tested: BERT and RoBERTa (and models with BERT's layout), GPT-2, BART and T5.
"""

from __future__ import annotations

import re

from torch import nn

from synattn.hf.features import Site

# (regex on the module name, side); the first group is the layer index
PATTERNS: tuple[tuple[str, str], ...] = (
    # BERT / RoBERTa / ELECTRA layout
    (r"(?:^|\.)encoder\.layer\.(\d+)\.attention\.self$", "self"),
    (r"(?:^|\.)encoder\.layer\.(\d+)\.crossattention\.self$", "cross"),
    # GPT-2
    (r"(?:^|\.)h\.(\d+)\.attn$", "decoder"),
    (r"(?:^|\.)h\.(\d+)\.crossattention$", "cross"),
    # BART / mBART / Marian layout
    (r"(?:^|\.)encoder\.layers\.(\d+)\.self_attn$", "encoder"),
    (r"(?:^|\.)decoder\.layers\.(\d+)\.self_attn$", "decoder"),
    (r"(?:^|\.)decoder\.layers\.(\d+)\.encoder_attn$", "cross"),
    # T5
    (r"(?:^|\.)encoder\.block\.(\d+)\.layer\.0\.SelfAttention$", "encoder"),
    (r"(?:^|\.)decoder\.block\.(\d+)\.layer\.0\.SelfAttention$", "decoder"),
    (r"(?:^|\.)decoder\.block\.(\d+)\.layer\.1\.EncDecAttention$", "cross"),
)


def _heads(module: nn.Module) -> tuple[int, int]:
    """(H, d_k) of an attention module, from the attribute names of the supported families."""
    for heads_attr, dim_attr in (("num_attention_heads", "attention_head_size"),
                                 ("num_heads", "head_dim"), ("n_heads", "key_value_proj_dim")):
        heads, dim = getattr(module, heads_attr, None), getattr(module, dim_attr, None)
        if isinstance(heads, int) and isinstance(dim, int):
            return heads, dim
    raise ValueError(f"cannot read the number of heads and head size of {type(module).__name__}")


def find_sites(model: nn.Module) -> list[tuple[str, nn.Module, Site]]:
    """Returns ``(module name, module, Site)`` of every attention module of ``model``.

    Raises:
        ValueError: the model has no attention module of a supported layout.
    """
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or config is None or not hasattr(config, "hidden_size"):
        raise ValueError(f"{type(model).__name__}: synattn features go into a transformers model "
                         "(BERT/RoBERTa, GPT-2, BART, T5: a module with a config of hidden_size); "
                         "this is none")
    d_model = int(config.hidden_size)
    found = []
    for name, module in model.named_modules():
        for pattern, side in PATTERNS:
            match = re.search(pattern, name)
            if match is None:
                continue
            if side == "self":  # BERT layout: a decoder when the config says so
                side = "decoder" if getattr(config, "is_decoder", False) else "encoder"
            heads, head_dim = _heads(module)
            found.append((name, module, Site(side, int(match.group(1)), heads, head_dim, d_model)))
            break
    if not found:
        raise ValueError(f"{type(model).__name__}: no attention module of a supported layout "
                         "(BERT/RoBERTa, GPT-2, BART, T5) was found")
    return found
