"""Shared fixtures for the C/OpenMP kernel library tests (helpers live in omp_helpers.py)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.backends import openmp_lib


@pytest.fixture(scope="session")
def lib():
    """The wrapper module with the library loaded (a missing build fails loudly, never skips)."""
    openmp_lib.load()
    return openmp_lib


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
