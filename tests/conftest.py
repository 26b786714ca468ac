import atexit
import os
import random
import shutil
import tempfile

import pytest
import torch

# The session builds into a temporary code-object cache (removed at exit) unless FUSEDGEMM_CACHE_DIR is set
# explicitly (e.g. to reuse builds between runs). Set in os.environ so subprocesses that tests start inherit it --
# pytest-xdist's workers (-n 2) too: they start after this runs in the controller, and share its cache.
if not os.environ.get("FUSEDGEMM_CACHE_DIR"):
    _TEST_CACHE = tempfile.mkdtemp(prefix="fusedgemm-test-cache-")
    os.environ["FUSEDGEMM_CACHE_DIR"] = _TEST_CACHE
    atexit.register(shutil.rmtree, _TEST_CACHE, True)

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
