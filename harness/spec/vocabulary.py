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

FLOAT_DTYPES: tuple[str, ...] = get_args(FloatDType)  # the order reports and probes list dtypes in
NUMERIC_DTYPES: tuple[str, ...] = FLOAT_DTYPES + get_args(IntDType)
DTYPES: tuple[str, ...] = get_args(DType)
TIERS: tuple[str, ...] = get_args(Tier)


def tiers_running(tier: str) -> tuple[str, ...]:
    """The tiers whose runs include a case of this tier (a smoke case runs in smoke, ci and nightly)."""
    return TIERS[TIERS.index(tier):]
