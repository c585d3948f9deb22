"""The words the specs, the runs and the reports share, each defined here once and imported everywhere else
(tests/test_vocabulary.py fails on a module that writes its own list). Standard library only: the CLI reads
these at start-up and the spec model's types are built from them.

The C kernels' dtype enum (csrc/) is the one other copy: C cannot import it.
"""
from __future__ import annotations

from typing import Literal, get_args

FloatDType = Literal["float32", "float64", "float16", "bfloat16"]
IntDType = Literal["int32", "int64"]
DType = Literal[FloatDType, IntDType, "bool"]
Tier = Literal["smoke", "ci", "nightly"]  # each tier runs the ones before it: smoke < ci < nightly
# A case group's tags: thread_split marks shapes chosen to cross the C kernels' work splits (block edges, the size
# where a second thread starts), which tests/openmp/test_omp_threads.py runs at 1-4 threads and every ISA level.
GroupTag = Literal["thread_split"]

FLOAT_DTYPES: tuple[str, ...] = get_args(FloatDType)  # the order reports and probes list dtypes in
NUMERIC_DTYPES: tuple[str, ...] = FLOAT_DTYPES + get_args(IntDType)
DTYPES: tuple[str, ...] = get_args(DType)
TIERS: tuple[str, ...] = get_args(Tier)
GROUP_TAGS: tuple[str, ...] = get_args(GroupTag)
THREAD_SPLIT = "thread_split"


def tiers_running(tier: str) -> tuple[str, ...]:
    """The tiers whose runs include a case of this tier (a smoke case runs in smoke, ci and nightly)."""
    return TIERS[TIERS.index(tier):]
