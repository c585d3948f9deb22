"""Forward of the data-movement ops whose gradient ORT's builder writes from standard ops (Reshape, Flatten,
Squeeze, Unsqueeze, Transpose, Expand, Tile): onnx's reference evaluator in float64.

The integer inputs (Reshape's and Expand's shape, Squeeze's and Unsqueeze's axes, Tile's repeats) arrive in
float64 like every reference input and are handed to the evaluator as the int64 tensors the schemas take.
Inputs the op rejects raise (the evaluator's NumPy errors), which the harness reads as "the forward op does
not fit this case"; the validity rules themselves are written out in reference.ops.shape_ops.
"""
from __future__ import annotations

import math

import numpy as np

from reference._onnx import run


def _int64(values):
    return None if values is None else np.asarray(values, dtype=np.float64).astype(np.int64)


def reshape(data, shape, *, allowzero=0):
    return run("Reshape", 14, {"data": data, "shape": _int64(shape)}, allowzero=allowzero)


def flatten(input, *, axis=1):
    """NumPy, not the evaluator: onnx 1.17's Flatten reshapes to (rows, -1), which NumPy refuses for an empty
    input ("cannot reshape array of size 0 into shape (0,newaxis)")."""
    dims = np.shape(input)
    if not -len(dims) <= axis <= len(dims):
        raise ValueError(f"Flatten: axis {axis} is outside [{-len(dims)}, {len(dims)}]")
    axis = axis + len(dims) if axis < 0 else axis
    return np.reshape(input, (math.prod(dims[:axis]), math.prod(dims[axis:])))


def squeeze(data, axes=None):
    return run("Squeeze", 13, {"data": data, "axes": _int64(axes)})


def unsqueeze(data, axes):
    return run("Unsqueeze", 13, {"data": data, "axes": _int64(axes)})


def transpose(data, *, perm=None):
    return run("Transpose", 13, {"data": data}, perm=None if perm is None else [int(p) for p in perm])


def expand(input, shape):
    return run("Expand", 13, {"input": input, "shape": _int64(shape)})


def tile(input, repeats):
    return run("Tile", 13, {"input": input, "repeats": _int64(repeats)})
