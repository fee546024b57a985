import os
from pathlib import Path

import pytest
import torch

# The data sets that cannot be downloaded here live in ../shared/data beside the project.
_SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "TORCHBAYES_DATA" not in os.environ and _SHARED_DATA.is_dir():
    os.environ["TORCHBAYES_DATA"] = str(_SHARED_DATA)


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    yield
