import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    yield
