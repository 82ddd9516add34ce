"""Suite-wide test settings."""

import os

import pytest
import torch
from hypothesis import settings

# Without a GPU, the Triton kernels of synattn.structs run on CPU tensors in Triton's interpreter
# (it must be on before they are first imported; a GPU machine runs them compiled).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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

@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """A dataset without a dev split (so runs never validate), a translation run with a
    constituent encoder of 2 layers, a masked-LM run, and a second dataset of another vocabulary."""
    from synattn.data.prepare import PrepareConfig, prepare
    from tests.helpers.cli import EN, FR, train_tiny

    tmp = tmp_path_factory.mktemp("inputs")
    for split, reps in (("train", 3), ("test", 1)):
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")
    prefixes = {"train": str(tmp / "train"), "test": str(tmp / "test")}
    prepare(PrepareConfig(out=str(tmp / "data"), prefixes=prefixes, parse_source=False, vocab_size=50))
    prepare(PrepareConfig(out=str(tmp / "other"), prefixes=prefixes, parse_source=False, vocab_size=45))
    train_tiny(tmp, "mt", "mt", {"encoder": {"layers": 2, "constituent": True}, "decoder": {"layers": 1}})
    train_tiny(tmp, "mlm", "mlm", {"encoder": {"layers": 1}})
    (tmp / "in.txt").write_text("dogs bark at night\nthe cat sat\n")
    return tmp
