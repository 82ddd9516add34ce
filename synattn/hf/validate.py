"""Checks of a pretrained model folder before ``transformers`` reads it.

A folder given as a pretrained model (``synattn reproduce pretrained-syntax --model FOLDER``,
:func:`synattn.hf.pretrained.load_pretrained`) is the user's data: :func:`check_model_folder`
refuses a damaged one with an :class:`~synattn.errors.InputError` naming the file and the cause,
before anything is allocated or loaded:

- ``config.json``: a regular file holding a JSON object that ``transformers`` reads; its sizes are
  integers within bounds (:data:`SIZE_BOUNDS`: no config allocates gigabytes, nor more float32
  weights than the machine's memory), ``num_attention_heads`` divides ``hidden_size``;
- ``tokenizer.json``: present, a regular file, JSON that the ``tokenizers`` library reads, with a
  non-empty vocabulary whose ids fit the model's ``vocab_size``;
- ``model.safetensors`` (or the shards of ``model.safetensors.index.json``): present (a pickle
  ``pytorch_model.bin`` alone is refused: loading a pickle can run code), a whole safetensors file
  (its header's length within the file), and every weight of the model the config describes
  stored with that shape and a floating dtype the model computes in (float32, float16, bfloat16).
  A missing or mis-shaped weight is refused, never re-initialised at random by ``transformers``.

The safetensors header is read with the ``safetensors`` library, which does not load the tensors;
the expected weights come from the model built on PyTorch's ``meta`` device (no memory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from synattn.errors import InputError
from synattn.io import open_regular
from synattn.limits import format_bytes, memory_bytes
from synattn.weights_file import check_tensor, read_header

SIZE_BOUNDS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 65_536),
    "num_attention_heads": (1, 4_096),
    "num_hidden_layers": (0, 1_000),
    "intermediate_size": (1, 1_048_576),
    "vocab_size": (1, 10_000_000),
    "max_position_embeddings": (1, 1_048_576),
    "type_vocab_size": (0, 1_000),
    "num_labels": (1, 100_000),
}
"""``config.json`` sizes checked when present: (least, most)."""

MAX_JSON_BYTES = 512 * 1024 * 1024
"""The largest ``config.json`` / ``tokenizer.json`` read (a vocabulary of millions fits)."""


def _read_json(path: Path, what: str) -> Any:
    """The JSON of the regular file ``path`` (``what`` names it in errors)."""
    try:
        fd = open_regular(path, os.O_RDONLY, what=what)
    except FileNotFoundError:
        raise InputError(f"is missing: a pretrained model folder holds its {what} here", str(path)) from None
    except OSError as err:
        raise InputError(f"cannot be read: {err.strerror}", str(path)) from None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_size > MAX_JSON_BYTES:
            raise InputError(f"is larger than {format_bytes(MAX_JSON_BYTES)}: not a {what}", str(path))
        raw = f.read()
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise InputError(f"is not a {what}: not valid UTF-8 (byte {err.start})", str(path)) from None
    except (json.JSONDecodeError, RecursionError) as err:
        detail = f"{err.msg} at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else "nested too deeply"
        raise InputError(f"is not a {what}: invalid JSON ({detail}; is it truncated?)", str(path)) from None


def check_config(folder: Path) -> Any:
    """The ``transformers`` config of ``folder`` after the checks of ``config.json`` (module docstring)."""
    path = folder / "config.json"
    data = _read_json(path, "model config")
    if not isinstance(data, dict):
        raise InputError(f"is not a model config: expected a JSON object, got {type(data).__name__}", str(path))
    for key, (low, high) in SIZE_BOUNDS.items():
        if key not in data:
            continue
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(f"{key} must be an integer, got {json.dumps(value)[:40]}", str(path))
        if not low <= value <= high:
            raise InputError(f"{key}={value} is out of range (a model config's {key} is {low} to {high})", str(path))
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and hidden % heads:
        raise InputError(f"num_attention_heads={heads} does not divide hidden_size={hidden}", str(path))
    _check_memory(data, path)
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(folder))
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 (a foreign or damaged config: whatever transformers raises)
        raise InputError(f"is not a config transformers reads ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:200]})", str(path)) from None


def _check_memory(data: dict, path: Path) -> None:
    """Refuse sizes whose float32 weights (embeddings and layers, a lower bound) exceed the memory."""
    hidden = data.get("hidden_size", 0)
    ffn = data.get("intermediate_size", 4 * hidden)
    rows = sum(data.get(k, 0) for k in ("vocab_size", "max_position_embeddings", "type_vocab_size"))
    params = rows * hidden + data.get("num_hidden_layers", 0) * (4 * hidden * hidden + 2 * hidden * ffn)
    if isinstance(params, int) and 4 * params > memory_bytes():
        raise InputError(f"describes a model of at least {params:.3g} parameters, whose float32 weights need "
                         f"{format_bytes(4 * params)}, more than this machine's {format_bytes(memory_bytes())}",
                         str(path))


def check_tokenizer(folder: Path, vocab_size: int | None) -> None:
    """Refuses a missing, unreadable or empty ``tokenizer.json``, or one with ids past ``vocab_size``."""
    path = folder / "tokenizer.json"
    data = _read_json(path, "tokenizer (tokenizer.json, the fast tokenizer)")
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise InputError("is not a tokenizer: no tokenizer model in it", str(path))
    vocab = model.get("vocab")
    if not vocab:
        raise InputError(f"has an empty {model.get('type', 'tokenizer')} vocabulary", str(path))
    try:
        from tokenizers import Tokenizer

        Tokenizer.from_str(json.dumps(data))
    except Exception as err:  # noqa: BLE001 (whatever the tokenizers library refuses it with)
        raise InputError(f"is not a tokenizer the tokenizers library reads "
                         f"({' '.join(str(err).split())[:200]})", str(path)) from None
    ids = list(vocab.values()) if isinstance(vocab, dict) else range(len(vocab))
    added = [t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)]
    top = max([i for i in (*ids, *added) if isinstance(i, int)], default=-1)
    if vocab_size is not None and top >= vocab_size:
        raise InputError(f"has token id {top}, past the model's vocab_size={vocab_size} (config.json): "
                         "not this model's tokenizer", str(path))


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of ``folder`` (one, or the shards its index names)."""
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists() or single.is_symlink():
        return [single]
    if index.exists():
        data = _read_json(index, "weight index")
        shards = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(shards, dict) or not shards:
            raise InputError("is not a weight index: no weight_map of tensor names to files", str(index))
        names = sorted({str(v) for v in shards.values()})
        if any(Path(n).name != n for n in names):
            raise InputError("names a weight file outside its folder", str(index))
        return [folder / n for n in names]
    if (folder / "pytorch_model.bin").exists():
        raise InputError("pytorch_model.bin is a pickle, which synattn does not load (unpickling can run "
                         "code); give the weights as model.safetensors", str(folder))
    raise InputError("holds no model.safetensors (the model's weights)", str(folder))


def check_weights(folder: Path, config: Any) -> None:
    """Refuses weights missing from the safetensors files of ``folder``, or stored with another
    shape or dtype than the model that ``config`` describes has."""
    import torch
    from transformers import AutoModel

    stored: dict[str, tuple[tuple[int, ...], str]] = {}
    where: dict[str, Path] = {}
    files = weight_files(folder)
    for path in files:
        header = read_header(path)
        stored.update(header)
        where.update(dict.fromkeys(header, path))
    try:
        with torch.device("meta"):
            model = AutoModel.from_config(config)
    except Exception as err:  # noqa: BLE001 (a config transformers reads but cannot build)
        raise InputError(f"describes no model transformers builds ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:200]})", str(folder / "config.json")) from None
    prefix = getattr(model, "base_model_prefix", "") or ""
    missing = []
    for name, tensor in model.state_dict().items():
        key = next((k for k in (name, f"{prefix}.{name}") if k in stored), None)
        if key is None:
            if "pooler" not in name:  # (a checkpoint of a masked LM has no pooler, which nothing here uses)
                missing.append(name)
            continue
        check_tensor(where[key], key, stored[key], tuple(tensor.shape), tensor.is_floating_point(), "config.json")
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise InputError(f"lacks the weight {missing[0]}{more} of the model config.json describes "
                         "(transformers would initialise it at random)", str(files[0]))


def check_model_folder(folder: str | Path) -> None:
    """All the checks of the module docstring; raises :class:`InputError` naming the file."""
    folder = Path(folder)
    config = check_config(folder)
    check_tokenizer(folder, getattr(config, "vocab_size", None))
    check_weights(folder, config)
