"""Suite-wide test settings."""

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    """Runs every test on one intra-op thread: the tensors of the tests are tiny, a second thread
    only adds scheduling stalls (and avoids a batched-LU quirk of some 2-thread CPU builds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
