"""ReduceSumTraining (com.microsoft): ReduceSum-13 with the axes as an input, a computation of the gradient graph
(the builder's reduction of a broadcast gradient, a bias gradient). Written as one np.sum over the reduced axes; the
axis rules (negative axes, empty axes with noop_with_empty_axes) are reference.ops.reductions' reduced_axes, shared
with the ReduceSum specs. tests/test_reduce_sum_training.py proves the reference against onnx's ReduceSum-13
(reference.forward.reductions:reduce_sum, onnx's evaluator), never this module's code path."""
from __future__ import annotations

import math

import numpy as np

from reference.ops.reductions import _problem, reduced_axes


def reduce_sum_training(data, axes, *, keepdims=1, noop_with_empty_axes=0):
    """reduced = sum of data over the axes (all when axes is empty, none with noop_with_empty_axes = 1)."""
    x = np.asarray(data, dtype=np.float64)
    ax = reduced_axes(x.ndim, axes, noop_with_empty_axes)
    return np.sum(x, axis=ax, keepdims=bool(keepdims)) if ax else x.copy()


def check(inputs, attributes) -> str | None:
    """valid_values: axes 1-D, every axis in [-r, r-1], none named twice."""
    data, axes = inputs["data"], inputs["axes"]
    if axes.ndim != 1:
        return f"axes must be 1-D, got shape {list(axes.shape)}"
    return _problem(data.shape, axes.astype(np.int64), attributes.get("noop_with_empty_axes", 0),
                    attributes.get("keepdims", 1), None)


def case_shapes(params):
    """{data, axes} from `shape` (data's) and `axes` (the values the group's axes input holds)."""
    shape = [int(d) for d in params["shape"]]
    return {"data": shape, "axes": [len(params["axes"])]}


def reduction_length(data, axes, *, keepdims=1, noop_with_empty_axes=0) -> int:
    """K of the accuracy term: the number of elements summed into one output."""
    ax = reduced_axes(np.ndim(data), axes, noop_with_empty_axes)
    return max(1, math.prod(np.shape(data)[a] for a in ax))


# ---- bench --------------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes, params):
    """data read (4 bytes an element); the reduced output is small beside it."""
    return math.prod(params["shape"]) * 4


def bench_torch(inputs, attributes):
    import torch

    from reference._torch import tensors

    x, axes = inputs
    (t,) = tensors(x)
    dims = [int(a) for a in axes]
    keep = bool(attributes.get("keepdims", 1))
    return lambda: torch.sum(t, dim=dims, keepdim=keep)


# ---- cases.from_node: a real graph's ReduceSumTraining node -> case params ---------------------------------------

def from_node(node) -> dict:
    """`shape` = data's, `axes` = the axes input's values (the builder writes them as a constant); keepdims and
    noop_with_empty_axes are the node's attributes (match()'s)."""
    return {"shape": list(node.shape("data")), "axes": [int(a) for a in node.value("axes")]}
