"""Forward of the reductions whose gradient ORT's builder writes from standard ops (ReduceSum, ReduceMean,
ReduceL2, ReduceLogSumExp, GlobalAveragePool): onnx's reference evaluator in float64.

Two forms: `axes` as an int64 input (ReduceSum from opset 13, the others from 18, with noop_with_empty_axes)
and `axes` as an attribute (ReduceMean, ReduceL2, ReduceLogSumExp at opsets 13-17, what torch's opset-17
exports write). The harness hands the axes input over as float64: it is cast back to int64 here.

onnx 1.17's evaluator reduces every axis when the axes *input* is empty and noop_with_empty_axes = 1 (its
`is_axes_empty` tests for None only) in every reduction but ReduceSum; ONNX says such a node is the identity,
as it says for an omitted axes input, which the evaluator gets right: an empty axes input is passed as omitted.
"""
from __future__ import annotations

import numpy as np

from reference._onnx import run


def _axes_input(axes, noop_with_empty_axes):
    if axes is None:
        return None
    axes = np.asarray(axes).astype(np.int64).reshape(-1)
    return None if axes.size == 0 and noop_with_empty_axes else axes


def _reduce(op, opset, data, axes, keepdims, noop_with_empty_axes):
    return run(op, opset, {"data": data, "axes": _axes_input(axes, noop_with_empty_axes)},
               keepdims=keepdims, noop_with_empty_axes=noop_with_empty_axes)


def reduce_sum(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceSum", 13, data, axes, keepdims, noop_with_empty_axes)


def reduce_mean(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceMean", 18, data, axes, keepdims, noop_with_empty_axes)


def reduce_l2(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceL2", 18, data, axes, keepdims, noop_with_empty_axes)


def reduce_log_sum_exp(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    if np.ndim(data) == 0:  # onnx 1.17's evaluator refuses a 0-d input; log(exp(x)) = x
        return np.array(data, dtype=np.float64)
    return _reduce("ReduceLogSumExp", 18, data, axes, keepdims, noop_with_empty_axes)


def _attr_axes(axes):
    return None if axes is None else [int(a) for a in axes]


def reduce_mean_13(data, *, axes=None, keepdims=1):
    """The attribute form (schema 13), as an opset-17 model holds it."""
    return run("ReduceMean", 17, {"data": data}, axes=_attr_axes(axes), keepdims=keepdims)


def reduce_l2_13(data, *, axes=None, keepdims=1):
    return run("ReduceL2", 17, {"data": data}, axes=_attr_axes(axes), keepdims=keepdims)


def reduce_log_sum_exp_13(data, *, axes=None, keepdims=1):
    if np.ndim(data) == 0:
        return np.array(data, dtype=np.float64)
    return run("ReduceLogSumExp", 17, {"data": data}, axes=_attr_axes(axes), keepdims=keepdims)


def global_average_pool(X):
    return run("GlobalAveragePool", 1, {"X": X})
