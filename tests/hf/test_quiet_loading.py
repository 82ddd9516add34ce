"""What loading and saving print: the synattn weights a pretrained checkpoint lacks are one line of
synattn's, not a transformers load report; anything else missing is still reported; no progress bars."""

import logging

import pytest

import synattn.hf as sh
from tests.helpers.hf_models import bert, pretrained_folder

transformers = pytest.importorskip("transformers")

HEAD = [{"feature": "supervised_head", "layers": [1], "head": 1}]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def transformers_log():
    """What transformers logs (its logger does not propagate to the root's handlers)."""
    handler = _Records()
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    yield handler.messages
    root.removeHandler(handler)


def _config_with(folder, features):
    config = transformers.AutoConfig.from_pretrained(folder)
    config.synattn = features
    return config


def test_the_added_weights_are_one_synattn_line_not_a_load_report(tmp_path, caplog, capfd, transformers_log):
    base = pretrained_folder(tmp_path / "base")
    caplog.set_level(logging.INFO, logger="synattn.hf.model")
    model, info = sh.from_pretrained(transformers.AutoModel, str(base), config=_config_with(base, HEAD),
                                     output_loading_info=True)
    assert not any("LOAD REPORT" in m for m in transformers_log), transformers_log
    lines = [r.getMessage() for r in caplog.records if r.name == "synattn.hf.model"]
    assert lines == ["added 2 tensors of synattn's features, not in the checkpoint, newly initialised: "
                     "SupervisedHead at encoder_1"]
    # the caller who asks still gets every missing key, synattn's included
    assert info["missing_keys"] == {n for n, _ in model.named_parameters() if n.startswith("synattn.")}
    assert len(info["missing_keys"]) == 2
    assert "Loading weights" not in capfd.readouterr().err


def test_other_missing_weights_are_still_reported(tmp_path, caplog, transformers_log):
    base = pretrained_folder(tmp_path / "base")
    caplog.set_level(logging.INFO, logger="synattn.hf.model")
    sh.from_pretrained(transformers.AutoModelForTokenClassification, str(base), config=_config_with(base, HEAD))
    reports = [m for m in transformers_log if "LOAD REPORT" in m]
    assert len(reports) == 1 and "classifier.weight" in reports[0] and "MISSING" in reports[0]
    assert "synattn." not in reports[0]
    assert any("SupervisedHead at encoder_1" in r.getMessage() for r in caplog.records)


def test_a_saved_model_with_its_features_loads_without_a_line(tmp_path, caplog, transformers_log):
    model = bert()
    sh.attach(model, HEAD)
    model.save_pretrained(tmp_path / "saved")
    caplog.set_level(logging.INFO, logger="synattn.hf.model")
    sh.from_pretrained(type(model), str(tmp_path / "saved"))
    assert not [r for r in caplog.records if r.name == "synattn.hf.model"]
    assert not any("LOAD REPORT" in m for m in transformers_log)


def test_checkpoints_of_training_draw_no_shard_bar(tmp_path, capfd):
    from synattn.hf.task import save_checkpoint_weights
    from synattn.train.checkpoint import _write_weights

    model = bert()
    sh.attach(model, HEAD)
    model.save_pretrained(tmp_path / "plain")  # transformers' own bar, as a control
    drawn = capfd.readouterr().err
    if "Writing model shards" not in drawn:
        pytest.skip("transformers' progress bars are off in this environment")
    save_checkpoint_weights(model, tmp_path / "quiet")
    _write_weights(model, tmp_path / "checkpoint")  # a run's checkpoint: the library's own save
    assert "Writing model shards" not in capfd.readouterr().err
    assert (tmp_path / "checkpoint" / "model.safetensors").is_file()
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()  # the setting is restored
