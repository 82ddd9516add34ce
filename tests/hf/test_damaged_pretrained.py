"""A damaged pretrained model folder (``load_pretrained``, ``reproduce pretrained-syntax --model``)
is refused with one error naming the file and the cause, before transformers reads it: nothing
is re-initialised at random, no traceback (synattn.hf.validate)."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

transformers = pytest.importorskip("transformers")

from synattn.cli.main import main  # noqa: E402
from synattn.errors import InputError  # noqa: E402
from synattn.hf.pretrained import load_pretrained  # noqa: E402
from synattn.hf.validate import check_model_folder  # noqa: E402
from tests.helpers.hf_models import CONLLU, pretrained_folder  # noqa: E402


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return pretrained_folder(tmp_path_factory.mktemp("good-bert"))  # hidden 32, 4 heads, 2 layers, ffn 64


@pytest.fixture
def model(good, tmp_path):
    """A fresh copy of the good folder, for a test to damage."""
    return shutil.copytree(good, tmp_path / "model")


def _config(folder, **changes):
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _tokenizer(folder, edit):
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep if keep >= 0 else len(data) + keep])


def _float64(folder):
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    save_file({k: v.double() if v.is_floating_point() else v for k, v in weights.items()},
              folder / "model.safetensors")


def _other_shapes(folder):
    """Weights of a model with another feed-forward width than config.json says."""
    config = transformers.BertConfig.from_pretrained(folder)
    config.intermediate_size = 48
    transformers.BertModel(config).save_pretrained(folder)
    _config(folder, intermediate_size=64)


def _pickle_only(folder):
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")


DAMAGES = {
    "weights of other shapes": (_other_shapes, "model.safetensors", "has shape [48, 32], but config.json implies"),
    "a weight missing": (lambda f: _drop_weight(f, "encoder.layer.1.output.dense.weight"), "model.safetensors",
                         "lacks the weight encoder.layer.1.output.dense.weight"),
    "float64 weights": (_float64, "model.safetensors", "is stored as F64"),
    "no tokenizer.json": (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json", "is missing"),
    "garbage tokenizer.json": (lambda f: (f / "tokenizer.json").write_bytes(b"\xff\xfe\x00garbage"),
                               "tokenizer.json", "not valid UTF-8"),
    "truncated tokenizer.json": (lambda f: _truncate(f / "tokenizer.json", 200), "tokenizer.json", "invalid JSON"),
    "empty WordPiece vocabulary": (lambda f: _tokenizer(f, lambda d: d["model"].update(vocab={})), "tokenizer.json",
                                   "has an empty WordPiece vocabulary"),
    "a tokenizer of a larger vocabulary": (lambda f: _tokenizer(f, lambda d: d["model"]["vocab"].update(zzz=999)),
                                           "tokenizer.json", "has token id 999, past the model's vocab_size"),
    "truncated model.safetensors": (lambda f: _truncate(f / "model.safetensors", -100), "model.safetensors",
                                    "truncated or damaged"),
    "a header of a huge length": (lambda f: _header_length(f, 2 ** 62), "model.safetensors",
                                  "not a safetensors file (its header declares 4.61 EB in a file of"),
    "an empty model.safetensors": (lambda f: _truncate(f / "model.safetensors", 0), "model.safetensors",
                                   "not a safetensors file (a file of 0 B has no header"),
    "heads not dividing the hidden size": (lambda f: _config(f, num_attention_heads=5), "config.json",
                                           "num_attention_heads=5 does not divide hidden_size=32"),
    "negative layers": (lambda f: _config(f, num_hidden_layers=-1), "config.json",
                        "num_hidden_layers=-1 is out of range"),
    "an enormous hidden size": (lambda f: _config(f, hidden_size=2 ** 40), "config.json",
                                "hidden_size=1099511627776 is out"),
    "an enormous vocabulary": (lambda f: _config(f, vocab_size=10 ** 12), "config.json",
                               "vocab_size=1000000000000 is out"),
    "enormous positions": (lambda f: _config(f, max_position_embeddings=10 ** 9), "config.json",
                           "max_position_embeddings=1000000000 is out"),
    "a layer count as text": (lambda f: _config(f, num_hidden_layers="2"), "config.json",
                              "num_hidden_layers must be an integer"),
    "garbage config.json": (lambda f: (f / "config.json").write_text("{not json"), "config.json", "invalid JSON"),
    "no model.safetensors": (lambda f: (f / "model.safetensors").unlink(), "", "holds no model.safetensors"),
    "a pickle pytorch_model.bin only": (_pickle_only, "", "pytorch_model.bin is a pickle, which synattn does not load"),
    "model.safetensors a FIFO": (lambda f: _fifo(f / "model.safetensors"), "model.safetensors",
                                 "is not a regular file"),
}


def _drop_weight(folder, name):
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    del weights[name]
    save_file(weights, folder / "model.safetensors")


def _header_length(folder, length):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", length) + data[8:])


def _fifo(path):
    path.unlink()
    os.mkfifo(path)


def test_the_good_folder_loads(good):
    """(The refusals below can fail: the same checks pass the undamaged folder, which loads.)"""
    check_model_folder(good)
    model, tokenizer = load_pretrained(str(good))
    assert model.config.hidden_size == 32 and tokenizer("the cat")["input_ids"]


@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_damaged_folder_is_refused_naming_the_file(case, model):
    damage, name, needle = DAMAGES[case]
    damage(model)
    with pytest.raises(InputError) as caught:
        load_pretrained(str(model))
    assert caught.value.path == str(model / name if name else model), str(caught.value)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("case", ["weights of other shapes", "no model.safetensors", "a pickle pytorch_model.bin only",
                                  "garbage tokenizer.json", "an enormous hidden size"])
def test_reproduce_refuses_a_damaged_model_folder_in_one_line(case, model, tmp_path, capsys):
    damage, name, needle = DAMAGES[case]
    damage(model)
    for split, reps in (("train", 3), ("dev", 1)):
        (tmp_path / f"{split}.conllu").write_text(CONLLU * reps, encoding="utf-8")
    out = tmp_path / "out"
    capsys.readouterr()
    code = main(["reproduce", "pretrained-syntax", "--toy", "--model", str(model), "-o", str(out),
                 "--src-trees", f"train={tmp_path / 'train.conllu'}", f"dev={tmp_path / 'dev.conllu'}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("synattn reproduce: error: ") and needle in lines[0]
    assert str(model / name if name else model) in lines[0]
    assert not out.exists()
