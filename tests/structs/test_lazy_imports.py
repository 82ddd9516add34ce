"""The packages ``synattn.structs`` and ``synattn.structs.dependency`` load each public class on
first use (PEP 562): every name they export resolves, and one class does not pull in the others."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import synattn.structs
import synattn.structs.dependency


@pytest.mark.parametrize("package", [synattn.structs, synattn.structs.dependency])
def test_every_exported_name_has_a_home_and_resolves(package):
    assert sorted(package.__all__) == sorted(package._HOMES)
    for name in package.__all__:
        value = getattr(package, name)
        assert getattr(value, "__name__", name) == name or name == "NEG", name


def test_one_class_loads_its_own_modules_only():
    code = ("import sys, json; from synattn.structs import DependencyCRF; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('synattn'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    assert "synattn.structs.dependency.eisner" in loaded
    for other in ("synattn.structs.dependency.matrix_tree", "synattn.structs.chain.crf", "synattn.structs.cky.crf",
                  "synattn.structs.sequence.autoregressive", "synattn.structs.alignment.crf"):
        assert other not in loaded, other
    assert len(loaded) < 30, loaded  # 21 today; every structure's modules were 47
