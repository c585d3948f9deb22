"""GatherGrad and GatherElementsGrad (com.microsoft): the forward op's gradient scattered back into a
zero tensor of the forward input's shape, which the `shape` input holds as values. Several indices
naming one position add up (float64, in index order)."""
from __future__ import annotations

import math

import numpy as np

from reference.forward.gather import as_indices, element_grid


def _dims(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in np.asarray(shape).ravel())


def gather_grad(shape, indices, dY, *, axis=0):
    """dX = zeros(shape); dX[..., indices[j], ...] += dY[..., j, ...] along axis."""
    dims = _dims(shape)
    axis = axis % len(dims)
    outer, n, inner = math.prod(dims[:axis]), dims[axis], math.prod(dims[axis + 1:])
    idx = as_indices(indices, n).ravel()
    dx = np.zeros((outer, n, inner))
    np.add.at(dx, (slice(None), idx, slice(None)), np.asarray(dY, np.float64).reshape(outer, idx.size, inner))
    return dx.reshape(dims)


def gather_elements_grad(dY, shape, indices, *, axis=0):
    """dX = zeros(shape); dX[p with p[axis] = indices[p]] += dY[p]."""
    dims = _dims(shape)
    axis = axis % len(dims)
    dx = np.zeros(dims)
    np.add.at(dx, element_grid(indices, axis, dims[axis]), np.asarray(dY, np.float64))
    return dx


def _shape_problem(shape, axis) -> tuple[str | None, tuple[int, ...], int]:
    if shape.ndim != 1:
        return f"shape must be 1-D (the forward input's dims), got shape {list(shape.shape)}", (), 0
    dims = _dims(shape)
    if not dims:
        return "shape is empty: the forward input needs rank >= 1", (), 0
    if min(dims) < 0:
        return f"shape holds a negative dim: {list(dims)}", dims, 0
    if not -len(dims) <= axis < len(dims):
        return f"axis {axis} is outside [{-len(dims)}, {len(dims) - 1}] for a rank-{len(dims)} forward input", dims, 0
    return None, dims, axis % len(dims)


def _index_problem(indices, dim: int) -> str | None:
    idx = np.asarray(indices)
    bad = (idx < -dim) | (idx >= dim)
    if bad.any():
        return f"indices holds {int(idx[bad].ravel()[0])}, outside [{-dim}, {dim - 1}] for dim {dim} of the forward input"
    return None


def gather_grad_check(inputs, attributes) -> str | None:
    """valid_values: shape is the forward input's dims, dY Gather's output shape, every index in range."""
    shape, indices, dy = inputs["shape"], inputs["indices"], inputs["dY"]
    problem, dims, axis = _shape_problem(shape, attributes["axis"])
    if problem:
        return problem
    want = (*dims[:axis], *indices.shape, *dims[axis + 1:])
    if tuple(dy.shape) != want:
        return (f"dY has shape {list(dy.shape)}; Gather of shape {list(dims)} by indices {list(indices.shape)} at axis {axis} "
                f"gives {list(want)}")
    return _index_problem(indices, dims[axis])


def gather_elements_grad_check(inputs, attributes) -> str | None:
    """valid_values: shape is the forward input's dims, indices of its rank and no larger off the axis,
    dY of indices' shape, every index in range."""
    shape, indices, dy = inputs["shape"], inputs["indices"], inputs["dY"]
    problem, dims, axis = _shape_problem(shape, attributes["axis"])
    if problem:
        return problem
    if indices.ndim != len(dims):
        return f"indices has rank {indices.ndim}; the forward input has rank {len(dims)}"
    if tuple(dy.shape) != tuple(indices.shape):
        return f"dY has shape {list(dy.shape)}; GatherElements' output has indices' shape {list(indices.shape)}"
    over = [d for d in range(len(dims)) if d != axis and indices.shape[d] > dims[d]]
    if over:
        return (f"indices dim {over[0]} is {indices.shape[over[0]]}, larger than the forward input's {dims[over[0]]} "
                f"(only the axis may differ)")
    return _index_problem(indices, dims[axis])


def gather_case_shapes(params):
    """{X, indices, shape, dY} from case params {data: X's shape, idx: indices' shape, axis?, dY?}; dY is
    Gather's output shape unless given (invalid cases)."""
    data, idx = tuple(params["data"]), tuple(params["idx"])
    if params.get("dY") is not None:
        dy = tuple(params["dY"])
    else:
        axis = params.get("axis", 0) % len(data)
        dy = (*data[:axis], *idx, *data[axis + 1:])
    return {"X": data, "indices": idx, "shape": (len(data),), "dY": dy}


def gather_elements_case_shapes(params):
    """{X, indices, shape, dY} from case params {data: X's shape, idx: indices' shape}; dY is indices' shape."""
    data, idx = tuple(params["data"]), tuple(params["idx"])
    return {"X": data, "indices": idx, "shape": (len(data),), "dY": idx}


def _most_repeated(indices, dim: int) -> int:
    """The most times one index value occurs: the longest sum one element of dX receives (per outer slice)."""
    idx = as_indices(indices, dim).ravel()
    return int(np.bincount(idx, minlength=1).max()) if idx.size else 1


def gather_grad_reduction_length(shape, indices, dY, *, axis=0):
    dims = _dims(shape)
    return max(1, _most_repeated(indices, dims[axis % len(dims)]))


def gather_grad_magnitude(shape, indices, dY, *, axis=0):
    return gather_grad(shape, indices, np.abs(dY), axis=axis)


def gather_elements_grad_reduction_length(dY, shape, indices, *, axis=0):
    """Upper bound: the most times one index value occurs anywhere (a sum never has more terms)."""
    dims = _dims(shape)
    return max(1, _most_repeated(indices, dims[axis % len(dims)]))


def gather_elements_grad_magnitude(dY, shape, indices, *, axis=0):
    return gather_elements_grad(np.abs(dY), shape, indices, axis=axis)


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_gather_bytes(shapes, attributes, params):
    """dX written, dY and the indices read."""
    return (math.prod(params["data"]) + math.prod(shapes["dY"])) * 4 + math.prod(shapes["indices"]) * 8


def bench_indices_bytes(shapes, attributes):
    """The int64 indices' bytes, whatever the float type."""
    return math.prod(shapes["indices"]) * 8


def bench_gather_elements_bytes(shapes, attributes, params):
    """dX written, dY and the indices read."""
    return math.prod(params["data"]) * 4 + math.prod(shapes["indices"]) * (4 + 8)


def bench_torch_gather(inputs, attributes):
    """An embedding table's gradient (axis 0 of a matrix, non-negative indices, as torch takes them):
    embedding_dense_backward; any other axis or rank (an RNN's last step, Gather axis 1 of a scalar index): the
    indexed rows added into zeros (index_add_, what the backward of torch's index_select does)."""
    import torch

    from reference._torch import tensors

    _, indices, dy = tensors(*inputs)
    shape = [int(d) for d in inputs[0]]
    axis = int(attributes.get("axis") or 0) % len(shape)
    if axis == 0 and len(shape) == 2:
        return lambda: torch.ops.aten.embedding_dense_backward(dy, indices, shape[0], -1, False)
    flat = indices.reshape(-1) % shape[axis]
    rows = dy.reshape(shape[:axis] + [flat.numel()] + shape[axis + 1:])
    return lambda: torch.zeros(shape, dtype=dy.dtype).index_add_(axis, flat, rows)


def bench_torch_gather_elements(inputs, attributes):
    import torch

    from reference._torch import tensors

    dy, _, indices = tensors(*inputs)
    x = torch.empty([int(d) for d in inputs[1]])
    return lambda: torch.ops.aten.gather_backward(dy, x, attributes["axis"], indices, False)


# ---- model: a real graph's node -> case params (cases.from_node) -----------------------------------------------

def _index_dtypes(node) -> dict:
    """Tind and I as the node's indices and shape dtypes give them (int64 is the specs' default)."""
    picked = {"Tind": node.dtypes.get("indices"), "I": node.dtypes.get("shape")}
    return {k: v for k, v in picked.items() if v and v != "int64"}


def _data_shape(node) -> list[int]:
    """X's shape: the `shape` input's values (Shape(X) as the graph's shape inference folds it, or an initializer)."""
    try:
        return [int(d) for d in node.value("shape")]
    except KeyError:
        raise KeyError(f"{node.op}'s shape input is not a value of the graph: X's shape (the gathered dim) is unknown") from None


def gather_from_node(node):
    """GatherGrad: data = X's shape (the shape input's values), idx = indices' shape ([] for a scalar index, as
    `h[:, 0]` writes it); Tind / I when the node's indices / shape are int32."""
    return {"data": _data_shape(node), "idx": list(node.shape("indices")), **_index_dtypes(node)}


def gather_elements_from_node(node):
    """GatherElementsGrad: data = X's shape (the shape input's values), idx = indices' (and dY's) shape."""
    return {"data": _data_shape(node), "idx": list(node.shape("indices")), **_index_dtypes(node)}
