"""Vector-Jacobian products of the reductions a training graph differentiates with standard ops (ReduceSum,
ReduceMean, ReduceL2, ReduceLogSumExp, GlobalAveragePool), written from the math, and their case hooks.

Every VJP first puts dY back on the reduced axes (size 1, whatever keepdims was) and broadcasts it over the
input's shape; the reduction's own derivative then multiplies it: 1 (sum), 1/N (mean, N the number of
elements reduced into each output), X / Y (L2 norm), exp(X - Y) (log-sum-exp, the softmax of the slice).
The reduced axes: the axes given (negative ones count from the end); none given means every axis, or
none at all with noop_with_empty_axes = 1 (the op is then the identity).
"""
from __future__ import annotations

import math

import numpy as np

from reference._math import normalize_axis


def reduced_axes(rank: int, axes, noop_with_empty_axes=0) -> tuple[int, ...]:
    """The axes reduced, normalised and sorted; ValueError for an axis out of range or named twice."""
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        return () if noop_with_empty_axes else tuple(range(rank))
    listed = [normalize_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)]
    if len(set(listed)) != len(listed):
        raise ValueError(f"axes {[int(a) for a in np.asarray(axes).reshape(-1)]} name an axis twice")
    return tuple(sorted(listed))


def _kept_shape(shape, axes) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _expand(dY, shape, axes) -> np.ndarray:
    """dY (keepdims or not) broadcast back over the input's shape."""
    dY = np.asarray(dY, dtype=np.float64)
    return np.broadcast_to(dY.reshape(_kept_shape(shape, axes)), shape)


def reduce_sum_vjp(dY, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """dX = dY broadcast over the reduced axes."""
    ax = reduced_axes(np.ndim(data), axes, noop_with_empty_axes)
    return np.array(_expand(dY, np.shape(data), ax))


def reduce_mean_vjp(dY, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """dX = dY / N broadcast, N = the number of elements reduced into each output (an empty dX when N = 0)."""
    shape = np.shape(data)
    ax = reduced_axes(len(shape), axes, noop_with_empty_axes)
    n = math.prod(shape[a] for a in ax)
    if n == 0:
        return np.zeros(shape)
    return _expand(dY, shape, ax) / n


def reduce_l2_vjp(dY, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """dX = dY * X / Y with Y = sqrt(sum X^2) over the slice. A slice of zeros has no derivative (the norm's
    cone point); there dX = 0, the subgradient of least norm (and the limit along any path inside the slice's
    span is bounded by |dY|, so no value is right: groups planting one say vjp). No axis reduced
    (noop_with_empty_axes = 1): ONNX makes the op the identity (Y = X, not |X|), so dX = dY."""
    x = np.asarray(data, dtype=np.float64)
    ax = reduced_axes(x.ndim, axes, noop_with_empty_axes)
    g = _expand(dY, x.shape, ax)
    if not ax and x.ndim:  # the identity (noop_with_empty_axes); a 0-d input reduced over its no axes is |x|
        return np.array(g)
    if x.size == 0:
        return np.zeros(x.shape)
    norm = np.sqrt(np.sum(x * x, axis=ax, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm == 0, 0.0, g * x / np.where(norm == 0, 1.0, norm))


def reduce_log_sum_exp_vjp(dY, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """dX = dY * exp(X - Y), Y = log sum exp X over the slice: dY times the slice's softmax (computed from
    the slice's maximum, so large X neither overflows nor loses the ratio)."""
    x = np.asarray(data, dtype=np.float64)
    ax = reduced_axes(x.ndim, axes, noop_with_empty_axes)
    if x.size == 0:
        return np.zeros(x.shape)
    g = _expand(dY, x.shape, ax)
    if not ax:
        return np.array(g)
    e = np.exp(x - np.max(x, axis=ax, keepdims=True))
    return g * e / np.sum(e, axis=ax, keepdims=True)


def global_average_pool_vjp(dY, X):
    """dX = dY / (product of X's spatial dims), broadcast over them (dY has shape [N, C, 1, ..., 1])."""
    shape = np.shape(X)
    n = math.prod(shape[2:])
    if n == 0:
        return np.zeros(shape)
    return np.array(np.broadcast_to(np.asarray(dY, dtype=np.float64), shape)) / n


# ---- shapes and validity -------------------------------------------------------------------------------

def _lenient_out_shape(shape, axes, keepdims, noop) -> list[int]:
    """Y's shape; axes out of range or repeated (invalid groups) are dropped instead of raising, so that an
    invalid case still gets shapes and reaches the backends."""
    rank = len(shape)
    if axes is None or len(axes) == 0:
        ax = set() if noop else set(range(rank))
    else:
        ax = {a % rank for a in axes if rank and -rank <= a < rank}
    if keepdims:
        return [1 if i in ax else n for i, n in enumerate(shape)]
    return [n for i, n in enumerate(shape) if i not in ax]


def case_shapes(params):
    """The axes-as-input form. params: `shape` (data's), `axes` (the values the group's axes input holds;
    left out: the input is omitted), keepdims, noop_with_empty_axes. dY has Y's shape."""
    shape = [int(d) for d in params["shape"]]
    axes = params.get("axes")
    out = _lenient_out_shape(shape, axes, params.get("keepdims", 1), params.get("noop_with_empty_axes", 0))
    return {"data": shape, "axes": None if axes is None else [len(axes)], "dY": out}


def case_shapes_attr(params):
    """The axes-as-attribute form (opsets 13-17): the `axes` param is the attribute."""
    shape = [int(d) for d in params["shape"]]
    out = _lenient_out_shape(shape, params.get("axes"), params.get("keepdims", 1), 0)
    return {"data": shape, "dY": out}


def _problem(shape, axes, noop, keepdims, dy_shape) -> str | None:
    try:
        ax = reduced_axes(len(shape), axes, noop)
    except ValueError as e:
        return str(e)
    want = _kept_shape(shape, ax) if keepdims else tuple(n for i, n in enumerate(shape) if i not in ax)
    if dy_shape is not None and tuple(dy_shape) != tuple(want):
        return f"dY has shape {list(dy_shape)}; the reduction's output has {list(want)}"
    return None


def check_axes_input(inputs, attributes) -> str | None:
    """valid_values: every axis in [-r, r-1] for data of rank r, none named twice, dY of Y's shape."""
    data, axes, dy = inputs["data"], inputs.get("axes"), inputs["dY"]
    if axes is not None and axes.ndim != 1:
        return f"axes must be 1-D, got shape {list(axes.shape)}"
    return _problem(data.shape, None if axes is None else axes.astype(np.int64),
                    attributes.get("noop_with_empty_axes", 0), attributes.get("keepdims", 1), dy.shape)


def check_axes_attr(shapes, attributes) -> str | None:
    """valid_if for the attribute form: the same rules, on the axes attribute."""
    return _problem(shapes["data"], attributes.get("axes"), 0, attributes.get("keepdims", 1), shapes["dY"])


def gap_case_shapes(params):
    shape = [int(d) for d in params["shape"]]
    return {"X": shape, "dY": shape[:2] + [1] * (len(shape) - 2)}


def gap_check(shapes, attributes) -> str | None:
    """valid_if: X of rank >= 3 ([N, C, spatial...]), dY of shape [N, C, 1, ...]."""
    x, dy = shapes["X"], shapes["dY"]
    if len(x) < 3:
        return f"X must have rank >= 3 (N, C and at least one spatial dim), got rank {len(x)}"
    want = tuple(x[:2]) + (1,) * (len(x) - 2)
    if tuple(dy) != want:
        return f"dY has shape {list(dy)}; GlobalAveragePool's output has {list(want)}"
    return None


# ---- the attribute form (schema 13, opsets 13-17): axes an attribute, no noop_with_empty_axes -----------

def reduce_mean_vjp_13(dY, data, *, axes=None, keepdims=1):
    return reduce_mean_vjp(dY, data, axes, keepdims=keepdims)


def reduce_l2_vjp_13(dY, data, *, axes=None, keepdims=1):
    return reduce_l2_vjp(dY, data, axes, keepdims=keepdims)


def reduce_log_sum_exp_vjp_13(dY, data, *, axes=None, keepdims=1):
    return reduce_log_sum_exp_vjp(dY, data, axes, keepdims=keepdims)


def from_node(node) -> dict:
    """cases.from_node (ReduceSum, ReduceMean, ReduceL2, ReduceLogSumExp, both forms): `shape` = data's; at
    opset 18 (ReduceSum 13) `axes` = the axes input's constant values when the node has that input (the
    attribute form's axes, keepdims and noop_with_empty_axes are attributes match() adds)."""
    params = {"shape": list(node.shape("data"))}
    if node.shapes.get("axes") is not None:
        params["axes"] = node.value("axes")
    return params


def gap_from_node(node) -> dict:
    """cases.from_node (GlobalAveragePool): `shape` = X's."""
    return {"shape": list(node.shape("X"))}
