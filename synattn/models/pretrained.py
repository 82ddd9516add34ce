"""``save_pretrained`` / ``from_pretrained``: ``config.json`` + ``model.safetensors``, never pickle.

The directory holds the model's config (with its ``model_type``) as JSON and its weights as
safetensors (tied weights are stored once). Files are written to a temporary name and renamed
into place, so an interrupted save never leaves a half-written file under the final name.

``from_pretrained`` returns the model in evaluation mode (call ``.train()`` to fine-tune it), on
the ``device`` and in the ``dtype`` asked for; it also takes a run directory of ``synattn train``
(its ``best`` checkpoint, else its ``last``).

Example:
    >>> model.save_pretrained("runs/demo/model")          # doctest: +SKIP
    >>> same = EncoderDecoderTransformer.from_pretrained("runs/demo/model")  # doctest: +SKIP
    >>> best = PretrainedModel.from_pretrained("runs/demo", device="cuda")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import ClassVar, TypeVar, cast

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from synattn.checkpoints import resolve_checkpoint
from synattn.errors import InputError
from synattn.io import atomic_write, remove_path
from synattn.models.config import ModelConfig
from synattn.weights_file import check_against

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

M = TypeVar("M", bound="PretrainedModel")

MODEL_TYPES: dict[str, type[PretrainedModel]] = {}
"""Model classes by ``model_type``, filled as the classes are defined."""


class PretrainedModel(nn.Module):
    """Base class of the models: a config, and saving/loading in the pretrained layout."""

    config_class: ClassVar[type[ModelConfig]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        MODEL_TYPES[cls.config_class.model_type] = cls

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, "
                            f"got {type(config).__name__}")
        config.validate()
        self.config = config

    def save_pretrained(self, directory: str | Path) -> None:
        """Writes ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        payload = {"model_type": self.config_class.model_type, **self.config.to_dict()}
        with atomic_write(directory / CONFIG_NAME) as f:
            f.write(json.dumps(payload, indent=2) + "\n")
        tmp = directory / (WEIGHTS_NAME + ".tmp")
        remove_path(tmp)  # of a killed save (a link there is removed, never written through)
        try:
            save_model(self, str(tmp))
            os.replace(tmp, directory / WEIGHTS_NAME)
        except BaseException:
            with contextlib.suppress(OSError):  # a full disk leaves no half-written weights behind
                remove_path(tmp)
            raise

    @classmethod
    def from_pretrained(cls: type[M], directory: str | Path, *, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None) -> M:
        """Builds the model from ``directory``'s config and loads its weights (strictly).

        Args:
            directory: a ``save_pretrained`` directory (a checkpoint directory is one), or a run
                directory of ``synattn train`` (its ``best`` checkpoint, else its ``last``).
            device, dtype: where and in which floating-point type the model goes (default: CPU,
                the stored type).

        Returns:
            The model, in evaluation mode. Called on ``PretrainedModel`` itself, it builds
            whichever model the config names.

        Raises:
            InputError: naming the file when a file is missing or does not fit.
        """
        directory = Path(directory)
        if not (directory / CONFIG_NAME).exists() and (directory / "checkpoints").is_dir():
            directory = resolve_checkpoint(directory, "best") or resolve_checkpoint(directory, "last") or directory
        config_path, weights_path = directory / CONFIG_NAME, directory / WEIGHTS_NAME
        for path in (config_path, weights_path):
            if not path.is_file():
                cause = "not a regular file" if path.exists() else "file not found"
                raise InputError(f"{cause} (expected a save_pretrained directory)", str(path))
        try:
            data = json.loads(config_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise InputError(f"invalid JSON: {error.msg}", str(config_path), error.lineno) from None
        except UnicodeDecodeError as error:
            raise InputError(f"not valid UTF-8 (byte {error.start})", str(config_path)) from None
        if not isinstance(data, dict):
            raise InputError(f"expected a JSON object of the model's config, got a {type(data).__name__}",
                             str(config_path))
        model_type = data.pop("model_type", None)
        target = MODEL_TYPES.get(model_type) if cls is PretrainedModel else cls
        if target is None or target.config_class.model_type != model_type:
            expected = ", ".join(MODEL_TYPES) if cls is PretrainedModel else cls.config_class.model_type
            raise InputError(f"model_type is {model_type!r}, expected {expected}", str(config_path))
        try:
            config = target.config_class.from_dict(data)
        except ValueError as error:
            raise InputError(str(error), str(config_path)) from None
        model = target(config)
        check_against(weights_path, model, CONFIG_NAME)  # shapes and dtypes, before anything is read
        try:
            load_model(model, str(weights_path), strict=True)
        except RuntimeError as error:
            raise InputError(f"weights do not fit the config: {mismatch_summary(error)}",
                             str(weights_path)) from None
        except SafetensorError as error:  # another file under the name (a pickle), or a damaged one
            raise InputError(f"not a safetensors file ({' '.join(str(error).split())[:200]})",
                             str(weights_path)) from None
        if device is not None or dtype is not None:
            model.to(device=device, dtype=dtype)
        return cast(M, model.eval())  # (cls itself, or for PretrainedModel the class of model_type)


def mismatch_summary(error: BaseException) -> str:
    """The first problem of a (long, multi-line) state-dict loading error, and how many there are."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    problems = [line for line in lines if line.lower().startswith(("size mismatch", "missing key", "unexpected key"))]
    if not problems:
        return " ".join(lines)[:300]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0].rstrip(".") + more + "; was the model built from another config than the checkpoint's?"
