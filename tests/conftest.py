"""Suite-wide test settings."""

import os

import pytest
import torch
import yaml
from hypothesis import settings

# CI draws the same hypothesis examples on every run (a red CI then means a change broke
# something); local runs keep exploring new examples.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def single_thread():
    """Runs every test on one intra-op thread: the tensors of the tests are tiny, a second thread
    only adds scheduling stalls (and avoids a batched-LU quirk of some 2-thread CPU builds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------------
# tiny trained runs shared by the CLI input and fuzz tests

EN = ["the cat sat on the mat", "dogs bark at night", "a bird sings in the old tree",
      "we walked home slowly", "the children played outside all day", "rain fell on the roof"]
FR = ["le chat était assis", "les chiens aboient la nuit", "un oiseau chante dans le vieil arbre",
      "nous sommes rentrés lentement", "les enfants ont joué dehors", "la pluie tombait sur le toit"]
MODEL = {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0}
TRAIN = {"max_tokens": 200, "max_steps": 2, "warmup_updates": 1, "progress_bar": False, "tensorboard": False}


def _train_tiny(tmp, name, task, model):
    from synattn.cli.main import main

    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"task": task, "data": str(tmp / "data"), "model": {**MODEL, **model},
                                      "train": TRAIN, "eval": {"beam": 2, "bleu_sentences": 0}}))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp / name)]) == 0
    return tmp / name


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """A dataset without a dev split (so runs never validate), a translation run with a
    constituent encoder of 2 layers, a masked-LM run, and a second dataset of another vocabulary."""
    from synattn.data.prepare import PrepareConfig, prepare

    tmp = tmp_path_factory.mktemp("inputs")
    for split, reps in (("train", 3), ("test", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    prefixes = {"train": str(tmp / "train"), "test": str(tmp / "test")}
    prepare(PrepareConfig(out=str(tmp / "data"), prefixes=prefixes, parse_source=False, vocab_size=50))
    prepare(PrepareConfig(out=str(tmp / "other"), prefixes=prefixes, parse_source=False, vocab_size=45))
    _train_tiny(tmp, "mt", "mt", {"encoder": {"layers": 2, "constituent": True}, "decoder": {"layers": 1}})
    _train_tiny(tmp, "mlm", "mlm", {"encoder": {"layers": 1}})
    (tmp / "in.txt").write_text("dogs bark at night\nthe cat sat\n")
    return tmp
