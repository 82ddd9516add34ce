"""Suite-wide test settings."""

import os

import pytest
import torch
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
