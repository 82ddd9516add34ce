"""``generate()`` for ``transformers`` models with synattn features.

``model.generate`` checks its keyword arguments against the model's ``forward`` and runs an
encoder-decoder's encoder on its own, so the ``syntax_*`` inputs cannot travel as generation
arguments. :func:`use_syntax` makes them *standing* syntax for every forward (and every encoder
call) made inside a ``with`` block; :func:`generate` wraps ``model.generate`` in that block.

What applies at generation time:

- encoder-side features of an encoder-decoder (relation biases, specialized heads, a supervised
  head, the constituent prior, syntactic attention) read the source's syntax once, when the
  source is encoded;
- decoder-side features run at every step; relation biases there need the labels of the whole
  sequence (prompt and generated tokens, ``[batch_size, M, M]`` with ``M`` ≥ the final length),
  known in advance only when a given target is scored; a supervised head needs no syntax
  (``head_targets`` only adds its loss);
- with the key/value cache (``use_cache=True``, the default) each step attends from the new
  position only; features that need the whole sequence at every step (specialized heads, BET(SF)
  reweighting) do not work with it: :func:`generate` turns the cache off with a warning, a plain
  ``model.generate`` raises a one-line error.

Beam search and ``num_return_sequences`` repeat each example's syntax for its beams.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from synattn.hf.attention import cacheable
from synattn.hf.model import HFModel, syntax_from_inputs


def _holder(model: HFModel) -> Any:
    holder = model._modules.get("synattn")
    if holder is None:
        raise ValueError(f"{type(model).__name__} has no synattn features (synattn.hf.attach)")
    return holder


@contextmanager
def use_syntax(model: HFModel, **syntax: Any) -> Iterator[None]:
    """Within the block, every forward of ``model`` that is given no syntax uses ``syntax``.

    Args:
        model: a model with synattn features.
        **syntax: ``syntax_<field>`` (the syntax of ``input_ids``) and ``decoder_syntax_<field>``
            tensors, as for the model's ``forward``.
    """
    holder = _holder(model)
    standing = syntax_from_inputs(dict(syntax), holder.input_side)
    previous, holder.standing_syntax = holder.standing_syntax, standing
    try:
        yield
    finally:
        holder.standing_syntax = previous


def uncacheable_sites(model: HFModel) -> list[str]:
    """``"<site>: <feature>"`` of the self-attention features that cannot decode with a cache."""
    out = []
    for key, site in _holder(model).sites().items():
        if site.site.side != "decoder":
            continue
        out += [f"{key}: {type(f).__name__}" for f in site.features if not cacheable(f)]
    return out


def generate(model: HFModel, *args: Any, **kwargs: Any) -> Any:
    """``model.generate(*args, **kwargs)`` with the ``syntax_*`` / ``decoder_syntax_*`` entries of
    ``kwargs`` as standing syntax (:func:`use_syntax`).

    When a decoder feature cannot decode with a key/value cache, ``use_cache`` is set to False
    with a warning (an explicit ``use_cache=True`` is an error).

    Example:
        >>> import torch, transformers, synattn.hf as sh
        >>> model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        ...     vocab_size=20, n_embd=16, n_layer=1, n_head=2)).eval()
        >>> _ = sh.attach(model, [{"feature": "supervised_head", "side": "decoder"}])
        >>> sh.generate(model, torch.tensor([[1, 2]]), max_new_tokens=3, do_sample=False,
        ...             pad_token_id=0).shape
        torch.Size([1, 5])
    """
    syntax = {k: kwargs.pop(k) for k in list(kwargs)
              if k.startswith("syntax_") or k.startswith("decoder_syntax_")}
    blocked = uncacheable_sites(model)
    if blocked:
        if kwargs.get("use_cache") is True:
            raise ValueError(f"use_cache=True, but {', '.join(blocked)} cannot decode with a "
                             "key/value cache; leave use_cache unset or False")
        if kwargs.get("use_cache") is None:
            warnings.warn(f"{', '.join(blocked)} cannot decode with a key/value cache: "
                          "generating with use_cache=False", stacklevel=2)
            kwargs["use_cache"] = False
    with use_syntax(model, **syntax):
        return model.generate(*args, **kwargs)
