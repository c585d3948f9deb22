"""Forward of the indexing ops whose gradient ORT's builder writes from other ops (GatherND, ScatterElements,
ScatterND, TopK, Trilu): onnx's reference evaluator in float64, NumPy for TopK, ScatterElements and
ScatterND.

Integer inputs (indices, k) arrive as float64 (the reference convention) and are handed to the evaluator as
int64. TopK is NumPy: onnx 1.17's evaluator breaks ties by the higher index (TopK of [1, 3, 3, 3, 0], k 2,
gives indices [3, 1]), where the ONNX spec says the lower index comes first ([1, 2]). ScatterElements is NumPy:
onnx 1.17's evaluator ignores reduction mul, max and min there (data ones [2, 2], indices [[0, 0], [0, 0], [1, 0]],
updates [[2, 3], [5, 7], [11, 13]], mul: it gives [[5, 13], [11, 1]], the last write, not [[10, 273], [11, 1]]).
ScatterND is NumPy too: the evaluator's max and min fail on k = 2 tuples into rank-3 data ("could not broadcast").
"""
from __future__ import annotations

import numpy as np

from reference._onnx import run


def as_int(values) -> np.ndarray:
    return np.asarray(values).astype(np.int64)


def gather_nd(data, indices, *, batch_dims=0):
    return run("GatherND", 13, {"data": data, "indices": as_int(indices)}, batch_dims=batch_dims)


def elements_target(data_shape, indices, axis: int) -> np.ndarray:
    """The flat position in data each element of indices writes: its own coordinates, the axis one replaced."""
    idx = as_int(indices)
    idx = np.where(idx < 0, idx + data_shape[axis], idx)
    grid = list(np.indices(idx.shape))
    grid[axis] = idx
    return np.ravel_multi_index(tuple(grid), data_shape)


REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    """Y = data with updates[p] written (or reduced) into position p with p[axis] = indices[p]."""
    data = np.asarray(data, dtype=np.float64)
    target = elements_target(data.shape, indices, axis % data.ndim).ravel()
    return _scatter(data, target, updates, reduction)


def _scatter(data: np.ndarray, target: np.ndarray, updates, reduction: str) -> np.ndarray:
    """data with updates written (reduction none) or reduced into the flat positions `target`, in order."""
    y, u = data.ravel().copy(), np.asarray(updates, dtype=np.float64).ravel()
    if reduction == "none":
        y[target] = u
    else:
        REDUCE[reduction].at(y, target, u)
    return y.reshape(data.shape)


def nd_target(data_shape, indices) -> np.ndarray:
    """The flat positions in data of the slices the index tuples (indices' last dim) name, one row per tuple."""
    idx = as_int(indices)
    k = idx.shape[-1]
    rest = int(np.prod(data_shape[k:], dtype=np.int64))
    tuples = idx.reshape(-1, k)
    tuples = np.where(tuples < 0, tuples + np.asarray(data_shape[:k]), tuples)
    lin = np.ravel_multi_index(tuple(tuples.T), data_shape[:k])
    return (lin[:, None] * rest + np.arange(rest)[None, :]).ravel()


def scatter_nd(data, indices, updates, *, reduction="none"):
    """Y = data with updates[m] written (or reduced) into the slice data[indices[m]]."""
    data = np.asarray(data, dtype=np.float64)
    target = nd_target(data.shape, indices)
    return _scatter(data, target, updates, reduction)


def topk_order(X, k: int, axis: int, largest: int) -> np.ndarray:
    """The positions along axis of the k selected elements, best first; equal values: the lower index first."""
    X = np.asarray(X, dtype=np.float64)
    keys = -X if largest else X
    return np.take(np.argsort(keys, axis=axis, kind="stable"), np.arange(k), axis=axis)


def topk(X, K, *, axis=-1, largest=1, sorted=1):
    """(Values, Indices) of the k largest (or smallest) elements along axis, in order (sorted 0 leaves the
    order free: this reference keeps it sorted)."""
    X = np.asarray(X, dtype=np.float64)
    axis = axis % X.ndim
    order = topk_order(X, int(as_int(K).ravel()[0]), axis, largest)
    return np.take_along_axis(X, order, axis=axis), order


def trilu(input, k=None, *, upper=1):
    return run("Trilu", 14, {"input": input, "k": None if k is None else as_int(k)}, upper=upper)
