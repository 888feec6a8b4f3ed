import numpy as np
import pytest

from remat.config import config


@pytest.fixture
def x64():
    """Run a test with 64-bit types enabled."""
    with config.override("jax_enable_x64", True):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)
