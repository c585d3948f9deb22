"""Shared fixtures for the C/OpenMP kernel library tests (helpers live in omp_helpers.py)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.backends import openmp_lib

# Every ISA level this CPU can run and the build has: an AVX-512 machine tests three, an AVX2 one two.
ISA_LEVELS = openmp_lib.available_isa_levels() or ["missing build"]


@pytest.fixture(params=ISA_LEVELS)
def lib(request):
    """The wrapper module with the library of one ISA level loaded, once per level the machine runs
    (a missing build fails loudly, never skips)."""
    openmp_lib.use(request.param if request.param in openmp_lib.ISA_LEVELS else None)
    openmp_lib.load()
    yield openmp_lib
    openmp_lib.use(None)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
