"""Self-contained runs (synattn/runs.py): the fingerprint of a damaged dataset folder."""

from __future__ import annotations

import json

import pytest

from synattn.errors import InputError
from synattn.runs import fingerprint


@pytest.mark.parametrize("spm", ["missing", None, ["spm.src.model"], {"src": 3}])
def test_fingerprint_of_a_manifest_without_an_spm_mapping_is_one_line_naming_it(tmp_path, spm):
    manifest = {"key": "k", "splits": {}, "vocab_size": {"src": 40}}
    if spm != "missing":
        manifest["spm"] = spm
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"manifest\.json.*no 'spm' mapping of sentencepiece files") as caught:
        fingerprint(tmp_path)
    assert "\n" not in str(caught.value)


def test_fingerprint_hashes_the_vocabulary_files(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"key": "k", "spm": {"src": "spm.src.model"}}))
    (tmp_path / "spm.src.model").write_bytes(b"model")
    found = fingerprint(tmp_path)
    assert found["key"] == "k" and set(found["files"]) == {"spm.src.model", "labels.json"}
    assert found["files"]["spm.src.model"] is not None and found["files"]["labels.json"] is None
