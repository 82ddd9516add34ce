"""scripts/demo_arms.py, the measurement behind the demo's choice of syntax model: its candidates are
valid experiments at the demo's size, and the demo trains the candidate that was chosen."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from synattn.cli import demo_cmd
from synattn.reproduce.study import Budget
from synattn.train.experiment import ExperimentConfig

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_arms.py"


def _script():
    spec = importlib.util.spec_from_file_location("demo_arms", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_candidates_are_the_demos_model_with_one_syntax_method_each(tmp_path):
    arms = _script().CANDIDATES
    assert set(arms) == {"traversal", "supervised-enc-w0.1"}
    configs = {}
    for name, model in arms.items():
        exp = ExperimentConfig.from_dict(demo_cmd._experiment(model, Budget(updates=10), 1, tmp_path))
        configs[name] = exp.model_without_data()  # the section read and checked, defaults filled in
        # everything but the encoder's syntax settings is the demo's baseline
        assert {k: v for k, v in model.items() if k != "encoder"} == \
               {k: v for k, v in demo_cmd.BASELINE.items() if k != "encoder"}
    assert arms["supervised-enc-w0.1"]["encoder"]["supervised_head"] == {"layer": 0, "head": 0, "weight": 0.1}
    assert configs["traversal"].encoder.relations == ["traversal", "sequential"]
    assert configs["supervised-enc-w0.1"].encoder.supervised_head is not None


def test_the_demo_trains_the_measured_choice_and_says_why():
    assert list(demo_cmd.MODELS) == ["baseline", "traversal"]
    assert demo_cmd.MODELS["traversal"] == _script().CANDIDATES["traversal"]
    assert demo_cmd.MODELS["baseline"] == demo_cmd.BASELINE
    assert "tree-traversal" in demo_cmd.CHOSEN and "docs/results.md" in demo_cmd.CHOSEN
