import os
import random

import pytest
import torch

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA/ROCm GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)


@pytest.fixture
def seed(request):
    """A fresh seed per test, printed so a failure can be replayed (FUSEDGEMM_TEST_SEED=...)."""
    s = int(os.environ.get("FUSEDGEMM_TEST_SEED", random.randrange(2**31)))
    print(f"seed={s}")
    torch.manual_seed(s)
    return s
