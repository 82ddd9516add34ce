"""The registered task kinds (synattn.train.kinds) and the prepared-dataset object
(synattn.data.prepared): what the experiment, training and evaluation code ask of them."""

from __future__ import annotations

import json
import re

import pytest

from synattn.data.prepared import LABELS, MANIFEST, PreparedData
from synattn.models import (
    EncoderDecoderConfig,
    EncoderDecoderTransformer,
    LanguageModelConfig,
    MaskedLM,
    MaskedLMConfig,
    TransformerLM,
)
from synattn.syntax.request import SyntaxRequest
from synattn.train import LanguageModelTask, MaskedLMTask, TranslationTask, task_for
from synattn.train.experiment import TASKS, ExperimentConfig
from synattn.train.kinds import TASK_KINDS, TaskKind, kind_of, register_task, task_kind
from tests.helpers.paths import ROOT

TINY = dict(d_model=16, heads=2, ffn_dim=32)
PACKAGE = ROOT / "synattn"


def test_each_kind_owns_its_classes_and_its_training_task():
    models = {"mt": EncoderDecoderTransformer(EncoderDecoderConfig(src_vocab_size=9, tgt_vocab_size=9, **TINY)),
              "lm": TransformerLM(LanguageModelConfig(vocab_size=9, **TINY)),
              "mlm": MaskedLM(MaskedLMConfig(vocab_size=9, **TINY))}
    tasks = {"mt": TranslationTask, "lm": LanguageModelTask, "mlm": MaskedLMTask}
    assert list(TASK_KINDS) == ["mt", "lm", "mlm"]
    for name, model in models.items():
        kind = task_kind(name)
        assert kind_of(model) is kind_of(model.config) is kind
        assert TASKS[name] == (kind.config, kind.model) and isinstance(model, kind.model)
        assert type(task_for(model)) is tasks[name]
    assert [k.name for k in TASK_KINDS.values() if k.translates] == ["mt"]
    assert [k.name for k in TASK_KINDS.values() if not k.attention_analysis] == ["lm"]


def test_unknown_kinds_are_refused():
    with pytest.raises(KeyError, match="task 'nmt': expected one of mt, lm, mlm"):
        task_kind("nmt")
    with pytest.raises(TypeError, match="no task for int"):
        kind_of(3)
    with pytest.raises(ValueError, match="task 'mt' is registered twice"):
        register_task(TaskKind("mt", EncoderDecoderConfig, EncoderDecoderTransformer, task_for))


def test_the_data_sides_of_parallel_and_monolingual_kinds():
    request = SyntaxRequest(src=frozenset({"tree_dist"}), tgt=frozenset({"hints"}))
    assert task_kind("mt").data_sides(request) == (("src", {"tree_dist"}), ("tgt", {"hints"}))
    assert task_kind("lm").data_sides(request) == (("src", {"tree_dist", "hints"}),)
    assert task_kind("mt").vocab_sizes({"src": 5, "tgt": 7}) == {"src_vocab_size": 5, "tgt_vocab_size": 7}
    assert task_kind("mlm").vocab_sizes({"src": 5}) == {"vocab_size": 5}
    assert ExperimentConfig(task="lm", data="d").kind is task_kind("lm")


def test_no_code_compares_task_names():
    pattern = re.compile(r"""\btask\s*[!=]=\s*["']|["'](mt|lm|mlm)["']\s*[!=]=\s*\w*task""")
    hits = [f"{path.relative_to(PACKAGE)}:{i}" for path in sorted(PACKAGE.rglob("*.py"))
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_prepared_data_reads_the_manifest_and_labels_once(tmp_path):
    assert not PreparedData.is_prepared(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"spm": {"src": "src.model"}, "vocab_size": {"src": 5}}))
    data = PreparedData(tmp_path)
    assert PreparedData.is_prepared(tmp_path) and data.labels == {}
    assert data.manifest["vocab_size"] == {"src": 5}
    assert data.tokenizer_path("src") == tmp_path / "src.model"
    (tmp_path / MANIFEST).write_text("{}")  # read once: later changes are not seen
    assert data.manifest["vocab_size"] == {"src": 5}
    (tmp_path / LABELS).write_text(json.dumps({"src_upos": ["NOUN"]}))
    assert PreparedData(tmp_path).labels == {"src_upos": ["NOUN"]}


def test_another_library_is_found_by_its_section_key_model_class_and_checkpoint(tmp_path, monkeypatch):
    """synattn.train.libraries: the core reaches a transformers model through the hooks its module
    registers; a library that is not installed is a config error saying what to install."""
    from synattn.errors import ConfigError
    from synattn.train import libraries
    from synattn.train.libraries import (
        LIBRARIES,
        LibraryEntry,
        library_of_checkpoint,
        library_of_model,
        library_of_section,
    )

    assert library_of_section({"d_model": 16}) is None
    assert library_of_model(MaskedLM(MaskedLMConfig(vocab_size=9, **TINY))) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mlm"}))
    assert library_of_checkpoint(tmp_path) is None  # synattn's own checkpoint
    transformers = pytest.importorskip("transformers")
    hf = library_of_section({"transformers": "some/folder"})
    assert hf.name == "transformers" and hf.task.__name__ == "HFMaskedLMTask"
    model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=9, hidden_size=8, num_hidden_layers=1,
                                                                 num_attention_heads=2, intermediate_size=8))
    assert library_of_model(model) is hf
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"]}))
    assert library_of_checkpoint(tmp_path) is hf
    monkeypatch.setitem(LIBRARIES, "nolib", LibraryEntry("synattn_no_such_module", "nolib-pkg", "nolib"))
    monkeypatch.setattr(libraries, "_REGISTERED", dict(libraries._REGISTERED))
    with pytest.raises(ConfigError, match=re.escape("model.nolib needs the nolib package (pip install 'nolib-pkg')")):
        library_of_section({"nolib": {}})
