"""Dtype names used in specs, their NumPy (ml_dtypes for bfloat16) and ONNX counterparts, and ULP distance."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from harness.spec.vocabulary import FLOAT_DTYPES

NUMPY = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
ONNX = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
}
FLOATS = FLOAT_DTYPES  # harness.spec.vocabulary, the one list
_BITS = {"float64": np.uint64, "float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}


def name_of(dtype) -> str:
    dtype = np.dtype(dtype)
    for name, dt in NUMPY.items():
        if dt == dtype:
            return name
    raise ValueError(f"unsupported dtype {dtype}")


def finfo(name: str):
    return ml_dtypes.finfo(NUMPY[name])


def special_value(name_or_value, dtype: str) -> float:
    """A planted value: a float, or a name relative to the dtype ('max', 'tiny', 'subnormal', ...)."""
    if not isinstance(name_or_value, str):
        return float(name_or_value)
    sign = -1.0 if name_or_value.startswith("-") else 1.0
    base = name_or_value.lstrip("-")
    info = finfo(dtype)
    table = {"nan": np.nan, "inf": np.inf, "0.0": 0.0, "max": float(info.max),
             "tiny": float(info.smallest_normal), "subnormal": float(info.smallest_subnormal)}
    return sign * table[base]


def ulp_distance(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """Number of representable `dtype` values between actual and expected (both cast to dtype), as float64."""
    if dtype not in _BITS:
        return np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bits = _BITS[dtype]
    width = np.dtype(bits).itemsize * 8
    sign_bit = np.uint64(1 << (width - 1))

    def split(x):  # (magnitude bits, is negative), as uint64 so that float64 stays exact
        with np.errstate(over="ignore", invalid="ignore"):  # out-of-range values round to +/-Inf, as stored
            raw = np.ascontiguousarray(x.astype(NUMPY[dtype])).view(bits).astype(np.uint64)
        return raw & (sign_bit - np.uint64(1)), (raw & sign_bit) != 0

    (ma, na), (mb, nb) = split(actual), split(expected)
    same_side = np.maximum(ma, mb) - np.minimum(ma, mb)
    across_zero = ma + mb  # both magnitudes are below 2^(width-1): no overflow
    return np.where(na == nb, same_side, across_zero).astype(np.float64)
